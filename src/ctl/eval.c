// grpo-ctl eval: scores a held-out set once, greedily or pass@k, with a model
// and optionally an adapter: the eval worker's computation (src/rollout) for
// users checking a model. Prints the JSON result (mean reward, accuracy where
// defined, distinct completions, ...); --dump writes each scored completion.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/buf.h"
#include "ctl/ctl.h"
#include "model/device.h"
#include "rollout/reward_cli.h"
#include "rollout/worker.h"

int ctl_eval(int argc, char **argv) {
    char *model = NULL, *adapter = NULL, *dataset = NULL, *out = NULL, *prompt_format = NULL, *chat_file = NULL, *chat_name = NULL, *chat_kwargs = NULL, *env = NULL,
         *tool_format = NULL, *dump = NULL;
    long max_new, batch, samples, max_prompt, prefill, seed, max_turns, max_episode;
    double temperature, env_timeout, threshold = NAN;
    bool chat, gen_defaults;
    RewardCliFlags rf = {0};
    char *device = NULL, *max_memory = NULL, *dtype = NULL, *quantize = NULL, *kv_dtype = NULL;
    CtlStoreFlags sf = {0};
    Flag own[] = {
        {"model", FLAG_STRING, &model, NULL, 1, 0, "Hugging Face model folder, or ORG/NAME in the local Hugging Face cache"},
        {"adapter", FLAG_STRING, &adapter, NULL, 1, 0,
         "pail adapter: a .h5 path, a PEFT folder, or a store URL (file:// or s3://, e.g. s3://bucket/run/adapters/v00000012.h5); none: the base model"},
        {"dataset", FLAG_STRING, &dataset, NULL, 1, 0, "held-out prompts, JSON lines (path or store URL)"},
        REWARD_CLI_FLAGS(&rf),  // as grpo-rollout
        {"env", FLAG_STRING, &env, NULL, 1, 0, "episodes with this environment program, as grpo-rollout --env (it gives the rewards; accuracy needs --success-threshold)"},
        {"max-turns", FLAG_INT, &max_turns, "8", 1, 100000, "--env: assistant turns per episode"},
        {"max-episode-tokens", FLAG_INT, &max_episode, "2048", 2, 1 << 20, "--env: tokens of an episode after its opening"},
        {"env-timeout", FLAG_DOUBLE, &env_timeout, "30", 0.01, 86400, "--env: seconds the program has to answer a request"},
        {"tool-format", FLAG_STRING, &tool_format, "auto", 1, 0, "--env: auto, hermes, llama3, none"},
        {"samples", FLAG_INT, &samples, "1", 1, 1024, "1: greedy; k: pass@k at --temperature"},
        {"temperature", FLAG_DOUBLE, &temperature, "1.0", 0, 100, "sampling temperature for pass@k"},
        {"generation-defaults", FLAG_BOOL, &gen_defaults, "false", 1, 0,
         "pass@k: temperature, top_p and top_k from the model's generation_config.json (--temperature given wins)"},
        {"max-new-tokens", FLAG_INT, &max_new, "256", 1, 1 << 20, "completion length limit"},
        {"max-prompt-tokens", FLAG_INT, &max_prompt, "0", 0, 1 << 20, "longest prompt accepted (longer rows are skipped and counted); 0: what the model's positions leave after --max-new-tokens, at most 1024"},
        {"prefill-tokens", FLAG_INT, &prefill, "1024", 1, 1 << 20, "prompts prefilled together in one model call, up to this many tokens (the activation plan holds max(this, --max-prompt-tokens, --batch-size) tokens)"},
        {"batch-size", FLAG_INT, &batch, "64", 1, 4096, "sequences decoded together"},
        {"chat", FLAG_BOOL, &chat, "false", 1, 0, "render {\"prompt\"} rows with the chat template"},
        CHAT_CLI_FLAGS(&chat_file, &chat_name, &chat_kwargs, &prompt_format),
        {"seed", FLAG_INT, &seed, "0", 0, 9007199254740991L, "sampling seed for pass@k"},
        {"success-threshold", FLAG_DOUBLE, &threshold, NULL, -1e6, 1e6,
         "a completion is correct when its total reward >= this (default: exact_answer == 1, or a lone format == 1; "
         "otherwise accuracy is not defined)"},
        {"out", FLAG_STRING, &out, NULL, 1, 0, "also write the JSON result to this file"},
        {"dump", FLAG_STRING, &dump, NULL, 1, 0,
         "write each scored completion to this file as a JSON line (row, sample, prompt, completion, reward, "
         "components, valid, correct)"},
        DEVICE_CLI_FLAG(&device),
        DTYPE_CLI_FLAG(&dtype),
        QUANTIZE_CLI_FLAG(&quantize),
        KV_DTYPE_CLI_FLAG(&kv_dtype),
        MAX_MEMORY_CLI_FLAG(&max_memory),
    };
    enum { NOWN = sizeof own / sizeof own[0] };
    Flag fl[NOWN + CTL_STORE_NFLAGS];
    memcpy(fl, own, sizeof own);
    ctl_store_flags(fl + NOWN, &sf);
    int n = NOWN + CTL_STORE_NFLAGS, rc;
    Buf ab = {0};  // the adapter read from a store URL
    const char *usage = "grpo-ctl eval --model DIR [--adapter FILE|URL] --dataset FILE [--dump FILE]";
    if ((rc = ctl_parse(usage, "Scores a held-out set once (greedy, or pass@k) and prints the result as JSON.", fl, n,
                        argc, argv, NULL, NULL)) >= 0)
        goto done;
    rc = 2;
    if (!model || !dataset) {
        fprintf(stderr, "%s: --model and --dataset are required\nusage: %s\n", argv[0], usage);
        goto done;
    }
    const char *rflag = reward_cli_given(argc, argv);
    if (env && rflag) {
        fprintf(stderr, "%s: --env: the environment program gives the rewards (no --%s)\n", argv[0], rflag);
        goto done;
    }
    RewardConfig rcfg;
    if (reward_cli_config(argv[0], &rf, argc, argv, &rcfg) != 0) goto done;
    if (adapter && (!strncmp(adapter, "file://", 7) || !strncmp(adapter, "s3://", 5))) {
        PailErr aerr = {0};
        if (ctl_read_url_or_path(adapter, &sf, &ab, &aerr) < 0) {
            fprintf(stderr, "%s: --adapter: %s\n", argv[0], aerr.msg);
            rc = 1;
            goto done;
        }
    }
    Backend *be;
    size_t max_mem;
    int want, want_kv;
    if ((rc = dtype_cli("grpo-ctl eval", dtype, quantize, &want)) != 0 ||
        (rc = kv_dtype_cli("grpo-ctl eval", kv_dtype, &want_kv)) != 0 ||
        (rc = max_memory_cli("grpo-ctl eval", max_memory, &max_mem)) != 0 ||
        (rc = device_open_cli("grpo-ctl eval", device, DEVICE_READY_SIM, max_mem, &be)) != 0)
        goto done;
    RolloutConfig c = {.model_dir = model, .eval = true, .eval_dataset = dataset, .eval_samples = samples,
                       .eval_once = true, .eval_adapter = adapter, .eval_out = out, .eval_dump = dump,
                       .eval_adapter_data = ab.data, .eval_adapter_len = ab.len,
                       .eval_has_threshold = !isnan(threshold), .eval_threshold = threshold,
                       .chat_source = {.template_file = chat_file, .template_name = chat_name, .kwargs_json = chat_kwargs, .prompt_format = prompt_format},
                       .chat = chat, .max_new_tokens = (int)max_new, .max_prompt_tokens = (int)max_prompt, .prefill_tokens = (int)prefill,
                       .batch_size = (int)batch, .group_size = 1, .seed = seed,
                       .sampler = {.temperature = temperature, .top_p = 1, .top_k = 0},
                       .rewards = rcfg,
                       .env_cmd = env, .env_timeout = env_timeout, .max_turns = (int)max_turns,
                       .max_episode_tokens = (int)max_episode, .tool_format = tool_format,
                       .backend = be, .max_memory = max_mem, .weights_dtype = want, .kv_dtype = want_kv};
    PailErr err = {0};
    if (!sampler_temperature_ok(temperature, 100)) {
        fprintf(stderr, "%s: --temperature %g: give 0 (greedy) or at least %g\n", argv[0], temperature,
                SAMPLER_MIN_TEMPERATURE);
        rc = 2;
        goto done;
    }
    char took[256];
    unsigned keep = flags_given(argc, argv, "temperature") ? SAMPLER_KEEP_TEMPERATURE : 0;
    if (gen_defaults && sampler_generation_defaults(&c.sampler, model, keep, took, &err) < 0) {
        fprintf(stderr, "%s: --generation-defaults: %s\n", argv[0], err.msg);
        rc = 1;
        goto done;
    }
    if (gen_defaults) fprintf(stderr, "%s: --generation-defaults: %s\n", argv[0], took);
    rc = rollout_run(&c, NULL, &err) < 0 ? 1 : 0;
    if (rc) fprintf(stderr, "%s: %s\n", argv[0], err.msg);
done:
    buf_free(&ab);
    flags_free(fl, n);
    return rc;
}
