/* specula: command dispatch. */
#include "cli/cli.h"
#include "cli/paths.h"

#include <stdio.h>
#include <string.h>

#define SP_VERSION "0.1.0"

static const char main_help[] =
    "specula " SP_VERSION " - LLM inference on the CPU with lossless speculative decoding\n"
    "\n"
    "usage: specula COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  run          generate text from a prompt\n"
    "  chat         chat with a model in the terminal (the conversation stays cached)\n"
    "  serve        OpenAI-compatible HTTP server: continuous batching, speculation per request\n"
    "  info         describe a model file\n"
    "  perplexity   perplexity of a model on a text file\n"
    "  bench        plain vs speculative decoding on a prompt set; verification cost\n"
    "  tune-self    find the layers self-speculation drafts with\n"
    "  quantize     write a GGUF copy with other weight types and/or fewer layers (draft models)\n"
    "  train-draft  train an EAGLE-3 draft head for a model (for --spec eagle)\n"
    "  template     render a chat template (the model's, a built-in or a file) for given messages\n"
    "\n"
    "'specula COMMAND --help' shows a command's options.\n"
    "Models: smollm2-135m, gemma3-270m (fetch with scripts/fetch-models.sh) or a GGUF path.\n";

int main(int argc, char **argv) {
    sp_base_init();
    sp_cli_env_init();   /* the library reads no environment: settings go in from here */
    if (argc < 2) { fputs(main_help, stderr); return SP_EXIT_USAGE; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(main_help, stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) { printf("specula %s\n", SP_VERSION); return 0; }
    if (!strcmp(cmd, "run")) return sp_cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return sp_cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return sp_cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return sp_cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "perplexity")) return sp_cmd_perplexity(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return sp_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "tune-self")) return sp_cmd_tune_self(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return sp_cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "train-draft")) return sp_cmd_train_draft(argc - 1, argv + 1);
    if (!strcmp(cmd, "template")) return sp_cmd_template(argc - 1, argv + 1);
    fprintf(stderr, "specula: unknown command '%s'\n\n%s", cmd, main_help);
    return SP_EXIT_USAGE;
}
