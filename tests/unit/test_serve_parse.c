/* Unit tests for the server's request parsing and validation, response
 * JSON and metrics text (no model needed). */
#include "test_util.h"
#include "serve/internal.h"

#include <math.h>
#include <unistd.h>

#define V 1000   /* vocabulary size for logit_bias / token-id checks */

static int parse(sp_api_kind kind, const char *body, sp_req *r, sp_api_err *e) {
    return sp_req_parse(kind, body, strlen(body), V, r, e);
}

/* The request fails with a 400 naming param. */
static void expect_400(sp_api_kind kind, const char *body, const char *param) {
    sp_req r;
    sp_api_err e;
    memset(&e, 0, sizeof e);
    if (parse(kind, body, &r, &e) == 0) {
        sp_req_free(&r);
        fail_msg("accepted: %s", body);
    }
    assert_int_equal(e.status, 400);
    assert_string_equal(e.type, "invalid_request_error");
    assert_true(e.message[0] != 0);
    if (param) {
        if (strcmp(e.param, param)) fail_msg("param '%s', expected '%s' for %s", e.param, param, body);
    }
    /* a failed parse leaves nothing to free */
    assert_null(r.msgs);
    assert_null(r.prompt);
    assert_int_equal(r.n_stops, 0);
}

static void test_chat_full(void **state) {
    (void)state;
    sp_req r;
    sp_api_err e;
    const char *body =
        "{\"model\": \"m\", \"messages\": [{\"role\": \"developer\", \"content\": \"be brief\"},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]},"
        " {\"role\": \"assistant\", \"content\": null}],"
        " \"max_completion_tokens\": 7, \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 20, \"min_p\": 0.1,"
        " \"seed\": -3, \"stop\": [\"x\", \"yy\"], \"presence_penalty\": 1.5, \"frequency_penalty\": -0.5,"
        " \"logit_bias\": {\"5\": -100, \"17\": 2.5}, \"n\": 1, \"logprobs\": true, \"top_logprobs\": 4,"
        " \"user\": \"u\", \"stream\": true, \"stream_options\": {\"include_usage\": true},"
        " \"speculative\": {\"method\": \"suffix\", \"draft_max\": 6}, \"unknown\": [1, {\"z\": 2}]}";
    assert_int_equal(parse(SP_API_CHAT, body, &r, &e), 0);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.n_msgs, 3);
    assert_string_equal(r.msgs[0].role, "system");
    assert_string_equal(r.msgs[1].content, "a\nb");
    assert_string_equal(r.msgs[2].content, "");
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.sampling.temperature == 0.5f && r.sampling.top_p == 0.9f && r.sampling.min_p == 0.1f);
    assert_int_equal(r.sampling.top_k, 20);
    assert_true(r.seed_set);
    assert_true(r.sampling.seed == (uint64_t)-3);
    assert_int_equal(r.n_stops, 2);
    assert_string_equal(r.stops[1], "yy");
    assert_true(r.sampling.presence_penalty == 1.5f && r.sampling.frequency_penalty == -0.5f);
    assert_int_equal(r.sampling.n_bias, 2);
    assert_ptr_equal(r.sampling.bias, r.bias);
    assert_int_equal(r.bias[0].token, 5);
    assert_true(r.bias[0].bias == -100.0f);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 4);
    assert_true(r.stream && r.include_usage);
    assert_string_equal(r.method, "suffix");
    assert_int_equal(r.draft_max, 6);
    assert_int_equal(r.sampling.repeat_last_n, -1);   /* penalties see every generated token */
    assert_int_equal(sp_sampler_validate(&r.sampling, V, NULL), 0);
    sp_req_free(&r);
}

