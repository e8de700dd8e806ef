/* Unit tests for JSON Schema -> GBNF (grammar/schema.c): every grammar is
 * parsed with sp_grammar_parse and JSON texts are run through a text-only
 * matcher, so what is checked is the language the schema produces. */
#include "test_util.h"
#include "grammar/grammar.h"

/* ---- helpers ------------------------------------------------------------ */

static sp_grammar *parse_or_die(const char *gbnf) {
    sp_err err = { { 0 } };
    sp_grammar *g = sp_grammar_parse(gbnf, strlen(gbnf), &err);
    if (!g) print_error("grammar does not parse: %s\n%s\n", err.msg, gbnf);
    assert_non_null(g);
    return g;
}

/* Converts a schema that must be supported and parses its grammar. */
static sp_grammar *compile(const char *schema) {
    sp_err err = { { 0 } };
    char *gbnf = sp_schema_to_gbnf(schema, strlen(schema), &err);
    if (!gbnf) print_error("schema refused: %s\n%s\n", err.msg, schema);
    assert_non_null(gbnf);
    sp_grammar *g = parse_or_die(gbnf);
    free(gbnf);
    return g;
}

/* The whole text is a sentence of g. */
static bool accepts(const sp_grammar *g, const char *text) {
    sp_err err = { { 0 } };
    sp_gmatch *m = sp_gmatch_create(g, NULL, NULL, &err);
    assert_non_null(m);
    bool ok = sp_gmatch_accept_bytes(m, text, strlen(text), &err) == 0 && sp_gmatch_can_end(m);
    sp_gmatch_free(m);
    return ok;
}

/* Every text of good is accepted, every text of bad is not (NULL-ended). */
static void check(const char *schema, const char *const *good, const char *const *bad) {
    sp_grammar *g = compile(schema);
    int failures = 0;
    for (; good && *good; good++)
        if (!accepts(g, *good)) print_error("schema %s\n  should accept %s\n", schema, *good), failures++;
    for (; bad && *bad; bad++)
        if (accepts(g, *bad)) print_error("schema %s\n  should reject %s\n", schema, *bad), failures++;
    sp_grammar_free(g);
    assert_int_equal(failures, 0);
}

/* The schema is refused with a message containing `want`. */
static void refused(const char *schema, const char *want) {
    sp_err err = { { 0 } };
    char *gbnf = sp_schema_to_gbnf(schema, strlen(schema), &err);
    if (gbnf) print_error("schema %s\n  should be refused, got\n%s\n", schema, gbnf);
    assert_null(gbnf);
    if (!strstr(err.msg, want)) print_error("schema %s\n  error \"%s\"\n  lacks \"%s\"\n", schema, err.msg, want);
    assert_non_null(strstr(err.msg, want));
}

#define LIST(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* ---- types -------------------------------------------------------------- */

static void test_primitive_types(void **state) {
    (void)state;
    check("{\"type\":\"string\"}",
          LIST("\"\"", "\"hello\"", "\"a \\\"q\\\" \\\\ \\n \\u00e9 \\/\"", "\"caf\xC3\xA9\""),
          LIST("hello", "\"unterminated", "\"bad \\x escape\"", "\"tab\tinside\"", "1", "null"));
    check("{\"type\":\"integer\"}", LIST("0", "-7", "1234567890123456"),
          LIST("01", "1.5", "1e3", "+1", "-", "\"1\"", "12345678901234567" /* 17 digits: over the bound */));
    check("{\"type\":\"number\"}", LIST("0", "-0.5", "3.25", "1e10", "2.5E-3", "-1e+7"),
          LIST(".5", "1.", "01.5", "1e", "NaN", "Infinity", "\"1\""));
    check("{\"type\":\"boolean\"}", LIST("true", "false"), LIST("True", "1", "null"));
    check("{\"type\":\"null\"}", LIST("null"), LIST("nul", "\"null\"", "false"));
    /* no type, no keywords: any JSON value */
    check("{}", LIST("1", "\"s\"", "[1,{\"a\":null}]", "{\"k\": [true]}"), LIST("[1,]", "{a:1}"));
    check("true", LIST("null", "{}"), LIST("nope"));
}

