// grpo-ctl plan: the memory plan a tool would print before allocating, for a
// model folder (its config.json only) or a named shape, without loading or
// running anything: e.g. whether the 7B shape in bf16 with --recompute fits a
// 24 GB card (--max-memory 24G; exit 1 when it does not).
#include <stdio.h>
#include <string.h>
#include "ctl/ctl.h"
#include "grpo/budget.h"
#include "grpo/trainer.h"
#include "lora/lora.h"
#include "model/device.h"
#include "model/memplan.h"
#include "model/modelgen.h"
#include "model/weights.h"
#include "rollout/generate.h"

// A training plan of T tokens for budget_choose: the plan as printed below.
typedef struct {
    const ModelConfig *cfg;
    MemoryPlanSpec spec;
    const char *device;
    long gps;
    int G;
} PlanCtx;

static int plan_train(void *ctx, int T, bool recompute, MemoryPlan *mp, PailErr *err) {
    PlanCtx *pc = ctx;
    MemoryPlanSpec spec = pc->spec;
    spec.token_budget = T;
    spec.recompute = recompute;
    if (memplan_build(mp, pc->cfg, &spec, pc->device, err) < 0) return -1;
    TrainerConfig tc = {.token_budget = T, .groups_per_step = pc->gps, .group_size = pc->G};
    memplan_set_own(mp, trainer_buffers_bytes(&tc, (int64_t)mp->n_lora));
    return 0;
}

