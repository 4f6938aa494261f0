// grpo-ctl logprobs: per-token log-probabilities of given token ids under a
// model (and optionally a LoRA adapter), for users checking pail against
// their own stack. Input lines {"ids": [...]}; output lines {"logprobs": [...]}
// where logprobs[t-1] = log p(ids[t] | ids[<t]) for t >= 1. Lines are packed
// into rows of up to --token-budget tokens.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "ctl/ctl.h"
#include "lora/peft.h"
#include "model/device.h"
#include "model/transformer.h"

int ctl_read_url_or_path(const char *src, const CtlStoreFlags *sf, Buf *out, PailErr *err) {
    if (strncmp(src, "file://", 7) && strncmp(src, "s3://", 5)) return fs_read_file(src, out, err);
    Store *st;
    char key[STORE_MAX_KEY + 1];
    if (ctl_open_url(src, sf, &st, key, sizeof key, err) < 0) return -1;
    int rc = store_get(st, key, out, NULL, NULL, err);
    store_close(st);
    return rc;
}

typedef struct {
    int *ids;
    int n;
} Line;

static int flush(Transformer *tf, Line *lines, int nl, int *tok, int *pos, int *tgt, int *cu, float *lp,
                 double temperature, PailErr *err) {
    int T = 0;
    cu[0] = 0;
    for (int i = 0; i < nl; i++) {
        for (int t = 0; t < lines[i].n; t++, T++) {
            tok[T] = lines[i].ids[t];
            pos[T] = t;
            tgt[T] = t + 1 < lines[i].n ? lines[i].ids[t + 1] : -1;
        }
        cu[i + 1] = T;
    }
    if (transformer_forward(tf, lp, NULL, tok, pos, cu, nl, T, tgt, (float)temperature, err) < 0) return -1;
    for (int i = 0; i < nl; i++) {
        printf("{\"logprobs\": [");
        for (int t = cu[i]; t < cu[i + 1] - 1; t++) printf("%s%.9g", t > cu[i] ? ", " : "", lp[t]);
        printf("]}\n");
    }
    return 0;
}

