// Test driver for validation/rollout/check_rollout.py: loads a Hugging Face
// model folder (+ optional pail adapter), generates G completions for each
// prompt with generator_run (src/rollout/generate.c) and prints one JSON object:
// {"completions": [{"prompt": p, "sample": j, "ids": [...], "logprobs": [...],
//   "finish": "stop"|"length"}, ...], "stats": {prefill/decode calls, tokens}}.
// Input JSON: {"prompts": [[ids...], ...]}. Prompt p gets stream seed seed + p.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "rollout/generate.h"
#include "shard/shard.h"

static void die(const char *what, const PailErr *err) {
    fprintf(stderr, "rollout_driver: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
    exit(1);
}

static long num_arg(const char *flag, const char *s, long lo, long hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < lo || v > hi) {
        fprintf(stderr, "rollout_driver: %s %s: want an integer in [%ld, %ld]\n", flag, s, lo, hi);
        exit(2);
    }
    return v;
}

static double real_arg(const char *flag, const char *s, double lo, double hi) {
    char *end;
    double v = strtod(s, &end);
    if (*s == 0 || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "rollout_driver: %s %s: want a number in [%g, %g]\n", flag, s, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    const char *model = NULL, *adapter = NULL, *input = NULL;
    GenConfig gc = {.group_size = 4, .max_new_tokens = 16, .batch_size = 8,
                    .sampler = {.temperature = 1.0, .top_p = 1.0, .top_k = 0}};
    long seed = 0;
    int stop[16], nstop = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "rollout_driver: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--adapter")) adapter = v;
        else if (!strcmp(a, "--input")) input = v;
        else if (!strcmp(a, "--group")) gc.group_size = (int)num_arg(a, v, 1, 1024);
        else if (!strcmp(a, "--max-new")) gc.max_new_tokens = (int)num_arg(a, v, 1, 1 << 16);
        else if (!strcmp(a, "--batch")) gc.batch_size = (int)num_arg(a, v, 1, 4096);
        else if (!strcmp(a, "--temperature")) gc.sampler.temperature = real_arg(a, v, 0, 100);
        else if (!strcmp(a, "--top-p")) gc.sampler.top_p = real_arg(a, v, 0, 1);
        else if (!strcmp(a, "--top-k")) gc.sampler.top_k = (int)num_arg(a, v, 0, 1 << 30);
        else if (!strcmp(a, "--seed")) seed = num_arg(a, v, 0, 1L << 62);
        else if (!strcmp(a, "--stop") && nstop < 16) stop[nstop++] = (int)num_arg(a, v, 0, 1 << 30);
        else { fprintf(stderr, "rollout_driver: bad argument %s\n", a); return 2; }
    }
    if (!model || !input) {
        fprintf(stderr, "usage: rollout_driver --model DIR --input JSON [--adapter H5] [--group G] [--max-new N] "
                        "[--batch B] [--temperature T] [--top-p P] [--top-k K] [--seed S] [--stop ID]...\n");
        return 2;
    }
    PailErr err = {0};
    ModelWeights w;
    if (model_weights_load(&w, model, &err) < 0) die("load model", &err);
    json_error_t jerr;
    json_t *in = json_load_file(input, 0, &jerr);
    if (!in) die(jerr.text, NULL);
    json_t *jp = json_object_get(in, "prompts");
    int P = (int)json_array_size(jp);
    if (P < 1) die("input has no \"prompts\" array", NULL);
    GenPrompt *prompts = calloc((size_t)P, sizeof *prompts);
    int32_t **ids = calloc((size_t)P, sizeof *ids);
    for (int p = 0; p < P; p++) {
        json_t *row = json_array_get(jp, (size_t)p);
        int n = (int)json_array_size(row);
        ids[p] = malloc(((size_t)n + 1) * sizeof **ids);
        for (int i = 0; i < n; i++) ids[p][i] = (int32_t)json_integer_value(json_array_get(row, (size_t)i));
        prompts[p] = (GenPrompt){.ids = ids[p], .n = n, .seed = (uint64_t)seed + (uint64_t)p};
        if (n > gc.max_prompt_tokens) gc.max_prompt_tokens = n;
    }
    gc.stop_ids = stop;
    gc.n_stop_ids = nstop;
    gc.max_prompts = P;
    LoraLayout lay = {0};
    float *lp = NULL;
    if (adapter) {
        Buf b = {0};
        AdapterMeta meta;
        if (fs_read_file(adapter, &b, &err) < 0) die("read adapter", &err);
        if (lora_adapter_read(b.data, b.len, adapter, &w.cfg, &lay, &lp, &meta, &err) < 0) die("adapter", &err);
        buf_free(&b);
    }
    TransformerPlan plan = {.max_tokens = gc.max_prompt_tokens > gc.batch_size ? gc.max_prompt_tokens : gc.batch_size,
                            .max_pos = gc.max_prompt_tokens + gc.max_new_tokens, .lora_rank = adapter ? lay.cfg.rank : 0};
    Transformer *tf;
    if (transformer_init(&tf, &w, &plan, &err) < 0) die("init", &err);
    if (adapter && transformer_set_lora(tf, &lay, lp, &err) < 0) die("lora", &err);
    Generator *g;
    if (generator_init(&g, tf, &w.cfg, &gc, &err) < 0) die("generator", &err);
    GenCompletion *out = calloc((size_t)P * gc.group_size, sizeof *out);
    if (generator_run(g, prompts, P, out, &err) < 0) die("generate", &err);
    json_t *res = json_object(), *arr = json_array();
    for (int p = 0; p < P; p++)
        for (int j = 0; j < gc.group_size; j++) {
            GenCompletion *c = &out[p * gc.group_size + j];
            json_t *o = json_object(), *ji = json_array(), *jl = json_array();
            for (int i = 0; i < c->n; i++) {
                json_array_append_new(ji, json_integer(c->ids[i]));
                json_array_append_new(jl, json_real(c->logprobs[i]));
            }
            json_object_set_new(o, "prompt", json_integer(p));
            json_object_set_new(o, "sample", json_integer(j));
            json_object_set_new(o, "ids", ji);
            json_object_set_new(o, "logprobs", jl);
            json_object_set_new(o, "finish", json_string(c->finish == FINISH_STOP ? "stop" : "length"));
            json_array_append_new(arr, o);
        }
    GenStats st = generator_stats(g);
    json_object_set_new(res, "completions", arr);
    json_object_set_new(res, "stats", json_pack("{sI sI sI sI}", "prefill_calls", (json_int_t)st.prefill_calls,
                                                 "prefill_tokens", (json_int_t)st.prefill_tokens, "decode_calls",
                                                 (json_int_t)st.decode_calls, "decode_tokens",
                                                 (json_int_t)st.decode_tokens));
    json_dumpf(res, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(res);
    json_decref(in);
    generator_free(g);
    transformer_free(tf);
    free(out);
    for (int p = 0; p < P; p++) free(ids[p]);
    free(ids);
    free(prompts);
    free(lp);
    lora_layout_free(&lay);
    model_weights_free(&w);
    return 0;
}
