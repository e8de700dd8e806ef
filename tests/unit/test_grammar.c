/* Unit tests for GBNF parsing and text-level matching (grammar/gbnf.c,
 * grammar/match.c, sp_gmatch_forced_text of grammar/mask.c). */
#include "test_util.h"
#include "base/base.h"
#include "grammar/grammar.h"

/* JSON, written in the shape of llama.cpp's grammars/json.gbnf: a rule's
 * body continues on the next lines inside parentheses, escapes in classes. */
static const char *JSON_GBNF =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "\n"
    "# optional space after a token, bounded\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static const char *ARITH_GBNF =
    "root  ::= (expr \"=\" ws term \"\\n\")+\n"
    "expr  ::= term ([-+*/] term)*\n"
    "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
    "ident ::= [a-z] [a-z0-9_]* ws\n"
    "num   ::= [0-9]+ ws\n"
    "ws    ::= [ \\t\\n]*\n";

static const char *LIST_GBNF =
    "root ::= item+\n"
    "# Excludes various line break characters\n"
    "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";

static sp_grammar *parse_ok(const char *text) {
    sp_err e = { { 0 } };
    sp_grammar *g = sp_grammar_parse(text, strlen(text), &e);
    if (!g) fprintf(stderr, "# unexpected parse error: %s\n", e.msg);
    assert_non_null(g);
    return g;
}

/* Parsing fails and the message contains `want` (position and cause). */
static void parse_fails(const char *text, size_t len, const char *want) {
    sp_err e = { { 0 } };
    sp_grammar *g = sp_grammar_parse(text, len, &e);
    if (g) fprintf(stderr, "# parsed, should not: %.60s\n", text);
    if (g) sp_grammar_free(g);
    assert_null(g);
    if (!strstr(e.msg, want)) fprintf(stderr, "# got \"%s\", want \"%s\"\n", e.msg, want);
    assert_non_null(strstr(e.msg, want));
}
#define PARSE_FAILS(text, want) parse_fails(text, strlen(text), want)

/* Is text a complete sentence of g?  (Fed in one call.) */
static bool matches(const sp_grammar *g, const char *text) {
    sp_err e;
    sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &e);
    assert_non_null(m);
    bool ok = sp_gmatch_accept_bytes(m, text, strlen(text), &e) == 0 && sp_gmatch_can_end(m);
    sp_gmatch_free(m);
    return ok;
}

static bool matches_src(const char *gbnf, const char *text) {
    sp_grammar *g = parse_ok(gbnf);
    bool ok = matches(g, text);
    sp_grammar_free(g);
    return ok;
}

/* ------------------------------------------------------------------------
 * Parsing
 * ---------------------------------------------------------------------- */
static void test_parse_examples(void **state) {
    (void)state;
    const char *ok[] = { JSON_GBNF, ARITH_GBNF, LIST_GBNF,
                         "root ::= \"a\"{2,3} \"b\"{2} \"c\"{1,} \"d\"{0,2} \"e\"?\n",
                         "root ::= [a-z]\n# comment only line\n\n  # indented comment\n",
                         "root ::= \"x\" |\n  \"y\"\n  | \"z\" # alternatives on continuation lines\n",
                         "root::=\"a\"", "root ::= \"\" | ( ) | (\"a\" | )", "root ::= \"\\-\\[\\]\\u00e9\\U0001F600\"" };
    for (size_t k = 0; k < sizeof ok / sizeof *ok; k++) {
        sp_grammar *g = parse_ok(ok[k]);
        assert_true(sp_grammar_n_rules(g) >= 1);
        sp_grammar_free(g);
    }
}

static void test_parse_rule_counts(void **state) {
    (void)state;
    sp_grammar *g = parse_ok("root ::= a b\na ::= \"x\"\nb ::= \"y\"\n");
    assert_int_equal(sp_grammar_n_rules(g), 3);
    sp_grammar_free(g);
    g = parse_ok("root ::= (\"x\")*\n");                   /* group + star rule */
    assert_int_equal(sp_grammar_n_rules(g), 3);
    sp_grammar_free(g);
}