static void test_defaults(void **state) {
    (void)state;
    sp_req r;
    sp_api_err e;
    assert_int_equal(parse(SP_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", &r, &e), 0);
    assert_null(r.model);
    assert_int_equal(r.max_tokens, -1);
    /* omitted: llama.cpp's defaults, not OpenAI's temperature 1 without filters */
    assert_true(r.sampling.temperature == 0.8f && r.sampling.top_p == 0.95f && r.sampling.min_p == 0.05f);
    assert_int_equal(r.sampling.top_k, 40);
    assert_false(r.seed_set || r.stream || r.logprobs || r.ignore_eos);
    assert_int_equal(r.n_stops, 0);
    assert_string_equal(r.method, "");
    assert_int_equal(r.draft_max, SP_REQ_DRAFT_DEFAULT);
    sp_req_free(&r);
    /* explicit nulls are the same as absent */
    assert_int_equal(parse(SP_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": null,"
                                        " \"stop\": null, \"max_tokens\": null, \"seed\": null}", &r, &e), 0);
    assert_true(r.sampling.temperature == 0.8f);
    assert_int_equal(r.max_tokens, -1);
    sp_req_free(&r);
}

/* A GGUF with the given general.sampling.* pairs (float values; top_k and
 * penalty_last_n as integers), opened from a temporary file. */
static sp_gguf *gguf_with(const char *const *keys, const double *vals, int n, bool bad_type) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/specula-sampling-%d.gguf", (int)getpid());
    sp_err err;
    sp_gguf_writer *w = sp_gguf_writer_create();
    for (int i = 0; i < n; i++) {
        sp_gguf_value v = { 0 };
        const bool integer = strstr(keys[i], "top_k") || strstr(keys[i], "last_n");
        if (bad_type && i == 0) { assert_int_equal(sp_gguf_writer_set_str(w, keys[i], "hot", &err), 0); continue; }
        if (integer) { v.type = SP_GGUF_INT32; v.v.i64 = (int64_t)vals[i]; }
        else { v.type = SP_GGUF_FLOAT32; v.v.f64 = vals[i]; }
        assert_int_equal(sp_gguf_writer_set(w, keys[i], &v, &err), 0);
    }
    assert_int_equal(sp_gguf_writer_write(w, path, NULL, NULL, &err), 0);
    sp_gguf_writer_free(w);
    sp_gguf *g = sp_gguf_open(path, &err);
    assert_non_null(g);
    unlink(path);
    return g;
}

/* The model file's general.sampling.* keys over llama.cpp's defaults; a
 * key of the wrong type or out of range is skipped with a warning. */
static void test_sampling_from_gguf(void **state) {
    (void)state;
    const sp_sampler_params d = sp_serve_sampling_defaults();
    assert_true(d.temperature == 0.8f && d.top_k == 40 && d.top_p == 0.95f && d.min_p == 0.05f);
    const char *keys[] = { "general.sampling.temp", "general.sampling.top_k", "general.sampling.top_p",
                           "general.sampling.min_p", "general.sampling.penalty_repeat",
                           "general.sampling.penalty_last_n" };
    const double vals[] = { 0.6, 20, 0.9, 0.02, 1.05, 128 };
    sp_gguf *g = gguf_with(keys, vals, 6, false);
    sp_sampler_params p = d;
    char warn[256];
    assert_int_equal(sp_serve_sampling_from_gguf(g, &p, warn, sizeof warn), 0);
    assert_true(p.temperature == 0.6f && p.top_k == 20 && p.top_p == 0.9f && p.min_p == 0.02f &&
                p.repeat_penalty == 1.05f && p.repeat_last_n == 128);
    sp_gguf_close(g);
    /* none present: unchanged */
    g = gguf_with(keys, vals, 0, false);
    p = d;
    assert_int_equal(sp_serve_sampling_from_gguf(g, &p, warn, sizeof warn), 0);
    assert_memory_equal(&p, &d, sizeof p);
    sp_gguf_close(g);
    /* temp as a string, top_p out of range: both skipped, named */
    const double bad[] = { 0, 20, 1.5 };
    g = gguf_with(keys, bad, 3, true);
    p = d;
    assert_int_equal(sp_serve_sampling_from_gguf(g, &p, warn, sizeof warn), -1);
    assert_true(p.temperature == 0.8f && p.top_k == 20 && p.top_p == 0.95f);
    assert_non_null(strstr(warn, "general.sampling."));
    sp_gguf_close(g);
}

static void test_completion_prompts(void **state) {
    (void)state;
    sp_req r;
    sp_api_err e;
    assert_int_equal(parse(SP_API_COMPLETION, "{\"prompt\": \"abc\", \"max_tokens\": 3, \"logprobs\": 2,"
                                              " \"stop\": \"\\n\", \"echo\": false, \"best_of\": 1}", &r, &e), 0);
    assert_string_equal(r.prompt, "abc");
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 2);
    assert_string_equal(r.stops[0], "\n");
    sp_req_free(&r);
    assert_int_equal(parse(SP_API_COMPLETION, "{\"prompt\": [\"one\"]}", &r, &e), 0);
    assert_string_equal(r.prompt, "one");
    assert_false(r.logprobs);
    sp_req_free(&r);
    assert_int_equal(parse(SP_API_COMPLETION, "{\"prompt\": [1, 2, 999]}", &r, &e), 0);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 999);
    sp_req_free(&r);
    assert_int_equal(parse(SP_API_COMPLETION, "{\"prompt\": [[4, 5]], \"speculative\": {\"draft_max\": \"adaptive\"}}", &r, &e), 0);
    assert_int_equal(r.n_prompt_ids, 2);
    assert_int_equal(r.draft_max, SP_DRAFT_ADAPTIVE);
    sp_req_free(&r);
    /* a real with an integral value is an integer */
    assert_int_equal(parse(SP_API_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 16.0}", &r, &e), 0);
    assert_int_equal(r.max_tokens, 16);
    sp_req_free(&r);
}

