/*
 * The Jinja layer: whitespace rules, Python semantics of values and
 * operators, scoping, provenance of output bytes, refused constructs, the
 * limits on untrusted templates, and mutated templates (never a crash).
 * The byte-for-byte comparison with Python's jinja2 on public templates is
 * tests/template/test_templates.py.
 */
#include "jinja/jinja.h"
#include "test_util.h"

/* Renders tpl with data (a JSON object text or NULL) and markup
 * {"add_generation_prompt": true}; the text, or NULL with err. */
static char *R(const char *tpl, const char *data, sp_err *err) {
    sp_jinja *t = sp_jinja_parse(tpl, strlen(tpl), err);
    if (!t) return NULL;
    json_t *d = data ? json_loads(data, 0, NULL) : NULL;
    if (data) assert_non_null(d);
    json_t *m = json_pack("{s:b, s:s}", "add_generation_prompt", 1, "bos_token", "<s>");
    sp_jinja_out o;
    const int rc = sp_jinja_render(t, d, m, 1764767045, &o, err);
    json_decref(d);
    json_decref(m);
    sp_jinja_free(t);
    if (rc) return NULL;
    free(o.from_data);
    return o.text;
}

static void expect(const char *tpl, const char *data, const char *want) {
    sp_err err = { { 0 } };
    char *got = R(tpl, data, &err);
    if (!got) fail_msg("%s: error %s", tpl, err.msg);
    if (strcmp(got, want)) fail_msg("%s:\n got  [%s]\n want [%s]", tpl, got, want);
    free(got);
}

static void expect_err(const char *tpl, const char *data, const char *needle) {
    sp_err err = { { 0 } };
    char *got = R(tpl, data, &err);
    if (got) fail_msg("%s: rendered [%s], expected an error with '%s'", tpl, got, needle);
    if (!strstr(err.msg, needle)) fail_msg("%s: error [%s] lacks '%s'", tpl, err.msg, needle);
}

/* trim_blocks, lstrip_blocks, - and + signs, comments, raw, newlines */
static void test_whitespace(void **state) {
    (void)state;
    expect("{% if true %}\nA\n{% endif %}\nB", NULL, "A\nB");              /* trim_blocks */
    expect("x\n    {% if true %}\n    y\n    {% endif %}\nz", NULL, "x\n    y\nz");   /* lstrip_blocks */
    expect("a  {{- 'b' -}}  c", NULL, "abc");
    expect("a\n  {%- if true -%}  \n b {%- endif %}", NULL, "ab");
    expect("  {%+ if true %}x{% endif %}", NULL, "  x");                    /* + keeps the indent */
    expect("{% if true +%}\nx{% endif %}", NULL, "\nx");                    /* +%} keeps the newline */
    expect("a {# note #}\nb", NULL, "a b");
    expect("  {# note #}\nb", NULL, "b");
    expect("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}");
    expect("{{ 'a' }}\n", NULL, "a");                                       /* one trailing newline dropped */
    expect("{{ 'a' }}\n\n", NULL, "a\n");
    expect("a\r\nb\rc", NULL, "a\nb\nc");
    expect("{{ {'k': {'v': 1}}['k']['v'] }}", NULL, "1");                   /* }} inside brackets */
}