int ctl_plan(int argc, char **argv) {
    char *model = NULL, *shape = NULL, *role = NULL, *dtype = NULL, *targets = NULL, *max_memory = NULL,
         *device = NULL, *kv_memory = NULL, *kv_dtype = NULL;
    long layers, rank, budget, max_seq, batch, max_new, max_prompt, prefill, gps, G;
    bool recompute;
    Flag fl[] = {
        {"model", FLAG_STRING, &model, NULL, 1, 0, "a Hugging Face model folder (config.json is read, nothing else)"},
        {"shape", FLAG_STRING, &shape, NULL, 1, 0, "or a shape of grpo-ctl init-model (tiny, bench, qwen2.5-0.5b, qwen2.5-7b)"},
        {"layers", FLAG_INT, &layers, "0", 0, 100000, "override the number of layers (0: the model's)"},
        {"role", FLAG_STRING, &role, "train", 1, 0, "train (grpo-train), rollout (grpo-rollout), or forward (grpo-ctl logprobs)"},
        {"dtype", FLAG_STRING, &dtype, "auto", 1, 0,
         "base weights: auto (--model: as its safetensors store them; --shape: bf16, as checkpoints ship), "
         "bf16, f16 or f32"},
        {"lora-rank", FLAG_INT, &rank, "16", 0, 64, "LoRA rank (0: no adapter)"},
        {"lora-targets", FLAG_STRING, &targets, "all", 1, 0, "LoRA target modules as grpo-train"},
        {"token-budget", FLAG_INT, &budget, "0", 0, 1 << 24,
         "train/forward: tokens per packed micro-batch; 0: train: as grpo-train's auto (doc/performance.md), forward: "
         "4096 (grpo-ctl logprobs' default)"},
        {"max-seq-tokens", FLAG_INT, &max_seq, "1280", 16, 1 << 24, "train, with --token-budget 0: the longest prompt + completion"},
        {"recompute", FLAG_BOOL, &recompute, "false", 1, 0, "train: keep only layer inputs"},
        {"groups-per-step", FLAG_INT, &gps, "16", 1, 1000000, "train: prompt groups per step; rollout: groups per shard"},
        {"group-size", FLAG_INT, &G, "8", 1, 4096, "train, rollout: completions per prompt"},
        {"batch-size", FLAG_INT, &batch, "32", 1, 4096, "rollout: sequences decoded together"},
        {"max-new-tokens", FLAG_INT, &max_new, "256", 1, 1 << 20, "rollout: completion length limit"},
        {"max-prompt-tokens", FLAG_INT, &max_prompt, "1024", 1, 1 << 20, "rollout: longest prompt"},
        {"prefill-tokens", FLAG_INT, &prefill, "1024", 1, 1 << 20, "rollout: tokens of one batched prompt prefill"},
        KV_DTYPE_CLI_FLAG(&kv_dtype),
        {"max-memory", FLAG_STRING, &max_memory, NULL, 1, 0, "the device's memory, e.g. 24G (default: this host's available memory)"},
        {"kv-memory", FLAG_STRING, &kv_memory, NULL, 1, 0,
         "rollout: the KV block pool's bytes as grpo-rollout (default: the full pool, or what --max-memory leaves)"},
        {"device", FLAG_STRING, &device, "cpu", 1, 0, "the device named in the plan (cpu, cuda:0, ...)"},
    };
    int n = sizeof fl / sizeof fl[0], rc;
    const char *usage = "grpo-ctl plan (--model DIR | --shape NAME) [--role train|rollout|forward] [sizes]";
    if ((rc = ctl_parse(usage, "Prints the memory plan of a training or rollout process without allocating it.", fl, n,
                        argc, argv, NULL, NULL)) >= 0)
        goto done;
    rc = 2;
    PailErr err = {0};
    ModelConfig cfg;
    MemoryPlanSpec spec = {.weights_dtype = dtype, .lora_rank = (int)rank, .token_budget = (int)budget,
                        .recompute = recompute, .groups_per_step = (int)gps, .group_size = (int)G,
                        .batch_size = (int)batch, .max_ctx = (int)(max_prompt + max_new),
                        .max_new_tokens = (int)max_new};
    size_t limit = 0;
    if (!!model == !!shape) {
        fprintf(stderr, "%s: give --model DIR or --shape NAME\nusage: %s\n", argv[0], usage);
        goto done;
    }
    int want, want_kv;
    if (kv_dtype_cli(argv[0], kv_dtype, &want_kv) != 0) goto done;
    if (model_dtype_parse(dtype, &want) < 0) {
        fprintf(stderr, "%s: --dtype '%s': use auto, bf16, f16 or f32 (or bfloat16, float16, float32)\n", argv[0], dtype);
        goto done;
    }
    char wdesc[MODEL_DTYPE_DESC];
    if (want != MODEL_DTYPE_AUTO) spec.weights_dtype = dtype_name((DType)want);  // an alias as its one spelling
    else if (shape) spec.weights_dtype = "bf16";
    if (!strcmp(role, "train")) spec.role = MEMPLAN_TRAIN;
    else if (!strcmp(role, "rollout")) spec.role = MEMPLAN_ROLLOUT;
    else if (!strcmp(role, "forward")) spec.role = MEMPLAN_FORWARD;
    else {
        fprintf(stderr, "%s: --role '%s': use train, rollout or forward\n", argv[0], role);
        goto done;
    }
    if (spec.role == MEMPLAN_ROLLOUT) spec.token_budget = generator_token_budget((int)max_prompt, (int)batch, (int)prefill);
    else if (spec.role == MEMPLAN_FORWARD && !budget) spec.token_budget = 4096;
    else if (!budget) spec.token_budget = BUDGET_MAX_SEQ_DEFAULT;  // train: replaced by the auto choice below
    if (lora_targets_parse(targets, &spec.lora_targets, &err) < 0 ||
        (max_memory && memplan_parse_size(max_memory, &limit, &err) < 0) ||
        (kv_memory && memplan_parse_size(kv_memory, &spec.kv_memory, &err) < 0)) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    rc = 1;
    if (shape) {
        ModelType type = !strncmp(shape, "qwen2.5", 7) ? MODEL_QWEN2 : MODEL_LLAMA;
        if (modelgen_shape(&cfg, shape, type) < 0) {
            fprintf(stderr, "%s: --shape '%s': use tiny, bench, qwen2.5-0.5b or qwen2.5-7b\n", argv[0], shape);
            rc = 2;
            goto done;
        }
        cfg.head_dim = cfg.hidden_size / cfg.num_attention_heads;
    } else if (model_config_load(&cfg, model, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    bool probed = false;
    size_t pbytes = 0;
    if (model && want == MODEL_DTYPE_AUTO) {
        // as its safetensors store them (quantized blocks included); a folder with config.json alone: its torch_dtype
        PailErr perr = {0};
        probed = !layers && model_weights_probe(model, want, &pbytes, wdesc, &perr) == 0;
        if (!probed)
            spec.weights_dtype = !strcmp(cfg.dtype, "bfloat16") ? "bf16" : !strcmp(cfg.dtype, "float16") ? "f16" : "f32";
    }
    if (layers) cfg.num_hidden_layers = (int)layers;
    if (probed) {
        spec.weights_dtype = wdesc;
        spec.weights_bytes = pbytes;
    }
    spec.kv_dtype = kv_dtype_resolve(want_kv, spec.weights_dtype);  // rollout: as grpo-rollout resolves it
    MemoryPlan p;
    if (memplan_build(&p, &cfg, &spec, device, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    if (spec.role == MEMPLAN_TRAIN && !budget) {  // grpo-train's --token-budget auto, fitted to --max-memory
        PlanCtx pc = {.cfg = &cfg, .spec = spec, .device = device, .gps = gps, .G = (int)G};
        BudgetChoice ch;
        if (budget_choose((int)G, (int)max_seq, recompute, limit, plan_train, &pc, &ch, &err) < 0 ||
            plan_train(&pc, ch.token_budget, ch.recompute, &p, &err) < 0) {
            fprintf(stderr, "%s: %s\n", argv[0], err.msg);
            goto done;
        }
        printf("--token-budget auto: %s\n", ch.why);
    } else if (spec.role == MEMPLAN_TRAIN) {  // the trainer's own block, sized as grpo-train sizes it
        TrainerConfig tc = {.token_budget = (int)budget, .groups_per_step = gps, .group_size = (int)G};
        memplan_set_own(&p, trainer_buffers_bytes(&tc, (int64_t)p.n_lora));
    }
    memplan_fit_kv(&p, limit);  // rollout without --kv-memory: the pool gets what the rest leaves
    memplan_print(stdout, &p, shape ? shape : model);
    if (memplan_check(&p, limit, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    int need = generator_min_blocks((int)max_prompt, (int)max_new);
    if (spec.role == MEMPLAN_ROLLOUT && p.kv_blocks < need) {
        fprintf(stderr, "%s: KV pool of %d blocks (%s) cannot hold one sequence of %ld prompt + %ld new tokens: it "
                "needs %d blocks of %d tokens (%.1f MiB): raise --kv-memory%s or lower --max-new-tokens or "
                "--max-prompt-tokens\n", argv[0], p.kv_blocks, kv_memory ? "--kv-memory" : "what the limit leaves",
                max_prompt, max_new, need, KV_BLOCK, (double)need * p.kv_block_bytes / 1048576.0,
                kv_memory ? "" : " or --max-memory");
        goto done;
    }
    rc = 0;
done:
    flags_free(fl, n);
    return rc;
}
