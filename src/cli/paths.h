/*
 * cli/paths.h — policy that belongs to the command line, not the library:
 * where specula keeps its cache files, and the settings users give
 * through the environment.  The library takes directories and settings as
 * arguments and reads no environment variable itself.
 */
#ifndef SP_CLI_PATHS_H
#define SP_CLI_PATHS_H

#include "base/base.h"
#include "model/model.h"

/* specula's cache directory for `sub` (e.g. "cost"):
 * ${XDG_CACHE_HOME:-$HOME/.cache}/specula/<sub> ("./.cache/..." without
 * either variable), created with its parents when missing.  Writes it to
 * buf; returns 0, or -1 + err when it does not fit in cap or cannot be
 * created. */
int sp_cache_dir(const char *sub, char *buf, size_t cap, sp_err *err);

/* The directory sp_cost_get caches cost curves in (sp_cache_dir("cost")),
 * or NULL when it cannot be made: the cache only saves a measurement, so
 * a command then measures without it.  Worked out once per process. */
const char *sp_cost_cache_dir(void);

/* Reads the environment's settings once, at start (main(), before any
 * command): SPECULA_SIMD selects the kernels (sp_kernels_select; a bad
 * value is reported on stderr and the best level runs) and SPECULA_PACK=0
 * keeps weights unpacked (sp_cli_model_opts). */
void sp_cli_env_init(void);
/* The options every model the command line loads is loaded with (the
 * defaults, with SPECULA_PACK applied by sp_cli_env_init).  Static: the
 * pointer stays valid. */
const sp_model_load_opts *sp_cli_model_opts(void);

#endif /* SP_CLI_PATHS_H */