static void test_type_array(void **state) {
    (void)state;
    check("{\"type\":[\"string\",\"null\"]}", LIST("\"x\"", "null"), LIST("1", "true", "[]"));
    /* the string keywords apply to the string alternative only */
    check("{\"type\":[\"string\",\"integer\"],\"maxLength\":2}", LIST("\"ab\"", "12345"), LIST("\"abc\"", "1.5"));
    check("{\"type\":[\"integer\",\"number\"]}", LIST("1", "1.5"), LIST("\"1\""));
}

static void test_enum_and_const(void **state) {
    (void)state;
    check("{\"enum\":[\"celsius\",\"fahrenheit\",1,null,{\"a\":[true]}]}",
          LIST("\"celsius\"", "\"fahrenheit\"", "1", "null", "{\"a\":[true]}", "{ \"a\": [ true ] }"),
          LIST("\"kelvin\"", "\"Celsius\"", "2", "{\"a\":[false]}", "{\"a\":[true],\"b\":1}"));
    /* "type" filters the enum values */
    check("{\"type\":\"string\",\"enum\":[\"a\",1,\"b\"]}", LIST("\"a\"", "\"b\""), LIST("1"));
    check("{\"const\":\"fixed\"}", LIST("\"fixed\""), LIST("\"other\"", "\"fixe\""));
    check("{\"const\":[1,2]}", LIST("[1,2]", "[1, 2]"), LIST("[2,1]", "[1]"));
}

/* ---- objects ------------------------------------------------------------ */

/* A realistic tool: keys in the declared order, optional ones omittable. */
static void test_tool_schema_get_weather(void **state) {
    (void)state;
    const char *schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"location\":{\"type\":\"string\",\"description\":\"City, e.g. Paris\"},"
        "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]},"
        "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":16}},"
        "\"required\":[\"location\"],\"additionalProperties\":false}";
    check(schema,
          LIST("{\"location\":\"Paris\"}",
               "{\"location\": \"Paris\", \"unit\": \"celsius\"}",
               "{\"location\":\"Paris\",\"days\":3}",
               "{\"location\":\"Paris\",\"unit\":\"fahrenheit\",\"days\":3}",
               "{\n  \"location\": \"Paris\",\n  \"days\": 3\n}"),
          LIST("{}",                                                   /* missing required */
               "{\"unit\":\"celsius\"}",                               /* missing required */
               "{\"location\":1}",                                     /* wrong type */
               "{\"location\":\"Paris\",\"unit\":\"kelvin\"}",         /* not in the enum */
               "{\"location\":\"Paris\",\"days\":3.5}",                /* not an integer */
               "{\"location\":\"Paris\",\"days\":17}",                 /* over the maximum */
               "{\"location\":\"Paris\",\"days\":0}",                  /* under the minimum */
               "{\"location\":\"Paris\",\"wind\":true}",               /* extra key */
               "{\"days\":3,\"location\":\"Paris\"}",                  /* not the declared order */
               "{\"location\":\"Paris\",\"days\":3,\"days\":4}",       /* repeated key */
               "{\"location\":\"Paris\",}",                            /* trailing comma */
               "{\"location\":\"Paris\"", "[\"Paris\"]"));
}

static void test_object_optional_layouts(void **state) {
    (void)state;
    /* all optional: any ordered subset, the empty object included */
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
          "\"c\":{\"type\":\"integer\"}}}",
          LIST("{}", "{ }", "{\"a\":1}", "{\"b\":2}", "{\"c\":3}", "{\"a\":1,\"c\":3}", "{\"b\":2,\"c\":3}",
               "{\"a\":1,\"b\":2,\"c\":3}"),
          LIST("{,}", "{\"a\":1,}", "{,\"a\":1}", "{\"c\":3,\"a\":1}", "{\"d\":4}"));
    /* required in the middle */
    check("{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
          "\"c\":{\"type\":\"integer\"}},\"required\":[\"b\"]}",
          LIST("{\"b\":2}", "{\"a\":1,\"b\":2}", "{\"b\":2,\"c\":3}", "{\"a\":1,\"b\":2,\"c\":3}"),
          LIST("{}", "{\"a\":1}", "{\"a\":1,\"c\":3}", "{\"c\":3}"));
    /* all required */
    check("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"boolean\"},\"y\":{\"type\":\"null\"}},"
          "\"required\":[\"x\",\"y\"]}",
          LIST("{\"x\":true,\"y\":null}"), LIST("{\"x\":true}", "{\"y\":null}", "{}"));
    /* no properties, additionalProperties false: only {} */
    check("{\"type\":\"object\"}", LIST("{}", "{ }"), LIST("{\"a\":1}", "[]", "{  }"));
    /* names that need escaping in the grammar */
    check("{\"type\":\"object\",\"properties\":{\"say \\\"hi\\\"\\\\\":{\"type\":\"integer\"}},"
          "\"required\":[\"say \\\"hi\\\"\\\\\"]}",
          LIST("{\"say \\\"hi\\\"\\\\\":1}"), LIST("{\"say hi\":1}"));
}

