// What a --model argument names, resolved to a local model folder by one rule
// for every tool: a folder as it is; a Hugging Face id (ORG/NAME) from the local
// Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub
// or ~/.cache/huggingface/hub: models--ORG--NAME/snapshots/<refs/main>); a .gguf
// file or a model not there is an error that says what to run (import-gguf,
// hf download). Reads the file system only; nothing is downloaded.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "core/err.h"

// The folder arg names, into out. *from_cache says whether it came from the
// Hugging Face cache. -1 with err (PAIL_ERR_NOT_FOUND or PAIL_ERR_INVALID) naming
// arg and what to do.
int model_path_resolve(const char *arg, char *out, size_t cap, bool *from_cache, PailErr *err);
// For a tool's --model flag value: replaces *model (malloc'd, as flags.c keeps
// strings) with the folder it names, saying so on stderr when it came from the
// cache. 0, or 1 after printing "prog: --model ...: what is wrong".
int model_path_cli(const char *prog, char **model);
