// grpo-train: parses flags (every default is written here, once), wires the
// trainer (src/grpo/trainer.c) and handles preemption signals.
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/flags.h"
#include "core/log.h"
#include "core/threads.h"
#include "grpo/sft.h"
#include "grpo/trainer.h"
#include "lora/lora.h"
#include "model/device.h"
#include "model/model_path.h"
#include "store/cli.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    // SIGTERM / SIGUSR1 (Slurm preemption): finish the step, publish, exit.
    // A second SIGINT abandons the current step.
    g_stop = (sig == SIGINT && g_stop) ? 2 : 1;
}

static json_t *effective_json(const Flag *fl, int n) {
    json_t *j = json_object();
    for (int i = 0; i < n; i++) {
        const Flag *f = &fl[i];
        if (!strcmp(f->name, "config") || !strcmp(f->name, "help")) continue;
        switch (f->type) {
        case FLAG_BOOL: json_object_set_new(j, f->name, json_boolean(*(bool *)f->dst)); break;
        case FLAG_INT: json_object_set_new(j, f->name, json_integer(*(long *)f->dst)); break;
        case FLAG_DOUBLE: json_object_set_new(j, f->name, json_real(*(double *)f->dst)); break;
        case FLAG_STRING: {
            const char *s = *(char **)f->dst;
            json_object_set_new(j, f->name, s ? json_string(s) : json_null());
            break;
        }
        case FLAG_LIST: {
            json_t *a = json_array();
            FlagList *l = f->dst;
            for (int k = 0; k < l->n; k++) json_array_append_new(a, json_string(l->items[k]));
            json_object_set_new(j, f->name, a);
            break;
        }
        }
    }
    return j;
}