static void test_parse_errors(void **state) {
    (void)state;
    PARSE_FAILS("root ::= foo\n", "line 1, column 10: undefined rule 'foo'");
    PARSE_FAILS("a ::= \"x\"\n", "no rule named \"root\"");
    PARSE_FAILS("", "no rule named \"root\"");
    PARSE_FAILS("root ::= \"abc\n", "line 1, column 10: unterminated literal");
    PARSE_FAILS("root ::=\n  \"a\\q\"\n", "line 2, column 5: unknown escape '\\q'");
    PARSE_FAILS("root ::= \"\\x4\"", "line 1, column 11: escape needs 2 hex digits");
    PARSE_FAILS("root ::= \"\\U00110000\"", "past U+10FFFF");
    PARSE_FAILS("root ::= [z-a]\n", "line 1, column 11: reversed range");
    PARSE_FAILS("root ::= []\n", "line 1, column 10: empty character class");
    PARSE_FAILS("root ::= [abc\n", "line 1, column 10: unterminated character class");
    PARSE_FAILS("root ::= a\na ::= a \"x\" | \"y\"\n", "line 2, column 1: left recursion: rule 'a'");
    PARSE_FAILS("root ::= b \"x\"\nb ::= c\nc ::= \"\" | root\n", "left recursion");
    PARSE_FAILS("root ::= (\"a\"?)*\n", "left recursion");
    PARSE_FAILS("root ::= \"a\" )\n", "line 1, column 14: unexpected ')'");
    PARSE_FAILS("root ::= (\"a\"\n", "line 1, column 10: unclosed '('");
    PARSE_FAILS("root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' is already defined");
    PARSE_FAILS("root ::= * \"a\"\n", "line 1, column 10: '*' has nothing to repeat");
    PARSE_FAILS("root ::= \"a\"{3,2}\n", "line 1, column 13: repetition {3,2}");
    PARSE_FAILS("root ::= \"a\"{1001}\n", "repetition count over 1000");
    PARSE_FAILS("root ::= \"a\"{,2}\n", "expected {m}, {m,} or {m,n}");
    PARSE_FAILS("root \"a\"\n", "line 1, column 6: expected '::='");
    PARSE_FAILS("::= \"a\"\n", "line 1, column 1: expected a rule name");
    parse_fails("root ::= \"\xff\"", 13, "line 1, column 11: invalid UTF-8");
    parse_fails("root ::= \"\xed\xa0\x80\"", 15, "invalid UTF-8");   /* a surrogate */
    parse_fails("root ::= \"a\0\"", 12, "line 1, column 10: unterminated literal");
}