/* A value just outside a range is printed exactly: "%g" printed 2.0000001
 * as 2, and "must be between 0 and 2 (got 2)" contradicted itself. */
static void expect_got(const char *extra, const char *want) {
    char b[512];
    snprintf(b, sizeof b, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], %s}", extra);
    sp_req r;
    sp_api_err e;
    assert_int_equal(parse(SP_API_CHAT, b, &r, &e), -1);
    if (!strstr(e.message, want)) fail_msg("'%s' lacks '%s'", e.message, want);
}

static void test_range_errors_exact(void **state) {
    (void)state;
    expect_got("\"temperature\": 2.0000001", "(got 2.0000001)");
    expect_got("\"temperature\": -1e-300", "(got -1e-300)");
    expect_got("\"top_p\": 1.0000000000000002", "(got 1.0000000000000002)");
    expect_got("\"min_p\": 1.5", "(got 1.5)");
    expect_got("\"logit_bias\": {\"3\": 100.00001}", "(got 100.00001 for 3)");
}

static void test_errors_name_the_param(void **state) {
    (void)state;
    const char *m = "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]";
    char b[512];
#define CHAT_ERR(extra, param) do { snprintf(b, sizeof b, "{%s, %s}", m, extra); expect_400(SP_API_CHAT, b, param); } while (0)
    CHAT_ERR("\"temperature\": \"hot\"", "temperature");
    CHAT_ERR("\"temperature\": 2.5", "temperature");
    CHAT_ERR("\"temperature\": -0.1", "temperature");
    CHAT_ERR("\"top_p\": 0", "top_p");
    CHAT_ERR("\"top_p\": 1.5", "top_p");
    CHAT_ERR("\"top_k\": 1.5", "top_k");
    CHAT_ERR("\"min_p\": 2", "min_p");
    CHAT_ERR("\"presence_penalty\": 3", "presence_penalty");
    CHAT_ERR("\"frequency_penalty\": true", "frequency_penalty");
    CHAT_ERR("\"max_tokens\": 0", "max_tokens");
    CHAT_ERR("\"max_tokens\": \"5\"", "max_tokens");
    CHAT_ERR("\"max_completion_tokens\": -1", "max_completion_tokens");
    CHAT_ERR("\"n\": 2", "n");
    CHAT_ERR("\"seed\": 1.5", "seed");
    CHAT_ERR("\"stop\": 5", "stop");
    CHAT_ERR("\"stop\": [\"a\", 1]", "stop");
    CHAT_ERR("\"stop\": \"\"", "stop");
    CHAT_ERR("\"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]", "stop");
    CHAT_ERR("\"logit_bias\": []", "logit_bias");
    CHAT_ERR("\"logit_bias\": {\"abc\": 1}", "logit_bias");
    CHAT_ERR("\"logit_bias\": {\"1000\": 1}", "logit_bias");
    CHAT_ERR("\"logit_bias\": {\"-1\": 1}", "logit_bias");
    CHAT_ERR("\"logit_bias\": {\"3\": 101}", "logit_bias");
    CHAT_ERR("\"logit_bias\": {\"3\": \"x\"}", "logit_bias");
    CHAT_ERR("\"logprobs\": 1", "logprobs");
    CHAT_ERR("\"top_logprobs\": 21, \"logprobs\": true", "top_logprobs");
    CHAT_ERR("\"top_logprobs\": 3", "top_logprobs");              /* needs logprobs */
    CHAT_ERR("\"stream\": \"yes\"", "stream");
    CHAT_ERR("\"stream_options\": 1", "stream_options");
    CHAT_ERR("\"stream_options\": {\"include_usage\": 1}", "include_usage");
    CHAT_ERR("\"user\": 5", "user");
    CHAT_ERR("\"model\": 5", "model");
    CHAT_ERR("\"speculative\": \"ngram\"", "speculative");
    CHAT_ERR("\"speculative\": {\"method\": 3}", "speculative.method");
    CHAT_ERR("\"speculative\": {\"draft_max\": 33}", "speculative.draft_max");
    CHAT_ERR("\"speculative\": {\"draft_max\": \"lots\"}", "speculative.draft_max");
    expect_400(SP_API_CHAT, "{}", "messages");
    expect_400(SP_API_CHAT, "{\"messages\": []}", "messages");
    expect_400(SP_API_CHAT, "{\"messages\": {}}", "messages");
    expect_400(SP_API_CHAT, "{\"messages\": [\"hi\"]}", "messages");
    expect_400(SP_API_CHAT, "{\"messages\": [{\"content\": \"hi\"}]}", "messages");
    expect_400(SP_API_CHAT, "{\"messages\": [{\"role\": \"tool\", \"content\": \"hi\"}]}", "messages");
    expect_400(SP_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages");
    expect_400(SP_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", "messages");
    expect_400(SP_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}", NULL);
    expect_400(SP_API_COMPLETION, "{}", "prompt");
    expect_400(SP_API_COMPLETION, "{\"prompt\": 5}", "prompt");
    expect_400(SP_API_COMPLETION, "{\"prompt\": []}", "prompt");
    expect_400(SP_API_COMPLETION, "{\"prompt\": [\"a\", \"b\"]}", "prompt");
    expect_400(SP_API_COMPLETION, "{\"prompt\": [1, 1000]}", "prompt");
    expect_400(SP_API_COMPLETION, "{\"prompt\": [1, \"x\"]}", "prompt");
    expect_400(SP_API_COMPLETION, "{\"prompt\": \"x\", \"echo\": true}", "echo");
    expect_400(SP_API_COMPLETION, "{\"prompt\": \"x\", \"best_of\": 2}", "best_of");
    expect_400(SP_API_COMPLETION, "{\"prompt\": \"x\", \"suffix\": \"tail\"}", "suffix");
    expect_400(SP_API_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": 6}", "logprobs");
    expect_400(SP_API_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": true}", "logprobs");
#undef CHAT_ERR
}

static void test_malformed(void **state) {
    (void)state;
    expect_400(SP_API_CHAT, "", NULL);
    expect_400(SP_API_CHAT, "{\"messages\": [", NULL);
    expect_400(SP_API_CHAT, "[1, 2]", NULL);
    expect_400(SP_API_CHAT, "\"text\"", NULL);
    expect_400(SP_API_CHAT, "{\"messages\": \"\xff\xfe\"}", NULL);       /* invalid UTF-8 */
    expect_400(SP_API_CHAT, "{\"a\": 1} trailing", NULL);
    /* bodies with NUL bytes are not truncated silently */
    sp_req r;
    sp_api_err e;
    const char body[] = "{\"prompt\": \"x\"}\0{";
    assert_int_equal(sp_req_parse(SP_API_COMPLETION, body, sizeof body - 1, V, &r, &e), -1);
    assert_int_equal(e.status, 400);
}

static void test_json_text_sanitises(void **state) {
    (void)state;
    json_t *j = sp_json_text("a\xff" "b\xe2\x82" "c\xe2\x82\xac", 9);
    assert_non_null(j);
    assert_string_equal(json_string_value(j), "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd" "c\xe2\x82\xac");
    json_decref(j);
    j = sp_json_text("nul\0in", 6);
    assert_int_equal(json_string_length(j), 6);
    json_decref(j);
}

static void test_error_json(void **state) {
    (void)state;
    sp_api_err e;
    assert_int_equal(sp_api_fail(&e, 404, "invalid_request_error", "model_not_found", "model", "no %s", "x"), -1);
    json_t *j = sp_api_error_json(&e);
    char *s = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s, "{\"error\":{\"code\":\"model_not_found\",\"message\":\"no x\",\"param\":\"model\","
                           "\"type\":\"invalid_request_error\"}}");
    free(s);
    json_decref(j);
    sp_api_fail(&e, 500, "server_error", NULL, NULL, "boom");
    j = sp_api_error_json(&e);
    s = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s, "{\"error\":{\"code\":null,\"message\":\"boom\",\"param\":null,\"type\":\"server_error\"}}");
    free(s);
    json_decref(j);
}

