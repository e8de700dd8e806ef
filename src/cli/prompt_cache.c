/* The prefix cache on disk for the commands: `serve --cache-dir` and
 * `run --prompt-cache` (see cli.h; the format is src/cache/file.c's). */
#include "cli/cli.h"

#include "cache/cache.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

void sp_engine_cache_load(const sp_engine *e, const char *path, const char *cmd) {
    sp_pcache *pc = sp_ctx_cache(e->ctx);
    if (!pc || access(path, F_OK) != 0) return;
    sp_err err;
    if (sp_pcache_load_file(pc, path, e->model->hp.n_vocab, &err)) {
        fprintf(stderr, "specula %s: warning: %s; starting with an empty cache\n", cmd, err.msg);
        return;
    }
    const sp_pcache_stats st = sp_pcache_get_stats(pc);
    fprintf(stderr, "specula %s: prefix cache: %.1f MiB from %s\n", cmd, (double)st.bytes / (1024.0 * 1024.0),
            path);
}

void sp_engine_cache_save(const sp_engine *e, const char *path, const char *cmd) {
    sp_pcache *pc = sp_ctx_cache(e->ctx);
    if (!pc) return;
    sp_err err;
    if (sp_pcache_save(pc, path, &err)) fprintf(stderr, "specula %s: warning: %s\n", cmd, err.msg);
}

int sp_engine_cache_file(const sp_engine *e, const char *dir, char *buf, size_t cap, sp_err *err) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return sp_err_set(err, "--cache-dir %s: cannot create it", dir);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return sp_err_set(err, "--cache-dir %s: not a directory", dir);
    if (snprintf(buf, cap, "%s/prefix-%s.spcache", dir, e->model->fingerprint) >= (int)cap)
        return sp_err_set(err, "--cache-dir %s: path too long", dir);
    return 0;
}