/* Python's operators, precedence and printing */
static void test_expressions(void **state) {
    (void)state;
    expect("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }}",
           NULL, "7 9 1024 3.5 3 -4 2");
    expect("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }}", NULL,
           "a1None ababab [1, 2] True False");
    expect("{{ 'x' if false }}|{{ 'y' if false else 'z' }}|{{ none or 'd' }}|{{ 0 and 1 }}", NULL, "|z|d|0");
    expect("{{ not x is defined }} {{ 'b' in 'abc' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }}", NULL,
           "True True True True");
    expect("{{ -3 | abs }} {{ 'ab' 'cd' }} {{ \"q'\" }} {{ 'a\\tb\\u00e9' }}", NULL, "3 abcd q' a\tbé");
    /* values print as Python prints them */
    expect("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-7 }} {{ 3.0 }} {{ 1.5e300 }} {{ -0.0 }}", NULL,
           "0.30000000000000004 1e+16 1e-07 3.0 1.5e+300 -0.0");
    expect("{{ [1, 'a', none, true, {'k': \"it's\"}] }} {{ (1,) }} {{ x }}", NULL,
           "[1, 'a', None, True, {'k': \"it's\"}] (1,) ");
    expect("{{ s[1:3] }} {{ s[::-1] }} {{ s[-1] }} {{ s | length }} {{ l[-2:] }}", "{\"s\": \"h\u00e9llo\", \"l\": [1,2,3]}",
           "él olléh o 5 [2, 3]");
    expect("{{ '%s and %d' % ('a', 3) }} {{ '{i:d}-{0}'.format('z', i=4) }}", NULL, "a and 3 4-z");
    expect_err("{{ 'a' + 1 }}", NULL, "can only concatenate str");
    expect_err("{{ 1 / 0 }}", NULL, "division by zero");
    expect_err("{{ x.y }}", NULL, "'x' is undefined");
    expect_err("{{ 9223372036854775807 + 1 }}", NULL, "overflow");
}

static void test_filters_tests(void **state) {
    (void)state;
    const char *d = "{\"m\": [{\"role\": \"user\", \"content\": \" hi \"}, {\"role\": \"tool\", \"content\": \"x\"},"
                    " {\"role\": \"user\", \"content\": \"yo\"}], \"o\": {\"b\": 1, \"a\": [1.5, \"\\u0001\"]}}";
    expect("{{ m | selectattr('role', 'equalto', 'user') | map(attribute='content') | map('trim') | join(',') }}", d,
           "hi,yo");
    expect("{{ m | rejectattr('role', 'equalto', 'tool') | list | length }} {{ (m | last).content }}", d, "2 yo");
    expect("{{ o | tojson }}|{{ o | tojson(indent=2) }}|{{ o | tojson(sort_keys=true) }}", d,
           "{\"b\": 1, \"a\": [1.5, \"\\u0001\"]}|{\n  \"b\": 1,\n  \"a\": [\n    1.5,\n    \"\\u0001\"\n  ]\n}|"
           "{\"a\": [1.5, \"\\u0001\"], \"b\": 1}");
    expect("{{ 'é' | tojson }} {{ o | items | list }}", d, "\"é\" [('b', 1), ('a', [1.5, '\\x01'])]");
    expect("{{ x | default('d') }} {{ none | default('d') }} {{ '' | default('d', true) }} {{ 'Ab' | upper }}{{ 'Ab' | lower }}",
           NULL, "d None d ABab");
    expect("{{ [3, 1, 2] | sort | list }} {{ ['b', 'A'] | sort | first }} {{ [1, 2, 2] | unique | list }} {{ [1, 2] | sum }}",
           NULL, "[1, 2, 3] A [1, 2] 3");
    expect("{{ 'a\\nb' | indent(2, true) }}|{{ '  x ' | trim }}|{{ 'x-y' | replace('-', '+') }}", NULL, "  a\n  b|x|x+y");
    expect("{{ x is undefined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ 3 is odd }} "
           "{{ 0 is false }} {{ x is iterable }} {{ 4 is divisibleby 2 }}", NULL,
           "True True True True True False True True");
}