int main(int argc, char **argv) {
    threads_policy_apply(argv);  // first: it may start this program again (core/threads.h)
    log_init("grpo-train", LOG_INFO);
    char *config = NULL, *model = NULL, *run = NULL, *replay = NULL, *sft = NULL, *init_adapter = NULL,
         *targets = NULL, *scale = NULL, *ratio = NULL, *loss = NULL, *schedule = NULL, *dump_grads = NULL,
         *metrics = NULL, *out = NULL, *prompt_format = NULL, *chat_file = NULL, *chat_name = NULL, *chat_kwargs = NULL, *run_id = NULL, *task = NULL, *device = NULL,
         *max_memory = NULL, *dtype = NULL, *quantize = NULL;
    long rank, steps, gps, G, stale, budget, max_seq, publish_every, keep, warmup, seed, resume_from;
    double alpha, lr, eps_low, eps_high, tis, beta, b1, b2, aeps, wd, clip, min_lr, rollout_timeout, late_grace;
    bool clear_stop, resume, replay_record, full, rslora, recompute, chat, train_zero_adv, dynamic_sampling;
    StoreCliFlags sf = {0};
    long log_every, valid_every;
    double stop_accuracy;
    char *valid = NULL;
    Flag fl[] = {
        {"config", FLAG_STRING, &config, NULL, 1, 0, "file of key = value lines (the command line wins)"},
        {"model", FLAG_STRING, &model, NULL, 1, 0, "Hugging Face model folder (config.json, *.safetensors), or ORG/NAME in the local Hugging Face cache"},
        {"run", FLAG_STRING, &run, NULL, 1, 0, "the run's prefix: file:///abs/dir or s3://bucket/prefix"},
        {"steps", FLAG_INT, &steps, "200", 0, 100000000, "optimizer steps (a resumed run counts its own; reaching them marks the run done in trainer/progress.json and the workers exit; 0: publish v0 and stop, the run left open)"},
        {"groups-per-step", FLAG_INT, &gps, "16", 1, 1000000, "prompt groups per optimizer step"},
        {"group-size", FLAG_INT, &G, "8", 2, 4096, "completions per prompt G (shards must match)"},
        {"lora-rank", FLAG_INT, &rank, "16", 1, 64, "LoRA rank R"},
        {"lora-alpha", FLAG_DOUBLE, &alpha, "32", 1e-6, 1e6, "LoRA alpha (scaling alpha/R)"},
        {"lora-targets", FLAG_STRING, &targets, "all", 1, 0,
         "modules: comma list of q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj (phi3: qkv_proj,o_proj,"
         "gate_up_proj,down_proj; mixtures of experts: experts (= experts.gate_up_proj,experts.down_proj), "
         "shared_expert (qwen2_moe), router (only when named)), or all/attn/mlp (the modules the model has)"},
        {"rslora", FLAG_BOOL, &rslora, "false", 1, 0, "scale by alpha/sqrt(R) (rsLoRA)"},
        {"lr", FLAG_DOUBLE, &lr, "1e-5", 0, 10, "AdamW learning rate"},
        {"lr-schedule", FLAG_STRING, &schedule, "constant", 1, 0, "constant or cosine (after warmup)"},
        {"warmup-steps", FLAG_INT, &warmup, "0", 0, 100000000, "linear warmup steps"},
        {"min-lr-ratio", FLAG_DOUBLE, &min_lr, "0", 0, 1, "cosine floor as a fraction of --lr"},
        {"adam-beta1", FLAG_DOUBLE, &b1, "0.9", 0, 0.999999, "AdamW beta1"},
        {"adam-beta2", FLAG_DOUBLE, &b2, "0.999", 0, 0.99999999, "AdamW beta2"},
        {"adam-eps", FLAG_DOUBLE, &aeps, "1e-8", 0, 1, "AdamW epsilon"},
        {"weight-decay", FLAG_DOUBLE, &wd, "0", 0, 10, "AdamW decoupled weight decay"},
        {"max-grad-norm", FLAG_DOUBLE, &clip, "1.0", 0, 1e9, "global gradient-norm clip (0: off)"},
        {"loss", FLAG_STRING, &loss, "dapo", 1, 0, "aggregation: dapo (token mean over the step), grpo, dr_grpo"},
        {"ratio", FLAG_STRING, &ratio, "token", 1, 0, "importance ratio: token, or sequence (GSPO)"},
        {"epsilon-low", FLAG_DOUBLE, &eps_low, "-1", -1, 10, "clip range low (-1: 0.2, or 3e-4 for --ratio sequence)"},
        {"epsilon-high", FLAG_DOUBLE, &eps_high, "-1", -1, 10, "clip range high (-1: 0.2, or 4e-4 for --ratio sequence); 0.28 is DAPO's clip-higher"},
        {"tis-cap", FLAG_DOUBLE, &tis, "0", 0, 1e6, "cap on the importance ratio (TRL's delta, dual clip); 0: off"},
        {"beta", FLAG_DOUBLE, &beta, "0", 0, 100, "k3 KL penalty against the base model (LoRA off); 0: off"},
        {"scale-rewards", FLAG_STRING, &scale, "group", 1, 0, "advantage scaling: group, batch, or none (Dr. GRPO)"},
        {"max-staleness", FLAG_INT, &stale, "4", 0, 1000000, "use shards at most this many versions behind"},
        {"token-budget", FLAG_INT, &budget, "0", 0, 1 << 24,
         "tokens per packed micro-batch (at least 16); 0: auto, a group (--group-size x --max-seq-tokens) at most 4096 "
         "(at least one sequence of --max-seq-tokens), halved to fit the memory, then with --recompute (one log line says which; doc/performance.md); --sft: 0 is 16384"},
        {"max-seq-tokens", FLAG_INT, &max_seq, "1280", 16, 1 << 24,
         "the longest prompt + completion the workers send (their --max-prompt-tokens + --max-new-tokens, or "
         "--max-episode-tokens with --env): sizes --token-budget 0 (a sequence longer than the budget is dropped as too long)"},
        {"publish-every", FLAG_INT, &publish_every, "1", 1, 1000000, "publish an adapter version every N steps"},
        {"keep-versions", FLAG_INT, &keep, "0", 0, 100000000, "retention: keep the newest N versions (0: all)"},
        {"clear-stop", FLAG_BOOL, &clear_stop, "false", 1, 0,
         "remove a control/stop left in the run (grpo-ctl stop) before starting; without it such a trainer says so "
         "and stops before training"},
        {"resume", FLAG_BOOL, &resume, "true", 1, 0, "continue from the run's newest state (--no-resume refuses a run with state)"},
        {"resume-from", FLAG_INT, &resume_from, "-1", -1, 99999999,
         "resume from this trainer state version instead of the newest (after a corrupt or missing state; new "
         "versions follow the newest published one); -1: the newest"},
        {"replay", FLAG_STRING, &replay, NULL, 1, 0, "train offline from the shards under this run prefix, in key order"},
        {"replay-record", FLAG_BOOL, &replay_record, "false", 1, 0,
         "with --replay: consume exactly the groups the source run's trainer committed, in its order (the record "
         "in its trainer states), instead of key order"},
        {"init-adapter", FLAG_STRING, &init_adapter, NULL, 1, 0, "start v0 from an adapter: a pail .h5 file (e.g. an --sft result) or a PEFT folder"},
        {"sft", FLAG_STRING, &sft, NULL, 1, 0,
         "supervised warm-up from JSON lines {prompt, completion} or {messages} instead of GRPO (--steps steps of "
         "--groups-per-step examples)"},
        {"full", FLAG_BOOL, &full, "false", 1, 0, "with --sft: train every weight and write a checkpoint folder to --out"},
        {"out", FLAG_STRING, &out, NULL, 1, 0, "with --sft: the adapter file (.h5) or, with --full, the checkpoint folder"},
        {"chat", FLAG_BOOL, &chat, "false", 1, 0, "with --sft: render prompts as a user message with the chat template"},
        CHAT_CLI_FLAGS(&chat_file, &chat_name, &chat_kwargs, &prompt_format),  // with --sft
        {"log-every", FLAG_INT, &log_every, "10", 1, 1000000, "with --sft: log the loss every N steps"},
        {"sft-valid", FLAG_STRING, &valid, NULL, 1, 0, "with --sft: validation rows; greedy exact-match accuracy every --valid-every steps"},
        {"valid-every", FLAG_INT, &valid_every, "50", 1, 1000000, "with --sft-valid: steps between validations"},
        {"stop-accuracy", FLAG_DOUBLE, &stop_accuracy, "0", 0, 1, "with --sft-valid: stop once validation accuracy reaches this (0: never)"},
        {"recompute", FLAG_BOOL, &recompute, "false", 1, 0, "recompute layer activations in the backward (less memory)"},
        {"train-zero-advantage", FLAG_BOOL, &train_zero_adv, "false", 1, 0,
         "also run the forward and backward of completions whose advantage is 0 (groups with no reward spread); "
         "without --beta their gradient is 0, so this only costs time and makes entropy and ratio metrics cover "
         "every completion"},
        {"dynamic-sampling", FLAG_BOOL, &dynamic_sampling, "false", 1, 0,
         "DAPO's dynamic sampling: a group whose rewards have no spread (all right, all wrong) is consumed but not "
         "trained, and a step waits for --groups-per-step groups with a signal; the workers then generate more "
         "groups per step (metrics: groups_filtered, reward_sampled)"},
        {"rollout-timeout", FLAG_DOUBLE, &rollout_timeout, "0", 0, 1e9, "fail after waiting this long for rollouts (0: wait)"},
        {"late-grace", FLAG_DOUBLE, &late_grace, "600", 0, 1e6, "seconds a version that left the staleness window is still re-listed (every 30 s) so a shard landing late for it is counted as dropped, not missed"},
        {"dump-grads", FLAG_STRING, &dump_grads, NULL, 1, 0, "write the first step's LoRA gradients (adapter layout) here"},
        {"metrics", FLAG_STRING, &metrics, NULL, 1, 0,
         "also append the per-step metrics (JSON lines) to this local file (default: none, the run's metrics/ has "
         "them; with --sft: OUT.metrics.jsonl beside --out)"},
        {"seed", FLAG_INT, &seed, "0", 0, 9007199254740991L, "seed (LoRA init, shuffles)"},
        {"run-id", FLAG_STRING, &run_id, NULL, 1, 0, "run id for a new run (default: derived)"},
        {"task", FLAG_STRING, &task, NULL, 1, 0, "task description recorded in run.json"},
        DEVICE_CLI_FLAG(&device),
        DTYPE_CLI_FLAG(&dtype),
        QUANTIZE_CLI_FLAG(&quantize),
        MAX_MEMORY_CLI_FLAG(&max_memory),
        STORE_CLI_FLAGS(&sf),
    };
    int n = sizeof fl / sizeof fl[0];
    int rc = flags_cli("grpo-train",
                       "grpo-train --model DIR --run URL [flags]",
                       "GRPO on a LoRA adapter from rollout shards in the run's bucket prefix; publishes adapter\n"
                       "versions and resumable state (doc/protocol.md). SIGTERM/SIGUSR1: finish the step, publish, exit.",
                       fl, n, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (model && model_path_cli("grpo-train", &model) != 0) {  // a folder, or a Hugging Face id in the cache
        flags_free(fl, n);
        return 1;
    }
    PailErr err = {0};
    TrainerConfig c = {.model_dir = model, .run_url = run, .replay_url = replay, .replay_record = replay_record, .init_adapter = init_adapter,
                       .dump_grads = dump_grads, .metrics_path = metrics && *metrics ? metrics : NULL,
                       .run_id = run_id, .task = task, .lora_rank = (int)rank, .lora_alpha = alpha, .rslora = rslora,
                       .lr = lr, .beta1 = b1, .beta2 = b2, .adam_eps = aeps, .weight_decay = wd, .max_grad_norm = clip,
                       .min_lr_ratio = min_lr, .warmup_steps = warmup, .steps = steps, .groups_per_step = gps,
                       .group_size = (int)G, .max_staleness = (int)stale, .token_budget = (int)budget, .max_seq_tokens = (int)max_seq,
                       .publish_every = (int)publish_every, .seed = seed, .recompute = recompute, .train_zero_advantage = train_zero_adv, .dynamic_sampling = dynamic_sampling,
                       .rollout_timeout = rollout_timeout, .late_grace = late_grace, .resume_from = resume_from};
    c.store = store_cli_options(&sf);
    int usage = 0;
    if (!sft && (!model || !run)) { fprintf(stderr, "grpo-train: --model and --run are required (see --help)\n"); usage = 1; }
    if (!usage && lora_targets_parse(targets, &c.lora_targets, &err) < 0) { fprintf(stderr, "grpo-train: --lora-targets: %s\n", err.msg); usage = 1; }
    if (!strcmp(schedule, "constant")) c.schedule = SCHEDULE_CONSTANT;
    else if (!strcmp(schedule, "cosine")) c.schedule = SCHEDULE_COSINE;
    else { fprintf(stderr, "grpo-train: --lr-schedule '%s': use constant or cosine\n", schedule); usage = 1; }
    if (!strcmp(scale, "group")) c.scale_rewards = SCALE_GROUP;
    else if (!strcmp(scale, "batch")) c.scale_rewards = SCALE_BATCH;
    else if (!strcmp(scale, "none")) c.scale_rewards = SCALE_NONE;
    else { fprintf(stderr, "grpo-train: --scale-rewards '%s': use group, batch or none\n", scale); usage = 1; }
    if (!strcmp(loss, "dapo")) c.loss.type = LOSS_DAPO;
    else if (!strcmp(loss, "grpo")) c.loss.type = LOSS_GRPO;
    else if (!strcmp(loss, "dr_grpo")) c.loss.type = LOSS_DR_GRPO;
    else { fprintf(stderr, "grpo-train: --loss '%s': use dapo, grpo or dr_grpo\n", loss); usage = 1; }
    if (!strcmp(ratio, "token")) c.loss.ratio = RATIO_TOKEN;
    else if (!strcmp(ratio, "sequence")) c.loss.ratio = RATIO_SEQUENCE;
    else { fprintf(stderr, "grpo-train: --ratio '%s': use token or sequence\n", ratio); usage = 1; }
    if (budget > 0 && budget < 16) { fprintf(stderr, "grpo-train: --token-budget %ld: at least 16 tokens (0: auto)\n", budget); usage = 1; }
    if (replay_record && !replay) { fprintf(stderr, "grpo-train: --replay-record needs --replay (the source run)\n"); usage = 1; }
    if (full && !sft) { fprintf(stderr, "grpo-train: --full needs --sft (GRPO trains a LoRA adapter)\n"); usage = 1; }
    if (sft && !out) { fprintf(stderr, "grpo-train: --sft needs --out (adapter file, or folder with --full)\n"); usage = 1; }
    if (sft && !model) { fprintf(stderr, "grpo-train: --sft needs --model\n"); usage = 1; }
    if (dtype_cli("grpo-train", dtype, quantize, &c.weights_dtype) != 0) usage = 1;
    else if (full && c.weights_dtype != MODEL_DTYPE_AUTO && c.weights_dtype != DT_F32) {
        fprintf(stderr, "grpo-train: --full trains fp32 master weights: --dtype must be auto or f32, --quantize none\n");
        usage = 1;
    }
    c.keep_versions = keep;
    if (usage) {
        flags_free(fl, n);
        return 2;
    }
    Backend *be;
    if ((rc = max_memory_cli("grpo-train", max_memory, &c.max_memory)) != 0 ||
        (rc = device_open_cli("grpo-train", device, DEVICE_READY_SIM, c.max_memory, &be)) != 0) {
        flags_free(fl, n);
        return rc;
    }
    c.backend = be;
    bool seq = c.loss.ratio == RATIO_SEQUENCE;
    if (eps_low < 0) eps_low = seq ? 3e-4 : 0.2;
    if (eps_high < 0) eps_high = seq ? 4e-4 : 0.2;
    c.loss.eps_low = eps_low;
    c.loss.eps_high = eps_high;
    c.loss.tis_cap = tis;
    c.loss.beta = beta;
    fprintf(stderr, "grpo-train: effective configuration\n");
    flags_print(stderr, fl, n);
    c.effective = effective_json(fl, n);
    json_object_set_new(c.effective, "epsilon-low", json_real(eps_low));
    json_object_set_new(c.effective, "epsilon-high", json_real(eps_high));
    c.refuse_resume = !resume;
    c.clear_stop = clear_stop;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    // Stopping with the bucket down: 20 s more to publish (within Slurm's default 30 s KillWait).
    retry_stop_on(&g_stop, 20);
    char sft_metrics[4096];
    if (sft && !flags_given(argc, argv, "metrics") && !metrics) {  // no bucket: beside the --out it writes
        size_t ol = strlen(out);
        while (ol > 1 && out[ol - 1] == '/') ol--;
        if ((size_t)snprintf(sft_metrics, sizeof sft_metrics, "%.*s.metrics.jsonl", (int)ol, out) < sizeof sft_metrics) {
            c.metrics_path = sft_metrics;
            fprintf(stderr, "grpo-train: --sft: metrics to %s\n", sft_metrics);
        }
    }
    if (sft) {
        SftConfig s = {.model_dir = model, .data_path = sft, .out = out, .full = full,
                       .chat_source = {.template_file = chat_file, .template_name = chat_name, .kwargs_json = chat_kwargs, .prompt_format = prompt_format},
                       .chat = chat, .lora_rank = (int)rank, .lora_alpha = alpha, .lora_targets = c.lora_targets,
                       .rslora = rslora, .lr = lr, .beta1 = b1, .beta2 = b2, .adam_eps = aeps, .weight_decay = wd,
                       .max_grad_norm = clip, .min_lr_ratio = min_lr, .schedule = c.schedule,
                       .warmup_steps = warmup, .steps = steps, .batch = gps, .seed = seed, .token_budget = budget ? (int)budget : 16384,
                       .metrics_path = c.metrics_path, .log_every = (int)log_every, .valid_path = valid,
                       .valid_every = (int)valid_every, .stop_accuracy = stop_accuracy, .max_memory = c.max_memory,
                       .weights_dtype = c.weights_dtype, .backend = be};
        rc = sft_run(&s, &g_stop, &err);
    } else {
        rc = trainer_run(&c, &g_stop, &err);
    }
    if (rc < 0) fprintf(stderr, "grpo-train: %s\n", err.msg);
    backend_close(be);
    json_decref(c.effective);
    flags_free(fl, n);
    return rc < 0 ? 1 : 0;
}