static void test_additional_properties(void **state) {
    (void)state;
    check("{\"type\":\"object\",\"additionalProperties\":true}",
          LIST("{}", "{\"a\":1}", "{\"a\":{\"b\":[1,2]},\"c\":\"d\"}"), LIST("{\"a\"}", "[]"));
    /* a schema for the extra values; extras come after the declared keys
     * and may not reuse a declared name */
    const char *s = "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},"
                    "\"name\":{\"type\":\"string\"}},\"required\":[\"id\"],"
                    "\"additionalProperties\":{\"type\":\"number\"}}";
    check(s,
          LIST("{\"id\":1}", "{\"id\":1,\"name\":\"n\"}", "{\"id\":1,\"x\":2.5}", "{\"id\":1,\"name\":\"n\",\"x\":1,\"y\":2}",
               "{\"id\":1,\"i\":1}", "{\"id\":1,\"idx\":1}", "{\"id\":1,\"\":1}", "{\"id\":1,\"nam\":1}",
               "{\"id\":1,\"names\":1}"),
          LIST("{\"id\":1,\"x\":\"str\"}", "{\"x\":1,\"id\":1}", "{\"id\":1,\"id\":2}", "{\"id\":1,\"name\":5}",
               "{\"id\":1,\"x\":1,\"name\":\"n\"}"));
    /* all optional, with extras: an extra alone is fine */
    check("{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
          LIST("{}", "{\"a\":1}", "{\"b\":true}", "{\"a\":1,\"b\":true,\"c\":false}"),
          LIST("{\"a\":true}", "{\"b\":1}", "{\"b\":true,\"a\":1}"));
}

/* ---- arrays ------------------------------------------------------------- */

static void test_arrays(void **state) {
    (void)state;
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", LIST("[]", "[1]", "[1, 2,3]", "[ 1 ]"),
          LIST("[1,]", "[,1]", "[\"a\"]", "[1.5]", "1"));
    check("{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":2,\"maxItems\":3}",
          LIST("[\"a\",\"b\"]", "[\"a\",\"b\",\"c\"]"), LIST("[]", "[\"a\"]", "[\"a\",\"b\",\"c\",\"d\"]"));
    check("{\"type\":\"array\",\"minItems\":1}", LIST("[1]", "[null,\"x\",{}]"), LIST("[]"));
    check("{\"type\":\"array\",\"maxItems\":0}", LIST("[]"), LIST("[1]"));
    check("{\"type\":\"array\",\"minItems\":2,\"maxItems\":2,\"items\":{\"type\":\"boolean\"}}",
          LIST("[true,false]"), LIST("[true]", "[true,true,true]"));
    /* tuples */
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
          LIST("[]", "[\"a\"]", "[\"a\",1]"), LIST("[1]", "[\"a\",\"b\"]", "[\"a\",1,2]"));
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"null\"},"
          "\"minItems\":2,\"maxItems\":3}",
          LIST("[\"a\",null]", "[\"a\",null,null]"), LIST("[\"a\"]", "[null,null]", "[\"a\",null,null,null]"));
    check("{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"integer\"}],\"maxItems\":1}", LIST("[]", "[1]"),
          LIST("[1,2]"));
}

/* Integer bounds are exact: every integer in [-1300, 1300] is accepted
 * exactly when it is within the bounds. */