/* for, set, namespace, macros, loop.*, break/continue */
static void test_statements(void **state) {
    (void)state;
    expect("{% for x in [1, 2, 3] %}{{ loop.index }}{{ '.' if not loop.last }}{% endfor %}", NULL, "1.2.3");
    expect("{% for x in [1, 2, 3] if x != 2 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}", NULL, "1232");
    expect("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", NULL, "empty");
    expect("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", NULL, "a=1;b=2;");
    expect("{% for x in 'ab' %}{{ loop.previtem }}|{{ x }}|{{ loop.nextitem }};{% endfor %}", NULL, "|a|b;a|b|;");
    expect("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
           "{{ x }}{% endfor %}", NULL, "13");
    /* a set inside a loop stays inside it (and in its iteration); a namespace carries values out */
    expect("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 5 %}{% endfor %}{{ x }}", NULL, "111");
    expect("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", NULL,
           "6");
    expect("{% if true %}{% set y = 2 %}{% endif %}{{ y }}", NULL, "2");
    expect("{% set a, b = [1, 2] %}{{ b }}{{ a }}", NULL, "21");
    expect("{% set t %}x{{ 1 + 1 }}{% endset %}{{ t }}{{ t | length }}", NULL, "x22");
    expect("{% macro f(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}", NULL, "[1B][23]");
    expect("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}",
           NULL, "120");
    expect("{% filter upper %}ab{{ 'c' }}{% endfilter %}", NULL, "ABC");
    expect("{% generation %}kept{% endgeneration %}", NULL, "kept");
    expect("{{ strftime_now('%Y-%m-%d %H:%M') }} {{ range(3) | list }}", NULL, "2025-12-03 13:04 [0, 1, 2]");
    expect_err("{{ raise_exception('Roles must alternate') }}", NULL, "Roles must alternate");
    expect_err("{% set l = [] %}{{ l.append(1) }}", NULL, "unsafe");
    expect_err("{% set x = 1 %}{% set x.y = 2 %}", NULL, "non-namespace");
}

/* Which output bytes came from the data */
static void test_provenance(void **state) {
    (void)state;
    const char *tpl = "{{ '<a>' + m.content | trim + '</a>' }}|{{ m.role | upper }}|{{ [m.role] }}|{{ bos_token }}";
    sp_err err;
    sp_jinja *t = sp_jinja_parse(tpl, strlen(tpl), &err);
    assert_non_null(t);
    json_t *d = json_pack("{s:{s:s, s:s}}", "m", "role", "user", "content", "  hi ");
    json_t *m = json_pack("{s:s}", "bos_token", "<s>");
    sp_jinja_out o;
    assert_int_equal(sp_jinja_render(t, d, m, 0, &o, &err), 0);
    assert_string_equal(o.text, "<a>hi</a>|USER|['user']|<s>");
    const char *want = "000110000" "0" "1111" "0" "00111100" "0" "000";
    assert_int_equal(o.len, strlen(want));
    for (size_t i = 0; i < o.len; i++)
        if (o.from_data[i] != (want[i] == '1')) fail_msg("byte %zu ('%c'): from_data %d", i, o.text[i], o.from_data[i]);
    sp_jinja_out_free(&o);
    json_decref(d);
    json_decref(m);
    sp_jinja_free(t);
}

