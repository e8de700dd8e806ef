/* Where the command line keeps its files, and the settings it reads from
 * the environment (see paths.h). */
#include "cli/paths.h"
#include "kernels/kernels.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* mkdir -p: the parents' errors are ignored (one may exist but not be
 * writable); whether the directory itself ends up there is what counts. */
static int make_dirs(char *path, sp_err *err) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(path, 0755);
        *p = '/';
    }
    if (mkdir(path, 0755) == 0) return 0;
    const int e = errno;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    return sp_err_set(err, "cannot create the cache directory %s: %s", path, strerror(e));
}

int sp_cache_dir(const char *sub, char *buf, size_t cap, sp_err *err) {
    assert(sub && *sub && buf && cap > 0);
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg) n = snprintf(buf, cap, "%s/specula/%s", xdg, sub);
    else n = snprintf(buf, cap, "%s/.cache/specula/%s", home && *home ? home : ".", sub);
    if (n < 0 || (size_t)n >= cap)
        return sp_err_set(err, "the cache directory for '%s' is a path longer than %zu bytes", sub, cap - 1);
    return make_dirs(buf, err);
}

static char cost_dir[4096];
static bool cost_dir_ok;
static pthread_once_t cost_dir_once = PTHREAD_ONCE_INIT;

static void cost_dir_init(void) {
    sp_err err;
    cost_dir_ok = sp_cache_dir("cost", cost_dir, sizeof cost_dir, &err) == 0;
    if (!cost_dir_ok) sp_debug("specula: no cost cache: %s\n", err.msg);
}

const char *sp_cost_cache_dir(void) {
    pthread_once(&cost_dir_once, cost_dir_init);
    return cost_dir_ok ? cost_dir : NULL;
}

/* Written once by sp_cli_env_init before any thread starts; read after. */
static sp_model_load_opts model_opts = { .pack = true };

void sp_cli_env_init(void) {
    const char *simd = getenv("SPECULA_SIMD"), *pack = getenv("SPECULA_PACK");
    sp_err err;
    if (sp_kernels_select(simd, &err))
        fprintf(stderr, "specula: SPECULA_SIMD: %s; using %s\n", err.msg, sp_kernels_describe());
    model_opts = sp_model_load_default_opts();
    if (pack && strcmp(pack, "0") == 0) model_opts.pack = false;
}

const sp_model_load_opts *sp_cli_model_opts(void) { return &model_opts; }
