/* specula info: describe a model file. */
#include "cli/cli.h"
#include "cli/paths.h"

#include <stdio.h>
#include <string.h>

static const char info_help[] =
    "usage: specula info -m MODEL\n"
    "\n"
    "Prints the architecture, sizes, tensor types, tokenizer and chat template of a model.\n"
    "\n"
    "options:\n"
    "  -m, --model NAME|PATH   smollm2-135m, gemma3-270m or a GGUF path (default smollm2-135m)\n"
    "  -h, --help              this help\n";

static void print_types(const sp_gguf *g) {
    uint64_t count[SP_DTYPE_COUNT] = { 0 }, bytes[SP_DTYPE_COUNT] = { 0 };
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        count[t->type]++;
        bytes[t->type] += t->n_bytes;
    }
    printf("tensor types:");
    for (int t = 0; t < SP_DTYPE_COUNT; t++)
        if (count[t])
            printf(" %s x%llu (%.1f MiB)", sp_dtype_name((uint32_t)t), (unsigned long long)count[t],
                   (double)bytes[t] / (1024.0 * 1024.0));
    printf("\n");
}

int sp_cmd_info(int argc, char **argv) {
    const char *model = NULL;
    sp_args a = { "info", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        if (sp_arg_is(&a, "-h|--help")) { fputs(info_help, stdout); return 0; }
        else if (sp_arg_is(&a, "-m|--model")) { if (!sp_arg_str(&a, &model)) return SP_EXIT_USAGE; }
        else return sp_arg_unknown(&a);
    }
    sp_err err;
    char path[4096];
    if (sp_resolve_model(model ? model : sp_default_model(), path, sizeof path, &err)) {
        fprintf(stderr, "specula info: %s\n", err.msg);
        return SP_EXIT_FAIL;
    }
    sp_model *m = sp_model_load_with(path, sp_cli_model_opts(), &err);
    if (!m) { fprintf(stderr, "specula info: %s\n", err.msg); return SP_EXIT_FAIL; }
    sp_tokenizer *tok = sp_tokenizer_load(m->gguf, &err);
    if (!tok) { fprintf(stderr, "specula info: %s: %s\n", path, err.msg); sp_model_free(m); return SP_EXIT_FAIL; }
    const sp_hparams *hp = &m->hp;
    const sp_gguf *g = m->gguf;
    uint64_t n_params = 0;
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) n_params += sp_gguf_tensor_at(g, i)->n_elements;
    printf("file:          %s (%.1f MiB, GGUF v%u, %llu tensors, %llu metadata keys)\n", path,
           (double)sp_gguf_file_size(g) / (1024.0 * 1024.0), sp_gguf_version(g),
           (unsigned long long)sp_gguf_n_tensors(g), (unsigned long long)sp_gguf_n_kv(g));
    printf("name:          %s\n", m->name);
    printf("architecture:  %s\n", sp_arch_name(hp->arch));
    printf("parameters:    %.1f M\n", (double)n_params / 1e6);
    printf("layers:        %d\n", hp->n_layer);
    printf("width:         %d (feed-forward %d)\n", hp->n_embd, hp->n_ff);
    printf("heads:         %d query, %d key/value, head size %d, rotary dims %d\n", hp->n_head,
           hp->n_head_kv, hp->head_dim, hp->n_rot);
    printf("context:       %d tokens (trained)\n", hp->n_ctx_train);
    printf("rope base:     %g", (double)hp->rope_base);
    if (hp->swa_window)
        printf(" (global layers), %g (sliding-window layers, window %d, 1 global in %d)",
               (double)hp->rope_base_swa, hp->swa_window, hp->swa_pattern);
    printf("\nrms eps:       %g\n", (double)hp->rms_eps);
    printf("output head:   %s\n", m->tied_output ? "tied to token embeddings" : "separate");
    print_types(g);
    printf("weights/token: %.1f MiB read per decoded token\n",
           (double)sp_model_bytes_per_token(m) / (1024.0 * 1024.0));
    printf("kernels:       %s", sp_kernels_describe());
    if (m->packed) printf(" (Q4_1/Q5_0/Q8_0 matrices packed: %.1f MiB)", (double)m->packed_bytes / (1024.0 * 1024.0));
    printf("\n");
    printf("tokenizer:     %s, %d tokens, bos %d, eos %d, add_bos %s\n", sp_tokenizer_kind_name(tok),
           sp_tokenizer_n_vocab(tok), sp_tokenizer_bos(tok), sp_tokenizer_eos(tok),
           sp_tokenizer_add_bos(tok) ? "yes" : "no");
    sp_chat_tmpl *ct = NULL;
    if (sp_chat_tmpl_for_model(g, tok, NULL, NULL, NULL, &ct, &err))
        printf("chat template: cannot be rendered: %s\n", err.msg);
    else if (!ct) printf("chat template: none (raw prompts; --chat-template NAME|FILE gives one)\n");
    else printf("chat template: %s\n", !strcmp(sp_chat_tmpl_name(ct), "gguf") ? "the file's tokenizer.chat_template"
                                                                         : "built-in gemma (none in the file)");
    sp_chat_tmpl_free(ct);
    sp_tokenizer_free(tok);
    sp_model_free(m);
    return 0;
}