static void test_integer_ranges(void **state) {
    (void)state;
    static const struct { const char *kw; double lo, hi; } cases[] = {
        { "\"minimum\":1,\"maximum\":16", 1, 16 },
        { "\"minimum\":-5,\"maximum\":5", -5, 5 },
        { "\"minimum\":7,\"maximum\":1234", 7, 1234 },
        { "\"minimum\":-1234,\"maximum\":-17", -1234, -17 },
        { "\"minimum\":-99,\"maximum\":1000", -99, 1000 },
        { "\"exclusiveMinimum\":0", 1, 1e18 },
        { "\"maximum\":-3", -1e18, -3 },
        { "\"minimum\":0", 0, 1e18 },
        { "\"exclusiveMinimum\":9,\"exclusiveMaximum\":110", 10, 109 },
        { "\"minimum\":2.5,\"maximum\":7.5", 3, 7 },
        { "\"minimum\":100,\"maximum\":100", 100, 100 },
        { "\"minimum\":0,\"exclusiveMinimum\":3,\"maximum\":50,\"exclusiveMaximum\":60", 4, 50 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char schema[160], text[32];
        snprintf(schema, sizeof schema, "{\"type\":\"integer\",%s}", cases[k].kw);
        sp_grammar *g = compile(schema);
        int wrong = 0;
        for (int v = -1300; v <= 1300; v++) {
            snprintf(text, sizeof text, "%d", v);
            bool want = v >= cases[k].lo && v <= cases[k].hi;
            if (accepts(g, text) != want) print_error("%s: %d %s\n", schema, v, want ? "refused" : "accepted"), wrong++;
        }
        assert_int_equal(wrong, 0);
        /* spellings: no leading zeros, no "-0", no fraction, 16 digits at most */
        assert_false(accepts(g, "007"));
        assert_false(accepts(g, "-0"));
        assert_false(accepts(g, "12.0"));
        if (cases[k].hi > 1e17) {
            assert_true(accepts(g, "9999999999999999"));
            assert_false(accepts(g, "10000000000000000"));
        }
        sp_grammar_free(g);
    }
    /* a nullable bounded integer: the bounds apply to the integer */
    check("{\"type\":[\"integer\",\"null\"],\"minimum\":1,\"maximum\":16}", LIST("null", "1", "16"),
          LIST("0", "17"));
}

/* ---- strings -------------------------------------------------------------- */

static void test_string_lengths(void **state) {
    (void)state;
    check("{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}",
          LIST("\"ab\"", "\"abcd\"", "\"\\n\\t\"", "\"\xC3\xA9t\xC3\xA9\""),    /* an escape or a code point is one */
          LIST("\"a\"", "\"abcde\"", "\"\""));
    check("{\"type\":\"string\",\"maxLength\":0}", LIST("\"\""), LIST("\"a\""));
    check("{\"type\":\"string\",\"minLength\":1}", LIST("\"a\"", "\"abcdefghijklmnop\""), LIST("\"\""));
}

static void test_formats(void **state) {
    (void)state;
    check("{\"type\":\"string\",\"format\":\"date\"}", LIST("\"2024-02-29\"", "\"1999-12-31\""),
          LIST("\"2024-13-01\"", "\"2024-1-01\"", "\"2024-01-32\"", "\"20240101\"", "\"2024-00-10\""));
    check("{\"type\":\"string\",\"format\":\"time\"}", LIST("\"23:59:59Z\"", "\"08:00:00.123+02:00\""),
          LIST("\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00Z\"", "\"12:00:00\""));
    check("{\"type\":\"string\",\"format\":\"date-time\"}",
          LIST("\"2024-05-01T12:30:00Z\"", "\"2024-05-01T12:30:00.5-07:00\""),
          LIST("\"2024-05-01 12:30:00Z\"", "\"2024-05-01\"", "\"2024-05-01T12:30Z\""));
    check("{\"type\":\"string\",\"format\":\"uuid\"}", LIST("\"123e4567-e89b-12d3-a456-426614174000\""),
          LIST("\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""));
    check("{\"type\":\"string\",\"format\":\"email\"}",
          LIST("\"ada@example.com\"", "\"first.last+tag@mail.co.uk\""),
          LIST("\"ada@localhost\"", "\"@example.com\"", "\"ada.@example.com\"", "\"a b@example.com\"",
               "\"ada\""));
}

/* ---- composition ---------------------------------------------------------- */

static void test_any_of_one_of(void **state) {
    (void)state;
    check("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}},"
          "\"required\":[\"k\"]}],\"description\":\"either\"}",
          LIST("5", "{\"k\":\"v\"}"), LIST("\"5\"", "{}", "{\"k\":5}"));
    check("{\"oneOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"type\":\"null\"}]}",
          LIST("\"2024-01-01\"", "null"), LIST("\"soon\""));
}

static void test_all_of_merges_objects(void **state) {
    (void)state;
    check("{\"$defs\":{\"named\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},"
          "\"required\":[\"name\"]}},"
          "\"allOf\":[{\"$ref\":\"#/$defs/named\"},{\"properties\":{\"age\":{\"type\":\"integer\"}}}]}",
          LIST("{\"name\":\"x\"}", "{\"name\":\"x\",\"age\":3}"), LIST("{\"age\":3}", "{\"name\":\"x\",\"z\":1}"));
    refused("{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", "/allOf/0");
}

/* A recursive tree through $ref: each definition is a rule. */
static void test_ref_recursion(void **state) {
    (void)state;
    const char *tree = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
                       "\"value\":{\"type\":\"integer\"},"
                       "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
                       "\"required\":[\"value\"]}},"
                       "\"$ref\":\"#/$defs/node\"}";
    check(tree,
          LIST("{\"value\":1}", "{\"value\":1,\"children\":[]}",
               "{\"value\":1,\"children\":[{\"value\":2},{\"value\":3,\"children\":[{\"value\":4}]}]}"),
          LIST("{\"value\":1,\"children\":[{}]}", "{\"value\":1,\"children\":[{\"value\":\"x\"}]}",
               "{\"children\":[]}"));
    /* "#" (the whole schema) and legacy "definitions" */
    check("{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}},"
          "\"required\":[\"next\"]}",
          LIST("{\"next\":null}", "{\"next\":{\"next\":{\"next\":null}}}"), LIST("{\"next\":{}}"));
    check("{\"definitions\":{\"a\\/b\":{\"type\":\"boolean\"}},\"type\":\"array\","
          "\"items\":{\"$ref\":\"#/definitions/a~1b\"}}",
          LIST("[true,false]"), LIST("[1]"));
}

/* ---- realistic ----------------------------------------------------------- */

static void test_extraction_schema_person(void **state) {
    (void)state;
    const char *person =
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"title\":\"Person\","
        "\"type\":\"object\",\"properties\":{"
        "\"name\":{\"type\":\"string\",\"minLength\":1},"
        "\"age\":{\"type\":\"integer\"},"
        "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":3}},"
        "\"required\":[\"name\",\"age\",\"email\",\"tags\"],\"additionalProperties\":false}";
    check(person,
          LIST("{\"name\":\"Ada\",\"age\":36,\"email\":\"ada@example.com\",\"tags\":[\"math\"]}",
               "{\n  \"name\": \"Ada\",\n  \"age\": 36,\n  \"email\": \"ada@example.com\",\n"
               "  \"tags\": [\"math\", \"poetry\", \"engines\"]\n}"),
          LIST("{\"name\":\"\",\"age\":36,\"email\":\"ada@example.com\",\"tags\":[\"math\"]}",
               "{\"name\":\"Ada\",\"age\":\"36\",\"email\":\"ada@example.com\",\"tags\":[\"math\"]}",
               "{\"name\":\"Ada\",\"age\":36,\"email\":\"not-an-email\",\"tags\":[\"math\"]}",
               "{\"name\":\"Ada\",\"age\":36,\"email\":\"ada@example.com\",\"tags\":[]}",
               "{\"name\":\"Ada\",\"age\":36,\"email\":\"ada@example.com\",\"tags\":[\"a\",\"b\",\"c\",\"d\"]}",
               "{\"name\":\"Ada\",\"age\":36,\"tags\":[\"math\"]}"));
}

/* Whitespace is free between tokens but bounded (no whitespace loops). */
static void test_whitespace_bounded(void **state) {
    (void)state;
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\"}},\"required\":[\"a\"]}";
    char spaced[256], flood[256];
    snprintf(spaced, sizeof spaced, "{\n\t\"a\":\n%40s[ 1 , 2 ]\n}\n", "");
    snprintf(flood, sizeof flood, "{\"a\":\n%41s[]}", "");     /* a newline and 41 spaces */
    /* no whitespace between a declared key and its colon */
    check(s, LIST("{\"a\":[]}", spaced, "{ \"a\": [ ] } "),
          LIST(flood, "{  \"a\":[]}", " {\"a\":[]}", "{\"a\" :[]}", "{ \"a\"\n:[]}"));
}

/* ---- errors --------------------------------------------------------------- */

static void test_errors_name_the_path(void **state) {
    (void)state;
    refused("{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"items\":{\"patternProperties\":{}}}}}",
            "json_schema: /properties/tags/items: unsupported keyword \"patternProperties\"");
    refused("{\"type\":\"number\",\"minimum\":0}",
            "json_schema: unsupported keyword \"minimum\" on a number (only integer bounds are supported)");
    refused("{\"maximum\":3}", "unsupported keyword \"maximum\" on a number");
    refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer of at most 16 digits is within");
    refused("{\"type\":\"integer\",\"minimum\":1e300}", "no integer of at most 16 digits is within");
    refused("{\"type\":\"integer\",\"exclusiveMinimum\":true}", "\"exclusiveMinimum\" must be a number");
    refused("{\"properties\":{\"n\":{\"type\":\"number\",\"exclusiveMaximum\":5}}}",
            "/properties/n: unsupported keyword \"exclusiveMaximum\"");
    refused("{\"properties\":{\"n\":{\"type\":\"number\",\"multipleOf\":5}}}", "unsupported keyword \"multipleOf\"");
    refused("{\"type\":\"string\",\"pattern\":\"^a+$\"}", "unsupported keyword \"pattern\"");
    refused("{\"type\":\"array\",\"uniqueItems\":true}", "unsupported keyword \"uniqueItems\"");
    refused("{\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"hostname\"}}}",
            "/properties/d: unsupported format \"hostname\"");
    refused("{\"properties\":{\"r\":{\"$ref\":\"https://example.com/s.json\"}}}",
            "/properties/r: unsupported $ref \"https://example.com/s.json\"");
    refused("{\"items\":{\"$ref\":\"#/$defs/missing\"}}", "/items: $ref \"#/$defs/missing\": no such definition");
    refused("{\"$defs\":{\"bad\":{\"type\":\"strin\"}},\"$ref\":\"#/$defs/bad\"}",
            "/$defs/bad: unknown type \"strin\"");
    refused("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}",
            "required property \"b\" is not in \"properties\"");
    refused("{\"anyOf\":[{\"type\":\"string\"}],\"type\":\"string\"}", "\"anyOf\" together with \"type\"");
    refused("{\"enum\":[\"a\"],\"maxLength\":3}", "\"enum\" together with \"maxLength\"");
    refused("{\"type\":\"string\",\"enum\":[1,2]}", "no \"enum\" value has the schema's type");
    refused("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "\"minItems\" 3 is over \"maxItems\" 2");
    refused("{\"type\":\"string\",\"maxLength\":-1}", "\"maxLength\" must be a non-negative integer");
    refused("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":3}", "\"format\" together with");
    refused("{\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", "\"minItems\" 2 needs more items");
    refused("{\"properties\":{\"x\":false}}", "/properties/x: schema false accepts no value");
    refused("{\"properties\":{\"a/b~c\":{\"not\":{}}}}", "/properties/a~1b~0c: unsupported keyword \"not\"");
    /* annotations and the wrapper's fields are fine; "name" only at the top */
    sp_grammar_free(compile("{\"name\":\"x\",\"strict\":true,\"title\":\"t\",\"description\":\"d\","
                            "\"$comment\":\"c\",\"examples\":[1],\"default\":1,\"type\":\"integer\"}"));
    refused("{\"properties\":{\"a\":{\"type\":\"integer\",\"strict\":true}}}", "unsupported keyword \"strict\"");
}