static void test_usage_json(void **state) {
    (void)state;
    sp_resp_ctx c = { .kind = SP_API_CHAT, .id = "chatcmpl-1", .created = 5, .model = "m", .method = "ngram",
                      .n_prompt = 10 };
    sp_job_delta d;
    memset(&d, 0, sizeof d);
    d.end = SP_JOB_FINISHED;
    d.finish = SP_FINISH_LENGTH;
    d.stats.emitted = 8;
    d.stats.spec_rounds = 2;
    d.stats.drafted = 6;
    d.stats.accepted = 3;
    json_t *r = sp_api_response(&c, "hello", 5, NULL, 0, &d);
    json_t *u = json_object_get(r, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 10);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 8);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 18);
    json_t *s = json_object_get(u, "speculation");
    assert_int_equal(json_integer_value(json_object_get(s, "drafted")), 6);
    assert_int_equal(json_integer_value(json_object_get(s, "accepted")), 3);
    assert_true(fabs(json_real_value(json_object_get(s, "mean_acceptance_length")) - 2.5) < 1e-9);
    json_t *ch = json_array_get(json_object_get(r, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    assert_string_equal(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), "hello");
    assert_string_equal(json_string_value(json_object_get(r, "object")), "chat.completion");
    json_decref(r);
}

static void test_metrics_render(void **state) {
    (void)state;
    sp_metrics *mx = sp_metrics_create();
    sp_metrics_http(mx, "/v1/completions", 200);
    sp_metrics_http(mx, "/v1/completions", 200);
    sp_metrics_http(mx, "/v1/completions", 400);
    sp_metrics_step(mx, 3, 20, 2000000);
    sp_metrics_load(mx, 2, 3);
    sp_spec_stats st;
    memset(&st, 0, sizeof st);
    st.n_prompt = 7;
    st.emitted = 11;
    st.drafted = 9;
    st.accepted = 4;
    st.spec_rounds = 3;
    st.pos_drafted[0] = 3;
    st.pos_accepted[0] = 2;
    st.pos_drafted[1] = 2;
    sp_metrics_generation(mx, "ngram", &st, 1000, 5000000, 30000000, false);
    sp_metrics_itl(mx, 3000000);
    char *t = sp_metrics_render(mx);
    const char *want[] = {
        "specula_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n",
        "specula_http_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1\n",
        "specula_queue_length 2\n", "specula_requests_running 3\n",
        "specula_prompt_tokens_total 7\n", "specula_generation_tokens_total 11\n",
        "specula_batch_sequences_bucket{le=\"2\"} 0\n", "specula_batch_sequences_bucket{le=\"4\"} 1\n",
        "specula_batch_rows_bucket{le=\"16\"} 0\n", "specula_batch_rows_bucket{le=\"32\"} 1\n",
        "specula_spec_drafted_tokens_total{method=\"ngram\"} 9\n",
        "specula_spec_accepted_tokens_total{method=\"ngram\"} 4\n",
        "specula_spec_position_drafted_total{method=\"ngram\",position=\"1\"} 2\n",
        "specula_spec_position_accepted_total{method=\"ngram\",position=\"0\"} 2\n",
        "specula_inter_token_seconds_bucket{le=\"0.0025\"} 0\n",
        "specula_inter_token_seconds_bucket{le=\"0.005\"} 1\n",
        "specula_time_to_first_token_seconds_count 1\n",
        "# TYPE specula_request_seconds histogram\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(t, want[i])) fail_msg("missing: %s", want[i]);
    free(t);
    sp_metrics_free(mx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_full),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_sampling_from_gguf),
        cmocka_unit_test(test_completion_prompts),
        cmocka_unit_test(test_errors_name_the_param),
        cmocka_unit_test(test_range_errors_exact),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_json_text_sanitises),
        cmocka_unit_test(test_error_json),
        cmocka_unit_test(test_usage_json),
        cmocka_unit_test(test_metrics_render),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
