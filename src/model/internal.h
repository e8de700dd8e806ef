/*
 * model internals shared by its files: binding tensors of a GGUF file to
 * matrices and vectors (load.c), used by the target loader and the draft
 * head's (head.c).
 */
#ifndef SP_MODEL_INTERNAL_H
#define SP_MODEL_INTERNAL_H

#include "model/model.h"

/* Binds the 2-D weight matrix `name` of n_out rows by n_in columns
 * (checked: present, shape, a type the kernels support). */
int sp_bind_matrix(const sp_gguf *g, const char *name, int64_t n_in, int64_t n_out, sp_matrix *out,
                   sp_err *err);
/* Binds the 1-D vector `name` of n floats, converted to an owned array. */
int sp_bind_vector(const sp_gguf *g, const char *name, int64_t n, const float **out, sp_err *err);

#endif /* SP_MODEL_INTERNAL_H */