static void test_invalid_json(void **state) {
    (void)state;
    refused("{\"type\":\n \"string\",}", "json_schema: invalid JSON at line 2, column");
    refused("", "json_schema: invalid JSON");
    refused("[1,2]", "a schema must be an object or a boolean");
}

/* Schemas from HTTP requests: limits hold and nothing crashes. */
static void test_hostile_schemas(void **state) {
    (void)state;
    /* 40 nested arrays */
    char deep[1024] = "";
    for (int i = 0; i < 40; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 40; i++) strcat(deep, "}");
    refused(deep, "nested deeper than 32 levels");
    refused("{\"type\":\"array\",\"maxItems\":1000000000}", "\"maxItems\" 1000000000 is over the supported maximum");
    refused("{\"type\":\"string\",\"minLength\":99999999999}", "\"minLength\" 99999999999 is over");
    /* a grammar over 1 MiB: 3000 enum strings of 400 bytes */
    size_t n = 3000, w = 0;
    char *big = malloc(n * 404 + 64);
    assert_non_null(big);
    w += (size_t)sprintf(big, "{\"enum\":[");
    for (size_t i = 0; i < n; i++) {
        big[w++] = i ? ',' : ' ';
        big[w++] = '"';
        memset(big + w, 'a' + (int)(i % 26), 400);
        w += 400;
        big[w++] = '"';
    }
    strcpy(big + w, "]}");
    refused(big, "grammar larger than 1048576 bytes");
    free(big);
    /* the schema with any one byte deleted (mostly still JSON, often still
     * a schema): refused cleanly or a grammar that parses */
    const char *rich =
        "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":[\"integer\",\"null\"]},"
        "\"k\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":2}},\"required\":[\"v\"]}},"
        "\"type\":\"object\",\"properties\":{\"root\":{\"$ref\":\"#/$defs/n\"},\"e\":{\"enum\":[\"x\",{\"y\":[1]}]},"
        "\"s\":{\"type\":\"string\",\"format\":\"uuid\"}},\"additionalProperties\":{\"anyOf\":[{\"type\":\"string\"}]}}";
    size_t len = strlen(rich);
    char *cut = malloc(len + 1);
    assert_non_null(cut);
    int converted = 0;
    for (size_t i = 0; i <= len; i++) {
        memcpy(cut, rich, i);
        memcpy(cut + i, rich + i + (i < len), len - i);
        size_t n_cut = len - (i < len);
        sp_err err = { { 0 } };
        char *gbnf = sp_schema_to_gbnf(cut, n_cut, &err);
        if (i == len) assert_non_null(gbnf);
        if (!gbnf) {
            assert_true(strncmp(err.msg, "json_schema: ", 13) == 0);
            continue;
        }
        converted++;
        sp_grammar_free(parse_or_die(gbnf));
        free(gbnf);
    }
    free(cut);
    if (converted < 10) print_error("only %d of the cut schemas converted\n", converted);
    assert_true(converted >= 10);        /* 11 when written: property names cut */
}

