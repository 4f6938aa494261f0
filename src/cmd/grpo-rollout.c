// grpo-rollout: parses flags (every default is written here, once) and wires
// the worker (src/rollout/worker.c). SIGTERM: finish the batch, exit 0.
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/flags.h"
#include "core/log.h"
#include "core/threads.h"
#include "model/device.h"
#include "model/memplan.h"
#include "model/model_path.h"
#include "rollout/reward_cli.h"
#include "rollout/worker.h"
#include "store/retry.h"
#include "store/runlayout.h"
#include "store/cli.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = (sig == SIGINT && g_stop) ? 2 : 1; }

int main(int argc, char **argv) {
    threads_policy_apply(argv);  // first: it may start this program again (core/threads.h)
    log_init("grpo-rollout", LOG_INFO);
    char *device = NULL, *max_memory = NULL, *kv_memory = NULL, *dtype = NULL, *quantize = NULL, *kv_dtype = NULL, *config = NULL, *model = NULL, *run = NULL, *worker = NULL, *dataset = NULL,
         *prompt_format = NULL, *eval_dataset = NULL, *chat_file = NULL, *chat_name = NULL, *chat_kwargs = NULL,
         *max_ahead_s = NULL, *env = NULL, *tool_format = NULL, *serve = NULL, *serve_cert = NULL,
         *serve_tls_key = NULL, *serve_key_file = NULL, *served_name = NULL;
    long G, batch, max_new, max_prompt, prefill, top_k, seed, max_shards, gps, windex, nworkers,
        eval_every, eval_samples, max_turns, max_episode, serve_max, serve_max_conns;
    double temperature, top_p, min_p, wait_timeout, env_timeout, episode_timeout, serve_header_timeout,
        serve_idle_timeout, success_threshold = NAN;
    bool chat, eval, strict_dtype, gen_defaults;
    StoreCliFlags sf = {0};
    RewardCliFlags rf = {0};
    FlagList stops = {0};
    Flag fl[] = {
        {"config", FLAG_STRING, &config, NULL, 1, 0, "file of key = value lines (the command line wins)"},
        {"model", FLAG_STRING, &model, NULL, 1, 0, "Hugging Face model folder (with tokenizer.json), or ORG/NAME in the local Hugging Face cache"},
        {"run", FLAG_STRING, &run, NULL, 1, 0, "the run's prefix: file:///abs/dir or s3://bucket/prefix"},
        {"worker-id", FLAG_STRING, &worker, NULL, 1, 0, "[A-Za-z0-9_.-]{1,64} (default: from SLURM_* ids, else host-pid); a restart with the same id continues its prompt stream"},
        {"dataset", FLAG_STRING, &dataset, NULL, 1, 0, "prompts: JSON lines, a path or a store URL"},
        {"group-size", FLAG_INT, &G, "8", 2, 4096, "completions per prompt G"},
        {"batch-size", FLAG_INT, &batch, "32", 1, 4096, "sequences decoded together (continuous batching)"},
        {"groups-per-shard", FLAG_INT, &gps, "8", 1, 100000, "prompt groups per shard"},
        {"max-new-tokens", FLAG_INT, &max_new, "256", 1, 1 << 20, "completion length limit"},
        {"max-prompt-tokens", FLAG_INT, &max_prompt, "0", 0, 1 << 20, "longest prompt accepted (longer rows are skipped, reported and counted); with --max-new-tokens (--max-episode-tokens with --env) at most the model's positions, refused at start when past them; 0: auto, what the positions leave after --max-new-tokens, at most 1024"},
        {"prefill-tokens", FLAG_INT, &prefill, "1024", 1, 1 << 20, "prompts prefilled together in one model call, up to this many tokens (the activation plan holds max(this, --max-prompt-tokens, --batch-size) tokens)"},
        {"temperature", FLAG_DOUBLE, &temperature, "1.0", 0, 100, "sampling temperature (0: greedy, --eval workers only; else at least 0.01)"},
        {"top-p", FLAG_DOUBLE, &top_p, "1.0", 0, 1, "nucleus sampling (1: off; see doc/rollout.md on the bias)"},
        {"top-k", FLAG_INT, &top_k, "0", 0, 1 << 24, "top-k sampling (0: off)"},
        {"min-p", FLAG_DOUBLE, &min_p, "0", 0, 1,
         "min-p sampling: keep tokens at least this times the most likely one's probability (0: off; after top-k "
         "and top-p, as transformers)"},
        {"generation-defaults", FLAG_BOOL, &gen_defaults, "false", 1, 0,
         "take temperature, top_p, top_k and min_p from the model's generation_config.json (flags given on the command line win)"},
        {"stop", FLAG_LIST, &stops, NULL, 1, 0, "stop string (besides the model's EOS)"},
        REWARD_CLI_FLAGS(&rf),
        {"env", FLAG_STRING, &env, NULL, 1, 0, "multi-turn episodes with this environment program (run with /bin/sh -c; JSON lines, doc/environments.md); it gives the rewards"},
        {"max-turns", FLAG_INT, &max_turns, "8", 1, 100000, "--env, --serve: assistant turns per episode (the last is sent with \"final\": true)"},
        {"max-episode-tokens", FLAG_INT, &max_episode, "2048", 2, 1 << 20, "--env, --serve: tokens of an episode after its opening, generated and appended (also Dr.GRPO's constant)"},
        {"env-timeout", FLAG_DOUBLE, &env_timeout, "30", 0.01, 86400, "--env: seconds the program has to answer a request"},
        {"serve", FLAG_STRING, &serve, NULL, 1, 0, "HOST:PORT (or PORT: loopback): serve an OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models, /v1/episodes); agents are the environment and post the rewards (doc/environments.md). Off loopback it needs TLS and a bearer key"},
        {"serve-cert", FLAG_STRING, &serve_cert, NULL, 1, 0, "--serve: TLS certificate chain (PEM)"},
        {"serve-tls-key", FLAG_STRING, &serve_tls_key, NULL, 1, 0, "--serve: TLS private key (PEM)"},
        {"serve-api-key-file", FLAG_STRING, &serve_key_file, NULL, 1, 0, "--serve: file whose first line is the bearer key clients send (Authorization: Bearer KEY; at least 16 characters)"},
        {"served-model-name", FLAG_STRING, &served_name, NULL, 1, 0, "--serve: the model id clients name (default: the --model folder's name, or the Hugging Face id --model gives)"},
        {"episode-timeout", FLAG_DOUBLE, &episode_timeout, "300", 0.01, 86400, "--serve: seconds an episode may sit with no request in flight before it fails"},
        {"serve-max-requests", FLAG_INT, &serve_max, "64", 1, 4096, "--serve: requests without X-Pail-Episode in flight (more get 429)"},
        {"serve-max-connections", FLAG_INT, &serve_max_conns, "512", 1, 1000000, "--serve: open connections; at the cap the oldest one with no request in flight (one that never sent the key first) is closed for a newcomer, so /health and agents get in (one rate-limited log line); the file descriptor limit is raised to fit or the worker refuses to start"},
        {"serve-header-timeout", FLAG_DOUBLE, &serve_header_timeout, "30", 0.1, 86400, "--serve: seconds a new connection has to deliver its first whole request (a TLS handshake included); then it is closed"},
        {"serve-idle-timeout", FLAG_DOUBLE, &serve_idle_timeout, "60", 0.1, 86400, "--serve: seconds a keep-alive connection may wait for its next whole request, and a read or write may stall; a turn being generated is not cut by it"},
        {"tool-format", FLAG_STRING, &tool_format, "auto", 1, 0, "--env, --serve: how tool calls are parsed: auto (from the chat template), hermes (Qwen2.5/Qwen3/Hermes <tool_call>), llama3 (JSON), none"},
        {"chat", FLAG_BOOL, &chat, "false", 1, 0, "render {\"prompt\"} rows as a user message with the chat template"},
        CHAT_CLI_FLAGS(&chat_file, &chat_name, &chat_kwargs, &prompt_format),
        {"seed", FLAG_INT, &seed, "0", 0, 9007199254740991L, "sampling seed (per prompt and sample)"},
        {"max-shards", FLAG_INT, &max_shards, "0", 0, 100000000, "stop after N shards (0: until stopped)"},
        {"max-ahead", FLAG_STRING, &max_ahead_s, "auto", 1, 0, "pacing. auto: pause while the groups waiting unused in the trainer's window, this shard's and one shard per other active worker exceed (max_staleness + 1) x groups_per_step (trainer/progress.json), so none waits until it is too stale; N: pause while more than N shards wait unused in the window; 0: never pause (never below one step's worth; doc/rollout.md)"},
        {"worker-index", FLAG_INT, &windex, "0", 0, 1000000, "with --num-workers: this worker's partition"},
        {"num-workers", FLAG_INT, &nworkers, "0", 0, 1000000, "deterministic partition of the dataset (0: own shuffle)"},
        {"wait-timeout", FLAG_DOUBLE, &wait_timeout, "0", 0, 1e9, "give up waiting for the run (0: wait)"},
        {"eval", FLAG_BOOL, &eval, "false", 1, 0, "evaluation worker: score --eval-dataset for each new adapter"},
        {"eval-dataset", FLAG_STRING, &eval_dataset, NULL, 1, 0, "held-out prompts for --eval"},
        {"eval-every", FLAG_INT, &eval_every, "1", 1, 1000000, "evaluate every N versions (and v0)"},
        {"eval-samples", FLAG_INT, &eval_samples, "1", 1, 1024, "1: greedy; k: pass@k with the sampling settings"},
        {"success-threshold", FLAG_DOUBLE, &success_threshold, NULL, -1e6, 1e6, "--eval: a completion is correct when its total reward >= this (default: exact_answer == 1, or a lone format == 1; otherwise accuracy is not defined)"},
        DEVICE_CLI_FLAG(&device),
        DTYPE_CLI_FLAG(&dtype),
        QUANTIZE_CLI_FLAG(&quantize),
        KV_DTYPE_CLI_FLAG(&kv_dtype),
        {"strict-dtype", FLAG_BOOL, &strict_dtype, "false", 1, 0,
         "refuse a run whose trainer computes in another dtype than --dtype gives this worker (default: warn)"},
        MAX_MEMORY_CLI_FLAG(&max_memory),
        {"kv-memory", FLAG_STRING, &kv_memory, NULL, 1, 0,
         "bytes of the KV block pool, e.g. 2G, 512M (default: every decode slot at --max-prompt-tokens + "
         "--max-new-tokens, or what --max-memory / the available memory leaves after the rest of the plan); "
         "sequences are admitted while blocks last and the youngest is preempted and replayed when they run out "
         "(doc/rollout.md); refused below one sequence's blocks"},
        STORE_CLI_FLAGS(&sf),
    };
    int n = sizeof fl / sizeof fl[0];
    int rc = flags_cli("grpo-rollout",
                       "grpo-rollout --model DIR --run URL --dataset FILE [flags]",
                       "Generates groups of completions with the run's newest adapter, scores them and writes\n"
                       "rollout shards (doc/protocol.md). --eval: scores a held-out set for each new version.",
                       fl, n, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    char *model_arg = model ? strdup(model) : NULL;
    if (model && model_path_cli("grpo-rollout", &model) != 0) {  // a folder, or a Hugging Face id in the cache
        free(model_arg);
        flags_free(fl, n);
        return 1;
    }
    if (serve && !served_name && model_arg && strcmp(model_arg, model)) served_name = model_arg;  // the id, not a hash
    else free(model_arg);
    PailErr err = {0};
    if (!model || !run || (!eval && !dataset) || (eval && !eval_dataset)) {
        fprintf(stderr, "grpo-rollout: --model, --run and --dataset (or --eval with --eval-dataset) are required\n");
        flags_free(fl, n);
        return 2;
    }
    if (!eval && !isnan(success_threshold)) {  // it decides an evaluation's accuracy only
        fprintf(stderr, "grpo-rollout: --success-threshold is for --eval (a generating worker's rewards are what it writes)\n");
        flags_free(fl, n);
        return 2;
    }
    if (worker && worker_id_check(worker, &err) < 0) {  // before any model is loaded
        fprintf(stderr, "grpo-rollout: --worker-id: %s\n", err.msg);
        flags_free(fl, n);
        return 2;
    }
    const char *rflag = reward_cli_given(argc, argv);
    const char *clash = serve && env ? "env" : serve && rflag ? rflag : serve && eval ? "eval" : NULL;
    if (clash) {
        fprintf(stderr, "grpo-rollout: --serve: the agents are the environment and give the rewards (no --%s)\n", clash);
        flags_free(fl, n);
        return 2;
    }
    if (env && rflag) {
        fprintf(stderr, "grpo-rollout: --env: the environment program gives the rewards (no --%s)\n", rflag);
        flags_free(fl, n);
        return 2;
    }
    RewardConfig rcfg;
    if (reward_cli_config("grpo-rollout", &rf, argc, argv, &rcfg) != 0) {
        flags_free(fl, n);
        return 2;
    }
    long max_ahead = -1;  // auto
    if (strcmp(max_ahead_s, "auto")) {
        char *end;
        errno = 0;
        max_ahead = strtol(max_ahead_s, &end, 10);
        if (errno || end == max_ahead_s || *end || max_ahead < 0 || max_ahead > 1000000) {
            fprintf(stderr, "grpo-rollout: --max-ahead '%s': want auto or a number of shards 0..1000000\n", max_ahead_s);
            flags_free(fl, n);
            return 2;
        }
    }
    size_t kv_mem = 0;
    if (kv_memory && memplan_parse_size(kv_memory, &kv_mem, &err) < 0) {
        fprintf(stderr, "grpo-rollout: --kv-memory: %s\n", err.msg);
        flags_free(fl, n);
        return 2;
    }
    if (kv_memory && (env || serve)) {
        fprintf(stderr, "grpo-rollout: --kv-memory sizes the group generator's pool; --%s episodes keep every slot at "
                "--max-episode-tokens\n", env ? "env" : "serve");
        flags_free(fl, n);
        return 2;
    }
    Backend *be;
    size_t max_mem;
    int want_dtype, want_kv;
    if ((rc = dtype_cli("grpo-rollout", dtype, quantize, &want_dtype)) != 0 ||
        (rc = kv_dtype_cli("grpo-rollout", kv_dtype, &want_kv)) != 0 ||
        (rc = max_memory_cli("grpo-rollout", max_memory, &max_mem)) != 0 ||
        (rc = device_open_cli("grpo-rollout", device, DEVICE_READY_SIM, max_mem, &be)) != 0) {
        flags_free(fl, n);
        return rc;
    }
    RolloutConfig c = {
        .model_dir = model, .run_url = run, .dataset = dataset, .worker_id = worker,
        .chat_source = {.template_file = chat_file, .template_name = chat_name, .kwargs_json = chat_kwargs, .prompt_format = prompt_format},
        .store = store_cli_options(&sf),
        .rewards = rcfg,
        .sampler = {.temperature = temperature, .top_p = top_p, .top_k = (int)top_k, .min_p = min_p},
        .group_size = (int)G, .batch_size = (int)batch, .max_new_tokens = (int)max_new,
        .max_prompt_tokens = (int)max_prompt, .prefill_tokens = (int)prefill, .groups_per_shard = (int)gps, .seed = seed, .max_shards = max_shards,
        .max_ahead = max_ahead, .worker_index = windex, .num_workers = nworkers, .chat = chat,
        .stop_strings = (const char *const *)stops.items, .n_stop_strings = stops.n, .wait_timeout = wait_timeout,
        .eval = eval, .eval_dataset = eval_dataset, .eval_every = eval_every, .eval_samples = eval_samples,
        .eval_has_threshold = !isnan(success_threshold), .eval_threshold = success_threshold,
        .env_cmd = env, .env_timeout = env_timeout, .max_turns = (int)max_turns, .max_episode_tokens = (int)max_episode,
        .tool_format = tool_format, .serve = serve, .serve_cert = serve_cert, .serve_tls_key = serve_tls_key,
        .serve_api_key_file = serve_key_file, .served_model_name = served_name, .episode_timeout = episode_timeout,
        .serve_max_requests = (int)serve_max, .serve_max_connections = (int)serve_max_conns,
        .serve_header_timeout = serve_header_timeout, .serve_idle_timeout = serve_idle_timeout,
        .backend = be, .max_memory = max_mem, .kv_memory = kv_mem, .weights_dtype = want_dtype, .kv_dtype = want_kv,
        .strict_dtype = strict_dtype};
    if (gen_defaults) {
        unsigned keep = (flags_given(argc, argv, "temperature") ? SAMPLER_KEEP_TEMPERATURE : 0) |
                        (flags_given(argc, argv, "top-p") ? SAMPLER_KEEP_TOP_P : 0) |
                        (flags_given(argc, argv, "top-k") ? SAMPLER_KEEP_TOP_K : 0) |
                        (flags_given(argc, argv, "min-p") ? SAMPLER_KEEP_MIN_P : 0);
        char took[256];
        if (sampler_generation_defaults(&c.sampler, model, keep, took, &err) < 0) {
            fprintf(stderr, "grpo-rollout: --generation-defaults: %s\n", err.msg);
            flags_free(fl, n);
            return 1;
        }
        log_info("--generation-defaults: %s", took);
    }
    if (!sampler_temperature_ok(c.sampler.temperature, 100)) {
        fprintf(stderr, "grpo-rollout: --temperature %g: give 0 (greedy) or at least %g (below it 1 / T magnifies the "
                "logits' rounding into whole nats; a denormal overflows)\n", c.sampler.temperature, SAMPLER_MIN_TEMPERATURE);
        flags_free(fl, n);
        return 2;
    }
    if (!c.eval && c.sampler.temperature == 0) {  // src/grpo/feed.c rejects such shards
        fprintf(stderr, "grpo-rollout: temperature 0 (greedy) is for --eval workers: the trainer rejects a greedy "
                "shard (its log-probs are no sampling distribution's); give at least %g\n", SAMPLER_MIN_TEMPERATURE);
        flags_free(fl, n);
        return 2;
    }
    fprintf(stderr, "grpo-rollout: effective configuration\n");
    flags_print(stderr, fl, n);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    retry_stop_on(&g_stop, 5);  // stopping with the bucket down: a shard nearly up gets 5 s
    rc = rollout_run(&c, &g_stop, &err);
    if (rc < 0) fprintf(stderr, "grpo-rollout: %s\n", err.msg);
    flags_free(fl, n);
    return rc < 0 ? 1 : 0;
}