static void test_parse_limits(void **state) {
    (void)state;
    /* nesting: 64 groups parse, 65 do not */
    char buf[512];
    for (int depth = 64; depth <= 65; depth++) {
        int w = snprintf(buf, sizeof buf, "root ::= ");
        for (int k = 0; k < depth; k++) buf[w++] = '(';
        w += snprintf(buf + w, sizeof buf - (size_t)w, "\"a\"");
        for (int k = 0; k < depth; k++) buf[w++] = ')';
        buf[w] = 0;
        if (depth == 64) sp_grammar_free(parse_ok(buf));
        else PARSE_FAILS(buf, "line 1, column 74: groups nested deeper than 64");
    }
    /* a repetition bomb is refused quickly, not expanded */
    uint64_t t0 = sp_now_ns();
    /* nested repetitions share their rules: small, although the sentence is
     * a billion characters long */
    sp_grammar *nested = parse_ok("root ::= ((\"a\"{1000}){1000}){1000}\n");
    assert_true(sp_grammar_n_rules(nested) < 10);
    sp_grammar_free(nested);
    size_t bcap = 1100 * 12 + 16;
    char *bomb = malloc(bcap);
    size_t bw = (size_t)snprintf(bomb, bcap, "root ::=");
    for (int k = 0; k < 1100; k++) bw += (size_t)snprintf(bomb + bw, bcap - bw, " \"a\"{1000}");
    PARSE_FAILS(bomb, "expands to more than");
    free(bomb);
    bw = (size_t)snprintf(bomb = malloc(bcap), bcap, "root ::=");
    for (int k = 0; k < 70; k++) bw += (size_t)snprintf(bomb + bw, bcap - bw, " \"a\"{0,1000}");
    PARSE_FAILS(bomb, "more than 65536 rules");
    free(bomb);
    assert_true(sp_now_ns() - t0 < 2000000000ull);
    /* too big a text */
    size_t big = (1u << 20) + 1;
    char *text = malloc(big);
    memset(text, ' ', big);
    parse_fails(text, big, "over the limit");
    free(text);
    /* many rules: a chain of 4000 named rules is fine (no recursion on rules) */
    size_t cap = 4000 * 32;
    char *chain = malloc(cap);
    size_t w = (size_t)snprintf(chain, cap, "root ::= r0\n");
    for (int k = 0; k < 3999; k++) w += (size_t)snprintf(chain + w, cap - w, "r%d ::= r%d\n", k, k + 1);
    snprintf(chain + w, cap - w, "r3999 ::= \"z\"\n");
    sp_grammar *g = parse_ok(chain);
    assert_true(matches(g, "z"));
    sp_grammar_free(g);
    free(chain);
}

/* ------------------------------------------------------------------------
 * Matching text
 * ---------------------------------------------------------------------- */
static void test_match_json(void **state) {
    (void)state;
    sp_grammar *g = parse_ok(JSON_GBNF);
    const char *yes[] = { "{}", "{\"a\":1}", "{ \"a\" : [1, 2.5, -3e7, true, null, \"x\\n\\u00e9\"] }",
                          "{\"k\":{\"n\":{}}}", "{\"caf\xc3\xa9\":\"\xe2\x82\xac\"}", "{\"a\":\"\"}\n" };
    const char *no[] = { "", "[]", "{", "{\"a\"}", "{\"a\":01x}", "{\"a\":\"\x01\"}", "{\"a\":tru}",
                         "{\"a\":\"\\x\"}", "{\"a\":1,}", "{} {}" };
    for (size_t k = 0; k < sizeof yes / sizeof *yes; k++) {
        if (!matches(g, yes[k])) fprintf(stderr, "# should match: %s\n", yes[k]);
        assert_true(matches(g, yes[k]));
    }
    for (size_t k = 0; k < sizeof no / sizeof *no; k++) {
        if (matches(g, no[k])) fprintf(stderr, "# should not match: %s\n", no[k]);
        assert_false(matches(g, no[k]));
    }
    sp_grammar_free(g);
}

static void test_match_arith_and_list(void **state) {
    (void)state;
    sp_grammar *g = parse_ok(ARITH_GBNF);
    assert_true(matches(g, "a+b=c\n"));
    assert_true(matches(g, "(x1 *2) = y\nz=3\n"));
    assert_false(matches(g, "a+=c\n"));
    assert_false(matches(g, "a=b"));                   /* the newline is required */
    sp_grammar_free(g);
    g = parse_ok(LIST_GBNF);
    assert_true(matches(g, "- one\n- two \xc3\xa9\n"));
    assert_false(matches(g, "- \n"));
    assert_false(matches(g, "- a\xe2\x80\xa8z\n"));     /* U+2028 is excluded */
    sp_grammar_free(g);
}

