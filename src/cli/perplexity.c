/* specula perplexity (placeholder until the method is fixed below). */
#include "cli/cli.h"
#include <stdio.h>
int sp_cmd_perplexity(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "specula perplexity: not yet\n"); return SP_EXIT_FAIL; }
