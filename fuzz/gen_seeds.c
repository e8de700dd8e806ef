/*
 * Writes a few small valid GGUF files into a directory: the seed corpus
 * for fuzz_gguf (see run-fuzz.sh).  Self-contained (libc only) so it builds
 * with any compiler.  Usage: gen_seeds DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t buf[8192];
static size_t len;

static void put(const void *p, size_t n) {
    if (len + n > sizeof buf) { fprintf(stderr, "gen_seeds: buffer full\n"); exit(1); }
    memcpy(buf + len, p, n);
    len += n;
}
static void le(uint64_t v, int n) { for (int i = 0; i < n; i++) { uint8_t c = (uint8_t)(v >> 8 * i); put(&c, 1); } }
static void u8(uint8_t v) { le(v, 1); }
static void u16(uint16_t v) { le(v, 2); }
static void u32(uint32_t v) { le(v, 4); }
static void u64(uint64_t v) { le(v, 8); }
static void f32(float f) { uint32_t u; memcpy(&u, &f, 4); u32(u); }
static void f64(double f) { uint64_t u; memcpy(&u, &f, 8); u64(u); }
static void str(const char *s) { u64(strlen(s)); put(s, strlen(s)); }

enum { UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 };

static void header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    len = 0;
    put("GGUF", 4);
    u32(version);
    u64(n_tensors);
    u64(n_kv);
}
static void key(const char *k, uint32_t type) { str(k); u32(type); }
static void tensor(const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    str(name);
    u32(n_dims);
    for (uint32_t d = 0; d < n_dims; d++) u64(ne[d]);
    u32(type);
    u64(off);
}
/* Pads to the alignment and appends n bytes of data. */
static void data(uint32_t align, size_t n) {
    while (len % align) u8(0);
    for (size_t i = 0; i < n; i++) u8((uint8_t)(i * 13 + 1));
}

static void save(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "gen_seeds: cannot write %s\n", path);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: gen_seeds DIR\n"); return 2; }
    const char *dir = argv[1];

    header(3, 0, 0);
    save(dir, "empty-v3");

    /* Every scalar type, v2, two tensors. */
    header(2, 2, 13);
    key("u8", UINT8); u8(7);
    key("i8", INT8); u8(0xf0);
    key("u16", UINT16); u16(300);
    key("i16", INT16); u16(0x8001);
    key("u32", UINT32); u32(70000);
    key("i32", INT32); u32(0xffffff00u);
    key("f32", FLOAT32); f32(0.5f);
    key("b", BOOL); u8(1);
    key("general.architecture", STRING); str("llama");
    key("u64", UINT64); u64(1ull << 40);
    key("i64", INT64); u64((uint64_t)-2);
    key("f64", FLOAT64); f64(1e-9);
    key("llama.block_count", UINT32); u32(1);
    tensor("token_embd.weight", 2, (const uint64_t[]){32, 2}, 8 /* Q8_0 */, 0);
    tensor("output_norm.weight", 1, (const uint64_t[]){8}, 0 /* F32 */, 96);
    data(32, 96 + 32);
    save(dir, "scalars-v2");

    /* Arrays: numeric, strings, nested; custom alignment; 4-d tensor. */
    header(3, 3, 5);
    key("general.alignment", UINT32); u32(64);
    key("tokenizer.ggml.tokens", ARRAY); u32(STRING); u64(4); str("<s>"); str("</s>"); str("a"); str("");
    key("tokenizer.ggml.scores", ARRAY); u32(FLOAT32); u64(4); f32(0); f32(-1); f32(-2); f32(-3);
    key("tokenizer.ggml.token_type", ARRAY); u32(INT32); u64(2); u32(3); u32(1);
    key("nested", ARRAY); u32(ARRAY); u64(2);
    u32(UINT16); u64(2); u16(1); u16(2);
    u32(ARRAY); u64(1); u32(BOOL); u64(2); u8(0); u8(1);
    tensor("a", 4, (const uint64_t[]){2, 2, 2, 2}, 1 /* F16 */, 0);
    tensor("b", 1, (const uint64_t[]){256}, 12 /* Q4_K */, 64);
    tensor("c", 2, (const uint64_t[]){32, 1}, 3 /* Q4_1 */, 256);
    data(64, 256 + 20);
    save(dir, "arrays-align64");

    /* No tensors, metadata only, ending right after the last value. */
    header(3, 0, 2);
    key("general.name", STRING); str("tiny");
    key("tokenizer.ggml.merges", ARRAY); u32(STRING); u64(2); str("a b"); str("ab c");
    save(dir, "vocab-only");
    return 0;
}
