/* Reading a whole text file named on the command line. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *sp_read_text_file(const char *path, const char *what, sp_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { sp_err_set(err, "cannot open %s file '%s'", what, path); return NULL; }
    size_t cap = 0, n = 0, k;
    char *b = NULL;
    do {
        SP_VEC_GROW(b, cap, n + 4096 + 1);   /* room to read into, and the NUL */
        k = fread(b + n, 1, cap - n - 1, f);
        n += k;
    } while (k > 0);
    const bool bad = ferror(f) != 0;
    fclose(f);
    b[n] = 0;
    if (bad) { free(b); sp_err_set(err, "cannot read %s file '%s'", what, path); return NULL; }
    if (strlen(b) != n) { free(b); sp_err_set(err, "%s file '%s' contains NUL bytes", what, path); return NULL; }
    return b;
}