static void test_repetition_bounds(void **state) {
    (void)state;
    const char *g23 = "root ::= \"a\"{2,3}";
    assert_false(matches_src(g23, "a"));
    assert_true(matches_src(g23, "aa"));
    assert_true(matches_src(g23, "aaa"));
    assert_false(matches_src(g23, "aaaa"));
    const char *g2 = "root ::= \"ab\"{2}";
    assert_false(matches_src(g2, "ab"));
    assert_true(matches_src(g2, "abab"));
    assert_false(matches_src(g2, "ababab"));
    const char *g2p = "root ::= [0-9]{2,} \"x\"";
    assert_false(matches_src(g2p, "1x"));
    assert_true(matches_src(g2p, "12x"));
    assert_true(matches_src(g2p, "1234567890x"));
    const char *g03 = "root ::= \"b\" \"a\"{0,3} \"b\"";
    assert_true(matches_src(g03, "bb"));
    assert_true(matches_src(g03, "baaab"));
    assert_false(matches_src(g03, "baaaab"));
    const char *gq = "root ::= \"a\"? \"b\"+ \"c\"*";
    assert_true(matches_src(gq, "b"));
    assert_true(matches_src(gq, "abbbccc"));
    assert_false(matches_src(gq, "aab"));
    assert_false(matches_src(gq, "ac"));
    assert_true(matches_src("root ::= \"x\"{0}", ""));
    assert_false(matches_src("root ::= \"x\"{0}", "x"));
}

static void test_utf8_classes(void **state) {
    (void)state;
    /* Greek letters, then a euro sign fed split across calls */
    sp_grammar *g = parse_ok("root ::= [\\u03b1-\\u03c9]+ \"\xe2\x82\xac\"");
    sp_err e;
    sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &e);
    assert_int_equal(sp_gmatch_accept_bytes(m, "\xce\xb1\xce", 3, &e), 0);  /* alpha + half of beta */
    assert_false(sp_gmatch_can_end(m));
    assert_int_equal(sp_gmatch_accept_bytes(m, "\xb2\xe2", 2, &e), 0);
    assert_int_equal(sp_gmatch_accept_bytes(m, "\x82", 1, &e), 0);
    assert_false(sp_gmatch_can_end(m));                /* mid code point */
    assert_int_equal(sp_gmatch_accept_bytes(m, "\xac", 1, &e), 0);
    assert_true(sp_gmatch_can_end(m));
    sp_gmatch_free(m);

    m = sp_gmatch_create(g, NULL, NULL, &e);
    assert_int_equal(sp_gmatch_accept_bytes(m, "\xce", 1, &e), 0);
    /* U+0380 is below alpha: the second byte decides and is refused */
    assert_int_equal(sp_gmatch_accept_bytes(m, "\x80", 1, &e), -1);
    assert_int_equal(sp_gmatch_accept_bytes(m, "\xb3", 1, &e), 0);         /* gamma still fine */
    /* a lead byte whose code points are all outside every class */
    assert_int_equal(sp_gmatch_accept_bytes(m, "\xd0", 1, &e), -1);
    sp_gmatch_free(m);
    sp_grammar_free(g);

    /* never valid UTF-8, whatever the grammar */
    g = parse_ok("root ::= .*");
    const char *bad[] = { "\xff", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", "\xe2\x28" };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) assert_false(matches(g, bad[k]));
    assert_true(matches(g, "any \xf0\x9f\x98\x80 thing\n\x01"));
    assert_false(matches(g, "\xe2\x82"));              /* incomplete at the end */
    sp_grammar_free(g);
}

static void test_dot_and_negated(void **state) {
    (void)state;
    sp_grammar *g = parse_ok("root ::= \"<\" [^>\\n]* \">\" . [^a-c]");
    assert_true(matches(g, "<x y \xc3\xa9>!d"));
    assert_true(matches(g, "<>\n\xe2\x82\xac"));
    assert_false(matches(g, "<a>b>xd"));
    assert_false(matches(g, "<a\n>xd"));
    assert_false(matches(g, "<a>xb"));
    assert_false(matches(g, "<a>x"));
    sp_grammar_free(g);
    /* a negated class refuses a split code point as soon as its lead rules
     * out every continuation: [^\u0080-\u07ff] has no 2-byte code point */
    g = parse_ok("root ::= [^\\u0080-\\u07ff]");
    sp_err e;
    sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &e);
    assert_int_equal(sp_gmatch_accept_bytes(m, "\xc3", 1, &e), -1);
    assert_int_equal(sp_gmatch_accept_bytes(m, "\xe2", 1, &e), 0);
    sp_gmatch_free(m);
    sp_grammar_free(g);
}

