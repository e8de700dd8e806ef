/*
 * specula.h — the public API of the specula engine (link with libspecula.a
 * and -lpcre2-8 -ljansson -lpthread -lm).
 *
 * The engine is organised in layers (see DESIGN.md); this header exposes
 * all of them.  A minimal greedy generation with prompt-lookup speculation:
 *
 *     sp_err err;
 *     sp_model *m = sp_model_load("model.gguf", &err);
 *     sp_tokenizer *tok = sp_tokenizer_load(m->gguf, &err);
 *     sp_pool *pool = sp_pool_create(sp_physical_cores());
 *     sp_workspace *ws = sp_workspace_create(m, 256, pool);
 *     sp_kv *kv = sp_kv_create(m, 4096);
 *     sp_sampler_params sp = sp_sampler_defaults();          // greedy
 *     sp_sampler *smp = sp_sampler_create(&sp, m->hp.n_vocab);
 *     sp_drafter *ngram = sp_ngram_create(1, 3, &err);
 *     sp_target t = sp_target_of(m);
 *     sp_draft *d = sp_draft_open(ngram, &t, &err);
 *     sp_tokens prompt = {0};
 *     sp_tokenize(tok, text, strlen(text), sp_tokenizer_add_bos(tok), true, &prompt, &err);
 *     sp_gen_config cfg = { .max_tokens = 128, .draft_max = 8 };
 *     sp_generate(m, kv, ws, smp, d, &cfg, prompt.ids, prompt.n, on_token, ud, &stats, &fin, &err);
 *
 * Ownership: every *_create / *_load / *_open has a matching free / close;
 * pointers passed to functions are borrowed unless documented otherwise.
 */
#ifndef SPECULA_H
#define SPECULA_H

#include "base/base.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "sample/sample.h"
#include "speculative/speculative.h"
#include "tokenizer/tokenizer.h"

#endif /* SPECULA_H */