/* Unsupported constructs and syntax errors are named at parse time. */
static void test_refused(void **state) {
    (void)state;
    static const struct { const char *tpl, *needle; } cases[] = {
        { "{% extends 'base.html' %}", "extends" },
        { "{% include 'x' %}", "include" },
        { "{% import 'x' as y %}", "import" },
        { "{% call f() %}x{% endcall %}", "call" },
        { "{% do x.append(1) %}", "do" },
        { "{% for x in y recursive %}{% endfor %}", "recursive" },
        { "{{ x | wordwrap }}", "unsupported filter 'wordwrap'" },
        { "{% if x is prime %}{% endif %}", "unsupported test 'prime'" },
        { "{{ s.casefold() }}", "unsupported method '.casefold()'" },
        { "{% frobnicate %}", "unknown statement" },
        { "{% if x %}", "missing '{% endif %}'" },
        { "{% endfor %}", "unexpected '{% endfor %}'" },
        { "{% break %}", "outside a loop" },
        { "{{ 'abc }}", "unterminated string" },
        { "{# never closed", "unclosed comment" },
        { "{{ x ", "unclosed tag" },
        { "{{ f(*args) }}", "*args" },
        { "{{ x ) }}", "unbalanced" },
        { "{{ '\\x4' }}", "escape" },
        { "{{ 99999999999999999999 }}", "too large" },
        { "line1\n{{ x + }}", "line 2" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) expect_err(cases[i].tpl, NULL, cases[i].needle);
}

/* Hostile templates end with an error, quickly. */
static void test_limits(void **state) {
    (void)state;
    char deep[4096];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 500; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 500; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    expect_err(deep, NULL, "nested too deeply");
    expect_err("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, "nested over");
    expect_err("{{ range(100000000) | length }}", NULL, "range()");
    expect_err("{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}", NULL, "steps");
    expect_err("{{ 'x' * 1000000000 }}", NULL, "repeated");
    expect_err("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
               "{% endfor %}{{ ns.s | length }}", NULL, "MiB");
    expect_err("{% for i in range(1000000) %}{{ 'abcdefghijklmnopqrstuvwxyz' * 100 }}{% endfor %}", NULL, "MiB");
}

/* Mutated templates (flipped, inserted and deleted bytes) parse or fail
 * with a message, and render or fail with a message: never a crash, a
 * hang or a leak (this binary runs under ASan and UBSan). */
static void test_mutations(void **state) {
    (void)state;
    static const char *const seeds[] = {
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
        "Hi<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
        "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
        "{%- set ns = namespace(sys='') -%}{%- for m in messages -%}{%- if m.role == 'system' -%}{%- set ns.sys = m.content"
        " | trim -%}{%- elif m.role == 'user' -%}[INST] {{ ns.sys ~ m.content }} [/INST]{%- else -%}{{ m.content }}</s>"
        "{%- endif -%}{%- endfor -%}",
        "{% macro t(s) %}{% if s.type == 'array' %}list[{{ t(s['items']) }}]{% elif s is mapping %}dict{% else %}Any"
        "{% endif %}{% endmacro %}{% for tool in tools or [] %}{{ tool.function.name }}({{ t(tool.function.parameters) }})"
        "{{ tool | tojson(indent=2) }}{% endfor %}{{ messages | selectattr('role', 'equalto', 'user') | map(attribute="
        "'content') | join(', ') }}{{ '%s' | format(messages | length) }}{{ messages[-1:] | list }}",
    };
    const char *data = "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": "
                       "\"q \\u00e9\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                       "\"parameters\": {\"type\": \"array\", \"items\": {\"type\": \"object\"}}}}]}";
    json_t *d = json_loads(data, 0, NULL);
    assert_non_null(d);
    static const char alphabet[] = "{}%#-+()[]|.,:'\"=!<>~*/ \n\\abcdefghijklmnopqrstuvwxyz0123456789_";
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int parsed = 0, rendered = 0;
    for (int it = 0; it < 3000; it++) {
        const char *seed = seeds[it % 3];
        size_t n = strlen(seed);
        char *s = malloc(n + 16);
        memcpy(s, seed, n);
        int edits = 1 + (int)((rng >> 7) % 4);
        for (int e = 0; e < edits; e++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)((rng >> 33) % (n ? n : 1));
            int op = (int)((rng >> 20) % 3);
            char ch = alphabet[(rng >> 40) % (sizeof alphabet - 1)];
            if (op == 0 && n) s[at] = ch;
            else if (op == 1) { memmove(s + at + 1, s + at, n - at); s[at] = ch; n++; }
            else if (n) { memmove(s + at, s + at + 1, n - at - 1); n--; }
        }
        sp_err err = { { 0 } };
        sp_jinja *t = sp_jinja_parse(s, n, &err);
        if (!t) assert_true(strncmp(err.msg, "template", 8) == 0);
        else {
            parsed++;
            sp_jinja_out o;
            err.msg[0] = 0;
            if (sp_jinja_render(t, d, NULL, 0, &o, &err) == 0) {
                rendered++;
                assert_int_equal(strlen(o.text), o.len);
                sp_jinja_out_free(&o);
            } else assert_true(err.msg[0] != 0);
            sp_jinja_free(t);
        }
        free(s);
    }
    print_message("# mutations: %d of 3000 parsed, %d rendered\n", parsed, rendered);
    assert_true(parsed > 300 && rendered > 100);   /* the mutations reach the renderer */
    json_decref(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_expressions),
        cmocka_unit_test(test_filters_tests),
        cmocka_unit_test(test_statements),
        cmocka_unit_test(test_provenance),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