static void test_accept_bytes_error_leaves_matcher(void **state) {
    (void)state;
    sp_grammar *g = parse_ok("root ::= \"abc\" | \"abd\"");
    sp_err e = { { 0 } };
    sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &e);
    assert_int_equal(sp_gmatch_accept_bytes(m, "a", 1, &e), 0);
    assert_int_equal(sp_gmatch_accept_bytes(m, "bx", 2, &e), -1);
    assert_non_null(strstr(e.msg, "byte 1"));
    /* unchanged: still after "a" */
    assert_int_equal(sp_gmatch_accept_bytes(m, "bd", 2, &e), 0);
    assert_true(sp_gmatch_can_end(m));
    assert_true(sp_gmatch_must_end(m));
    assert_int_equal(sp_gmatch_accept_bytes(m, "x", 1, &e), -1);
    sp_gmatch_free(m);
    sp_grammar_free(g);
}

static void test_can_end_vs_must_end(void **state) {
    (void)state;
    sp_grammar *g = parse_ok("root ::= \"a\" \"b\"*");
    sp_err e;
    sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &e);
    assert_false(sp_gmatch_can_end(m));
    assert_int_equal(sp_gmatch_accept_bytes(m, "ab", 2, &e), 0);
    assert_true(sp_gmatch_can_end(m));
    assert_false(sp_gmatch_must_end(m));               /* more b's may follow */
    assert_true(sp_gmatch_active(m));
    assert_false(sp_gmatch_ended(m));
    sp_gmatch_free(m);
    sp_grammar_free(g);
}

static void test_newline_rules(void **state) {
    (void)state;
    /* a rule continues on the next line unless that line starts "name ::=" */
    const char *src = "root ::= \"a\"\n"
                      "  \"b\"   # continued\n"
                      "\n"
                      "  | \"c\"\n"
                      "x ::= \"unused\"\n";
    assert_true(matches_src(src, "ab"));
    assert_true(matches_src(src, "c"));
    assert_false(matches_src(src, "a"));
    /* CRLF line ends */
    assert_true(matches_src("root ::= a\r\na ::= \"q\"\r\n", "q"));
}

static void test_deep_input(void **state) {
    (void)state;
    /* deep nesting in the text: stacks grow with it, nothing recurses */
    sp_grammar *g = parse_ok(JSON_GBNF);
    size_t depth = 20000;
    char *text = malloc(2 * depth + 1);
    for (size_t k = 0; k < depth; k++) { text[k] = '['; text[depth + k] = ']'; }
    text[2 * depth] = 0;
    text[0] = '{';                                     /* root is an object */
    assert_false(matches(g, text));
    sp_err e;
    sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &e);
    assert_int_equal(sp_gmatch_accept_bytes(m, "{\"a\":", 5, &e), 0);
    assert_int_equal(sp_gmatch_accept_bytes(m, text + 1, depth - 1, &e), 0);
    assert_int_equal(sp_gmatch_accept_bytes(m, text + depth, depth - 1, &e), 0);
    assert_int_equal(sp_gmatch_accept_bytes(m, "}", 1, &e), 0);
    assert_true(sp_gmatch_can_end(m));
    sp_gmatch_free(m);
    free(text);
    sp_grammar_free(g);
}

/* ------------------------------------------------------------------------
 * Forced text and lazy triggers (text level)
 * ---------------------------------------------------------------------- */
