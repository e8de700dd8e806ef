/*
 * jinja — the subset of Jinja2 that chat templates are written in, as
 * Hugging Face `transformers` renders them (jinja2's sandbox with
 * trim_blocks, lstrip_blocks and loop controls; `tojson` as json.dumps
 * with ensure_ascii=False; `raise_exception` and `strftime_now` globals).
 *
 * What is covered: text with whitespace control ({%- -%}, {{- -}}, {%+ ),
 * comments, raw blocks; `if`/`elif`/`else`, `for` (with an `if` filter,
 * `else`, tuple targets, `loop.*`, `break`/`continue`), `set` (names,
 * tuples, `ns.attr`, block form), `macro` and calls, `filter` blocks,
 * `generation` blocks; Python literals, lists, dicts, tuples, attribute and
 * item access, slices, calls, filters, tests, conditional expressions and
 * Python's operators; the string, list and dict methods and the filters and
 * tests templates use.  Values follow Python: code-point strings, ints and
 * floats (printed as Python prints them), None, Undefined.
 *
 * What is refused at parse time, naming the construct: `extends`, `block`,
 * `include`, `import`, `call`, `do`, `with`, `autoescape`, recursive loops,
 * and unknown filters, tests, statements or string methods.
 *
 * Templates are untrusted input (they come from GGUF files): parsing and
 * rendering are bounded in nesting, macro recursion, steps, memory and
 * output size, and fail with a message instead of crashing or hanging.
 *
 * Provenance.  Every output byte records whether it came from the data
 * (the `data` variables: message roles and contents, tools) or from the
 * template (literals, and the `markup` variables such as bos_token).  A
 * chat tokenizer turns special-token text into special tokens only where
 * the template wrote it, so a message cannot open or close a turn.
 */
#ifndef SP_JINJA_H
#define SP_JINJA_H

#include "base/base.h"

#include <jansson.h>
#include <stdint.h>

typedef struct sp_jinja sp_jinja;   /* a parsed template (immutable; shareable) */

/* Parses template source (n bytes; need not be NUL-terminated).  NULL +
 * err ("template: line L: ...") on a syntax error or an unsupported
 * construct (named). */
sp_jinja *sp_jinja_parse(const char *src, size_t n, sp_err *err);
void sp_jinja_free(sp_jinja *t);

typedef struct sp_jinja_out {
    char *text;          /* NUL-terminated, malloc'd */
    size_t len;
    uint8_t *from_data;  /* (len) 1 where the byte came from a data variable; malloc'd */
} sp_jinja_out;

void sp_jinja_out_free(sp_jinja_out *o);

/* Renders with the variables of `data` (an object: messages, tools, ...;
 * strings in it are data) and of `markup` (an object: add_generation_prompt,
 * bos_token, ...; its strings count as template text); a name in both is
 * markup's.  Either may be NULL.  now: the time strftime_now formats (UTC,
 * seconds since the epoch; < 0 = the current time).  -1 + err on a
 * template error (raise_exception's message, an undefined operation, a
 * limit). */
int sp_jinja_render(const sp_jinja *t, json_t *data, json_t *markup, int64_t now,
                    sp_jinja_out *out, sp_err *err);

#endif
