/*
 * cli/paths.h — policy that belongs to the command line, not the library:
 * where specula keeps its cache files.  The library takes directories as
 * arguments and never looks at XDG_CACHE_HOME or HOME itself.
 */
#ifndef SP_CLI_PATHS_H
#define SP_CLI_PATHS_H

#include "base/base.h"

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

#endif /* SP_CLI_PATHS_H */