static void test_forced_text(void **state) {
    (void)state;
    sp_grammar *g = parse_ok("root ::= \"{\\\"name\\\":\" ws name \"}\"\n"
                             "ws ::= \" \"?\n"
                             "name ::= \"\\\"get_weather\\\"\" | \"\\\"get_time\\\"\"\n");
    sp_err e;
    sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &e);
    char buf[64];
    assert_int_equal(sp_gmatch_forced_text(m, buf, sizeof buf), 8);
    assert_string_equal(buf, "{\"name\":");           /* stops: a space may follow or not */
    assert_int_equal(sp_gmatch_accept_bytes(m, buf, 8, &e), 0);
    assert_int_equal(sp_gmatch_forced_text(m, buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    assert_int_equal(sp_gmatch_accept_bytes(m, " \"", 2, &e), 0);
    assert_int_equal(sp_gmatch_forced_text(m, buf, sizeof buf), 4);
    assert_string_equal(buf, "get_");
    assert_int_equal(sp_gmatch_accept_bytes(m, "get_w", 5, &e), 0);
    assert_int_equal(sp_gmatch_forced_text(m, buf, sizeof buf), 8);
    assert_string_equal(buf, "eather\"}");
    /* the cap truncates at a code point boundary, NUL-terminated */
    assert_int_equal(sp_gmatch_forced_text(m, buf, 4), 3);
    assert_string_equal(buf, "eat");
    assert_int_equal(sp_gmatch_accept_bytes(m, "eather\"}", 8, &e), 0);
    assert_true(sp_gmatch_must_end(m));
    assert_int_equal(sp_gmatch_forced_text(m, buf, sizeof buf), 0);
    sp_gmatch_free(m);
    sp_grammar_free(g);

    /* multi-byte forced code points; forced text stops where it may end */
    g = parse_ok("root ::= \"\xe2\x82\xac\" \"x\"?");
    m = sp_gmatch_create(g, NULL, NULL, &e);
    assert_int_equal(sp_gmatch_forced_text(m, buf, sizeof buf), 3);
    assert_string_equal(buf, "\xe2\x82\xac");
    assert_int_equal(sp_gmatch_forced_text(m, buf, 3), 0);   /* does not fit: nothing */
    sp_gmatch_free(m);
    sp_grammar_free(g);
}

static void test_lazy_trigger_text(void **state) {
    (void)state;
    sp_grammar *g = parse_ok("root ::= \"{\" [a-z]* \"}\"");
    sp_err e;
    sp_gmatch *m = sp_gmatch_create(g, NULL, "<call>", &e);
    assert_non_null(m);
    assert_false(sp_gmatch_active(m));
    char buf[8];
    assert_int_equal(sp_gmatch_forced_text(m, buf, sizeof buf), 0);
    assert_int_equal(sp_gmatch_accept_bytes(m, "free text <ca", 13, &e), 0);
    assert_false(sp_gmatch_active(m));
    assert_int_equal(sp_gmatch_accept_bytes(m, "ll>{ab", 6, &e), 0);   /* trigger split across calls */
    assert_true(sp_gmatch_active(m));
    assert_int_equal(sp_gmatch_accept_bytes(m, "!", 1, &e), -1);      /* the grammar applies */
    assert_int_equal(sp_gmatch_accept_bytes(m, "c}", 2, &e), 0);
    assert_true(sp_gmatch_must_end(m));
    sp_gmatch_free(m);

    /* the bytes after the trigger that the grammar refuses are dropped */
    m = sp_gmatch_create(g, NULL, "<call>", &e);
    assert_int_equal(sp_gmatch_accept_bytes(m, "<call>{a!b", 10, &e), 0);
    assert_true(sp_gmatch_active(m));
    assert_int_equal(sp_gmatch_accept_bytes(m, "}", 1, &e), 0);        /* after "{a" */
    assert_true(sp_gmatch_can_end(m));
    sp_gmatch_free(m);

    char longtrig[300];
    memset(longtrig, 'x', sizeof longtrig - 1);
    longtrig[sizeof longtrig - 1] = 0;
    assert_null(sp_gmatch_create(g, NULL, longtrig, &e));
    assert_null(sp_gmatch_create(NULL, NULL, NULL, &e));
    m = sp_gmatch_create(g, NULL, "", &e);             /* "" = not lazy */
    assert_true(sp_gmatch_active(m));
    sp_gmatch_free(m);
    sp_grammar_free(g);
}

/* Hostile grammars: 3000 seeded mutations of the example grammars (a byte
 * replaced, inserted, deleted or a span duplicated) either parse or fail
 * with a positioned message, and a parsed one takes arbitrary input
 * without trouble (ASan watches).  The grammars are untrusted: they come
 * with HTTP requests. */
static void test_mutated_grammars(void **state) {
    (void)state;
    const char *seeds[] = { JSON_GBNF, ARITH_GBNF, LIST_GBNF };
    const char alphabet[] = "()[]{}|*+?\"\\:=-.^ \nazAZ09,#";
    sp_rng rng = { 20261203 };
    int parsed = 0;
    char buf[4096];
    for (int it = 0; it < 3000; it++) {
        const char *src = seeds[it % 3];
        size_t n = strlen(src);
        if (n >= sizeof buf - 64) n = sizeof buf - 64;
        memcpy(buf, src, n);
        for (int k = 1 + (int)(sp_rng_next(&rng) % 3); k > 0; k--) {
            const size_t at = n ? (size_t)(sp_rng_next(&rng) % n) : 0;
            const char c = alphabet[sp_rng_next(&rng) % (sizeof alphabet - 1)];
            switch (sp_rng_next(&rng) % 4) {
            case 0: if (n) buf[at] = c; break;
            case 1: memmove(buf + at + 1, buf + at, n - at); buf[at] = c; n++; break;
            case 2: if (n) { memmove(buf + at, buf + at + 1, n - at - 1); n--; } break;
            default: {
                const size_t len = (size_t)(sp_rng_next(&rng) % 16);
                if (at + len <= n && n + len < sizeof buf) {
                    memmove(buf + at + len, buf + at, n - at);
                    n += len;
                }
            }
            }
        }
        sp_err err;
        sp_grammar *g = sp_grammar_parse(buf, n, &err);
        if (!g) {
            assert_non_null(strstr(err.msg, "grammar"));
            continue;
        }
        parsed++;
        sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &err);
        assert_non_null(m);
        const char *inputs[] = { "{\"a\": [1, 2.5e3, true, null, \"x\"]}", "(1+2)*3", "[a, b, c]", "\xc3\xa9\xff" };
        for (int i = 0; i < 4; i++)
            for (size_t j = 0; inputs[i][j]; j++)
                if (sp_gmatch_accept_bytes(m, inputs[i] + j, 1, &err)) break;
        char forced[64];
        sp_gmatch_forced_text(m, forced, sizeof forced);
        (void)sp_gmatch_can_end(m);
        sp_gmatch_free(m);
        sp_grammar_free(g);
    }
    printf("# %d of 3000 mutated grammars parsed\n", parsed);
    assert_true(parsed > 100 && parsed < 3000);
}

int main(void) {
    sp_base_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_examples),
        cmocka_unit_test(test_parse_rule_counts),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_limits),
        cmocka_unit_test(test_match_json),
        cmocka_unit_test(test_match_arith_and_list),
        cmocka_unit_test(test_repetition_bounds),
        cmocka_unit_test(test_utf8_classes),
        cmocka_unit_test(test_dot_and_negated),
        cmocka_unit_test(test_accept_bytes_error_leaves_matcher),
        cmocka_unit_test(test_can_end_vs_must_end),
        cmocka_unit_test(test_newline_rules),
        cmocka_unit_test(test_deep_input),
        cmocka_unit_test(test_forced_text),
        cmocka_unit_test(test_lazy_trigger_text),
        cmocka_unit_test(test_mutated_grammars),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