/* ---- tool-call composition -------------------------------------------------- */

static void test_append_rules_prefix_and_path(void **state) {
    (void)state;
    json_error_t je;
    json_t *weather = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                                 "\"required\":[\"city\"]}", 0, &je);
    json_t *search = json_loads("{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"},"
                                "\"n\":{\"type\":\"integer\"}},\"required\":[\"q\"]}", 0, &je);
    assert_non_null(weather);
    assert_non_null(search);
    sp_err err = { { 0 } };
    char *gbnf = sp_xstrdup("root ::= \"{\\\"name\\\": \\\"weather\\\", \\\"arguments\\\": \" t0-args \"}\" | "
                            "\"{\\\"name\\\": \\\"search\\\", \\\"arguments\\\": \" t1-args \"}\"\n");
    assert_int_equal(sp_schema_append_rules(weather, "t0-args", "tools[0].function.parameters", &gbnf, &err), 0);
    assert_int_equal(sp_schema_append_rules(search, "t1-args", "tools[1].function.parameters", &gbnf, &err), 0);
    /* every rule but ours begins with its prefix; each value rule is the prefix itself */
    int t0 = 0, t1 = 0;
    for (const char *line = gbnf; *line; line = strchr(line, '\n') + 1) {
        if (!strncmp(line, "root ::=", 8)) continue;
        bool p0 = !strncmp(line, "t0-args ", 8) || !strncmp(line, "t0-args-", 8);
        bool p1 = !strncmp(line, "t1-args ", 8) || !strncmp(line, "t1-args-", 8);
        if (!p0 && !p1) print_error("rule outside the prefixes: %.60s\n", line);
        assert_true(p0 || p1);
        t0 += !strncmp(line, "t0-args ::=", 11);
        t1 += !strncmp(line, "t1-args ::=", 11);
    }
    assert_int_equal(t0, 1);
    assert_int_equal(t1, 1);
    sp_grammar *g = parse_or_die(gbnf);
    assert_true(accepts(g, "{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}"));
    assert_true(accepts(g, "{\"name\": \"search\", \"arguments\": {\"q\": \"x\", \"n\": 2}}"));
    assert_false(accepts(g, "{\"name\": \"weather\", \"arguments\": {\"q\": \"x\"}}"));
    assert_false(accepts(g, "{\"name\": \"search\", \"arguments\": {\"city\": \"Oslo\"}}"));
    sp_grammar_free(g);
    /* errors name the caller's path; *gbnf is left as it was */
    size_t before = strlen(gbnf);
    json_t *bad = json_loads("{\"properties\":{\"when\":{\"type\":\"string\",\"format\":\"duration\"}}}", 0, &je);
    assert_int_equal(sp_schema_append_rules(bad, "t2-args", "tools[2].function.parameters", &gbnf, &err), -1);
    assert_string_equal(err.msg, "tools[2].function.parameters: /properties/when: unsupported format \"duration\"");
    assert_int_equal(strlen(gbnf), before);
    assert_int_equal(sp_schema_append_rules(weather, "T0", "p", &gbnf, &err), -1);   /* bad prefix */
    assert_non_null(strstr(err.msg, "invalid rule prefix"));
    /* *gbnf may start NULL */
    char *fresh = NULL;
    assert_int_equal(sp_schema_append_rules(search, "s", "p", &fresh, &err), 0);
    assert_true(!strncmp(fresh, "s ::= ", 6) || strstr(fresh, "\ns ::= "));
    free(fresh);
    json_decref(bad);
    json_decref(weather);
    json_decref(search);
    free(gbnf);
}

