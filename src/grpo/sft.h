// Supervised warm-up (grpo-train --sft): next-token loss on completion tokens
// only (the prompt is context), token mean over each step. Trains a LoRA
// adapter (written as a pail adapter file, usable as --init-adapter) or, with
// full, every base weight (written as a Hugging Face checkpoint folder with
// the source model's tokenizer files). Rows: {"prompt", "completion"}, or
// {"messages": [...]} whose last message is the assistant's completion.
#pragma once
#include <signal.h>
#include <stdbool.h>
#include "backend.h"
#include "core/err.h"
#include "grpo/schedule.h"
#include "tokenizer/chat.h"

typedef struct {
    const char *model_dir, *data_path, *out;  // out: adapter .h5 (LoRA) or checkpoint folder (full)
    ChatSource chat_source;  // --chat-template, --chat-template-name, --chat-template-kwargs, --prompt-format
    bool full, chat;
    int lora_rank;
    double lora_alpha;
    unsigned lora_targets;
    bool rslora;
    double lr, beta1, beta2, adam_eps, weight_decay, max_grad_norm, min_lr_ratio;
    LrScheduleKind schedule;   // after warmup: constant or cosine decay
    long warmup_steps, steps, batch, seed;
    int token_budget;
    const char *metrics_path;  // JSON lines per logged step (NULL: none)
    int log_every;
    const char *valid_path;    // NULL, or rows like data_path: greedy exact-match accuracy every valid_every steps
    int valid_every;
    double stop_accuracy;      // > 0: stop once the validation accuracy reaches it
    size_t max_memory;         // refuse a memory plan above this many bytes (0: the host's available memory)
    int weights_dtype;         // --dtype (MODEL_DTYPE_AUTO or a DType; 0: DT_F32); --full always holds f32
    Backend *backend;          // where it computes (borrowed; NULL: the CPU); --full: host memory only
} SftConfig;

int sft_run(const SftConfig *cfg, volatile sig_atomic_t *stop, PailErr *err);
