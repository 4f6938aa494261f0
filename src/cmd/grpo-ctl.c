// grpo-ctl: the operator's tool. Dispatches to one subcommand in src/ctl/.
#include <stdio.h>
#include <string.h>
#include "core/flags.h"
#include "core/log.h"
#include "core/threads.h"
#include "ctl/ctl.h"

static const CtlCommand commands[] = {
    {"put", ctl_put, "upload a local file to URL"},
    {"get", ctl_get, "download URL to a file or stdout"},
    {"ls", ctl_ls, "list keys under URL"},
    {"stat", ctl_stat, "size, etag, mtime and metadata of URL"},
    {"rm", ctl_rm, "delete URL"},
    {"eval", ctl_eval, "score a held-out set once (greedy or pass@k) with a model and adapter"},
    {"status", ctl_status, "a run at a glance: trainer step, reward trend, live workers, evaluations"},
    {"stop", ctl_stop, "ask a run's trainer and workers to stop cleanly (writes control/stop)"},
    {"doctor", ctl_doctor, "preflight: endpoint, TLS, credentials and roles, create-only, clock, model, disk"},
    {"gc", ctl_gc, "retention: delete versions older than the newest N (outside the staleness window)"},
    {"export", ctl_export, "a pail adapter as a PEFT folder (vLLM, PEFT), or merged into the base model"},
    {"plot", ctl_plot, "draw a run's reward and held-out accuracy curves (SVG)"},
    {"samples", ctl_samples, "what the policy generated: prompts, completions, rewards, advantages from the shards"},
    {"tensorboard", ctl_tensorboard, "a run's metrics, evaluations and sample tables as TensorBoard event files (--watch follows it)"},
    {"logprobs", ctl_logprobs, "per-token log-probs of token ids under a model (+ adapter)"},
    {"plan", ctl_plan, "the memory plan of a trainer or rollout worker for a model or shape, allocating nothing"},
    {"init-model", ctl_init_model, "write a random-weight Hugging Face checkpoint (tiny, bench, 0.5B shapes)"},
    {"import-gguf", ctl_import_gguf, "a GGUF file as a Hugging Face model folder (llama, qwen2, qwen3, exaone, granite, olmo2, smollm3, phi3, gemma2, gemma3, command-r, cohere2, qwen3moe, qwen2moe, olmoe, granitemoe, gpt-oss, llama with experts; gpt2 or llama tokenizer)"},
    {"model-info", ctl_model_info, "check a model folder's config and tensors; print base_sha256"},
    {"tokenize", ctl_tokenize, "encode text (or JSON lines, or chats) with a tokenizer.json"},
    {"detokenize", ctl_detokenize, "decode token ids to text"},
};
static const int ncommands = sizeof commands / sizeof commands[0];

static void usage(FILE *out) {
    fprintf(out, "usage: grpo-ctl COMMAND [flags] [args]\n\n"
                 "The operator's tool for pail runs and buckets. URLs are file:///abs/dir/key or\n"
                 "s3://bucket/key; s3 endpoints and credentials come from --endpoint and the AWS_*\n"
                 "environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...).\n\n"
                 "commands:\n");
    for (int i = 0; i < ncommands; i++) fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`grpo-ctl COMMAND --help` lists a command's flags.\n");
}

int main(int argc, char **argv) {
    threads_policy_apply(argv);  // first: it may start this program again (core/threads.h)
    log_init("grpo-ctl", LOG_WARN);  // one-shot tool: retries are info (PAIL_LOG=info shows them)
    if (argc < 2) {
        fprintf(stderr, "grpo-ctl: missing command (see grpo-ctl --help)\n");
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (int i = 0; i < ncommands; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            char name[64];
            snprintf(name, sizeof name, "grpo-ctl %s", commands[i].name);
            argv[1] = name;
            return commands[i].run(argc - 1, argv + 1);
        }
    const char *near = flags_closest(argv[1], strlen(argv[1]), &commands[0].name, sizeof commands[0], ncommands);
    if (near) fprintf(stderr, "grpo-ctl: unknown command '%s': did you mean '%s'?\n", argv[1], near);
    else fprintf(stderr, "grpo-ctl: unknown command '%s' (see grpo-ctl --help)\n", argv[1]);
    return 2;
}