static void test_any_object(void **state) {
    (void)state;
    const char *gbnf = sp_schema_any_object_gbnf();
    assert_non_null(gbnf);
    assert_ptr_equal(gbnf, sp_schema_any_object_gbnf());
    sp_grammar *g = parse_or_die(gbnf);
    assert_true(accepts(g, "{}"));
    assert_true(accepts(g, "{\"a\": [1, 2.5, \"x\", null, true, {\"b\": {}}], \"c\": \"d\"}"));
    assert_false(accepts(g, "[1]"));
    assert_false(accepts(g, "\"s\""));
    assert_false(accepts(g, "{\"a\": 1,}"));
    assert_false(accepts(g, "{\"a\" 1}"));
    sp_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_primitive_types),
        cmocka_unit_test(test_type_array),
        cmocka_unit_test(test_enum_and_const),
        cmocka_unit_test(test_tool_schema_get_weather),
        cmocka_unit_test(test_object_optional_layouts),
        cmocka_unit_test(test_additional_properties),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_integer_ranges),
        cmocka_unit_test(test_string_lengths),
        cmocka_unit_test(test_formats),
        cmocka_unit_test(test_any_of_one_of),
        cmocka_unit_test(test_all_of_merges_objects),
        cmocka_unit_test(test_ref_recursion),
        cmocka_unit_test(test_extraction_schema_person),
        cmocka_unit_test(test_whitespace_bounded),
        cmocka_unit_test(test_errors_name_the_path),
        cmocka_unit_test(test_invalid_json),
        cmocka_unit_test(test_hostile_schemas),
        cmocka_unit_test(test_append_rules_prefix_and_path),
        cmocka_unit_test(test_any_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