int ctl_logprobs(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    char *model = NULL, *adapter = NULL, *input = NULL, *device = NULL;
    long budget;
    double temperature;
    Flag fl[CTL_STORE_NFLAGS + 6] = {
        {"model", FLAG_STRING, &model, NULL, 1, 0, "Hugging Face model folder"},
        {"adapter", FLAG_STRING, &adapter, NULL, 1, 0, "adapter: a pail .h5 file, a PEFT folder, or a store URL"},
        {"input", FLAG_STRING, &input, NULL, 1, 0, "JSON lines {\"ids\": [...]} (- for stdin)"},
        {"token-budget", FLAG_INT, &budget, "4096", 1, 1 << 20, "tokens per packed forward"},
        {"temperature", FLAG_DOUBLE, &temperature, "1", 1e-6, 1e6, "log-probs of logits / temperature"},
        DEVICE_CLI_FLAG(&device),
    };
    ctl_store_flags(fl + 6, &sf);
    int n = CTL_STORE_NFLAGS + 6, rc;
    const char *usage = "grpo-ctl logprobs --model DIR [--adapter FILE|URL] --input FILE.jsonl";
    if ((rc = ctl_parse(usage, "Prints {\"logprobs\": [...]} per input line: log p(ids[t] | ids[<t]), t >= 1.", fl,
                        n, argc, argv, NULL, NULL)) >= 0)
        goto out;
    rc = 2;
    if (!model || !input) {
        fprintf(stderr, "%s: --model and --input are required\nusage: %s\n", argv[0], usage);
        goto out;
    }
    Backend *be;
    if ((rc = device_open_cli("grpo-ctl logprobs", device, false, &be)) != 0) goto out;
    rc = 1;
    PailErr err = {0};
    ModelWeights w;
    if (model_weights_load(&w, model, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto out;
    }
    LoraLayout lay = {0};
    float *lp_params = NULL;
    Transformer *tf = NULL;
    FILE *f = NULL;
    Line *lines = NULL;
    int *tok = NULL, *pos = NULL, *tgt = NULL, *cu = NULL;
    float *lp = NULL;
    if (adapter) {
        Buf b = {0};
        AdapterMeta meta = {0};
        bool url = !strncmp(adapter, "file://", 7) || !strncmp(adapter, "s3://", 5);
        if (url ? (ctl_read_url_or_path(adapter, &sf, &b, &err) < 0 ||
                   lora_adapter_read(b.data, b.len, adapter, &w.cfg, &lay, &lp_params, &meta, &err) < 0)
                : lora_load_any(adapter, &w.cfg, &lay, &lp_params, &meta, &err) < 0) {
            buf_free(&b);
            fprintf(stderr, "%s: %s\n", argv[0], err.msg);
            goto done;
        }
        buf_free(&b);
        if (meta.base_sha256[0] && strcmp(meta.base_sha256, w.base_sha256) && strspn(meta.base_sha256, "0") != 64)
            fprintf(stderr, "%s: warning: adapter %s was trained on base %.12s..., this model is %.12s...\n", argv[0],
                    adapter, meta.base_sha256, w.base_sha256);
    }
    TransformerPlan plan = {.max_tokens = (int)budget};
    if (transformer_init(&tf, &w, &plan, &err) < 0 || (adapter && transformer_set_lora(tf, &lay, lp_params, &err) < 0)) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    f = strcmp(input, "-") ? fopen(input, "r") : stdin;
    if (!f) {
        fprintf(stderr, "%s: %s: cannot open\n", argv[0], input);
        goto done;
    }
    lines = calloc((size_t)budget, sizeof *lines);
    tok = malloc((size_t)budget * sizeof *tok);
    pos = malloc((size_t)budget * sizeof *pos);
    tgt = malloc((size_t)budget * sizeof *tgt);
    cu = malloc(((size_t)budget + 1) * sizeof *cu);
    lp = malloc((size_t)budget * sizeof *lp);
    char *text = NULL;
    size_t cap = 0;
    ssize_t len;
    int nl = 0, used = 0, lineno = 0;
    rc = 0;
    while ((len = getline(&text, &cap, f)) > 0 && rc == 0) {
        lineno++;
        json_error_t jerr;
        json_t *j = json_loadb(text, (size_t)len, 0, &jerr), *ids = j ? json_object_get(j, "ids") : NULL;
        int cnt = ids ? (int)json_array_size(ids) : 0;
        if (!json_is_array(ids) || cnt < 1) {
            fprintf(stderr, "%s: %s:%d: expected {\"ids\": [int, ...]} with at least one id\n", argv[0], input, lineno);
            rc = 1;
        } else if (cnt > budget) {
            fprintf(stderr, "%s: %s:%d: %d ids exceed --token-budget %ld\n", argv[0], input, lineno, cnt, budget);
            rc = 1;
        } else {
            if (used + cnt > budget) {
                if (flush(tf, lines, nl, tok, pos, tgt, cu, lp, temperature, &err) < 0) rc = 1;
                for (int i = 0; i < nl; i++) free(lines[i].ids);
                nl = used = 0;
            }
            lines[nl].ids = malloc((size_t)cnt * sizeof(int));
            lines[nl].n = cnt;
            for (int t = 0; t < cnt; t++) {
                json_t *v = json_array_get(ids, (size_t)t);
                if (!json_is_integer(v)) {
                    fprintf(stderr, "%s: %s:%d: ids[%d] is not an integer\n", argv[0], input, lineno, t);
                    rc = 1;
                }
                lines[nl].ids[t] = (int)json_integer_value(v);
            }
            nl++;
            used += cnt;
        }
        json_decref(j);
    }
    if (rc == 0 && nl > 0 && flush(tf, lines, nl, tok, pos, tgt, cu, lp, temperature, &err) < 0) rc = 1;
    if (rc && err.msg[0]) fprintf(stderr, "%s: %s:%d: %s\n", argv[0], input, lineno, err.msg);
    for (int i = 0; i < nl; i++) free(lines[i].ids);
    free(text);
done:
    if (f && f != stdin) fclose(f);
    free(lines); free(tok); free(pos); free(tgt); free(cu); free(lp);
    transformer_free(tf);
    free(lp_params);
    lora_layout_free(&lay);
    model_weights_free(&w);
out:
    flags_free(fl, n);
    return rc;
}
