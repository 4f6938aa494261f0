// grpo-ctl logprobs: per-token log-probabilities of given token ids under a
// model (and optionally a LoRA adapter), for users checking pail against
// their own stack. Input lines {"ids": [...]}; output lines {"logprobs": [...]}
// where logprobs[t-1] = log p(ids[t] | ids[<t]) for t >= 1. Lines are packed
// into rows of up to --token-budget tokens (a line of n ids takes n - 1 rows:
// its last id is predicted, never fed).
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "core/mem.h"
#include "ctl/ctl.h"
#include "grpo/pack.h"
#include "lora/peft.h"
#include "model/device.h"
#include "lora/trainable.h"
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

// The pending lines: their ids (a line of n ids takes n - 1 rows and one
// sequence, so 2 x budget ids hold every line a row can take) and the row.
typedef struct {
    int32_t *ids;       // (2 * budget)
    PackSeq *seqs;      // (budget) the pending lines, every token after the first scored
    uint8_t *all;       // (budget + 1) all ones: the mask
    PackRow row;
    float *lp;          // (budget)
    int nids;
} Pending;

static void plan_pending(Pending *p, MemPlan *m, int budget) {
    p->ids = mem_plan_take(m, 2 * (size_t)budget * sizeof(int32_t));
    p->seqs = mem_plan_take(m, (size_t)budget * sizeof(PackSeq));
    p->all = mem_plan_take(m, (size_t)budget + 1);
    pack_plan(&p->row, m, budget, budget);
    p->lp = mem_plan_take(m, (size_t)budget * sizeof(float));
}

// Forwards the pending lines and prints one {"logprobs": [...]} per line.
static int flush(Transformer *tf, Pending *p, double temperature, PailErr *err) {
    PackRow *r = &p->row;
    if (r->T > 0 &&
        transformer_forward(tf, p->lp, NULL, r->tok, r->pos, r->cu, r->nseq, r->T, r->tgt, (float)temperature, err) < 0)
        return -1;
    for (int i = 0; i < r->nadded; i++) {
        printf("{\"logprobs\": [");
        for (int64_t q = r->off[i]; q < r->off[i + 1]; q++) printf("%s%.9g", q > r->off[i] ? ", " : "", p->lp[r->row_of[q]]);
        printf("]}\n");
    }
    pack_reset(r);
    p->nids = 0;
    return 0;
}

int ctl_logprobs(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    char *model = NULL, *adapter = NULL, *input = NULL, *device = NULL, *dtype = NULL, *quantize = NULL;
    long budget;
    double temperature;
    Flag fl[CTL_STORE_NFLAGS + 8] = {
        {"model", FLAG_STRING, &model, NULL, 1, 0, "Hugging Face model folder"},
        {"adapter", FLAG_STRING, &adapter, NULL, 1, 0, "adapter: a pail .h5 file, a PEFT folder, or a store URL"},
        {"input", FLAG_STRING, &input, NULL, 1, 0, "JSON lines {\"ids\": [...]} (- for stdin)"},
        {"token-budget", FLAG_INT, &budget, "4096", 1, 1 << 20, "tokens per packed forward"},
        {"temperature", FLAG_DOUBLE, &temperature, "1", 1e-6, 1e6, "log-probs of logits / temperature"},
        DEVICE_CLI_FLAG(&device),
        DTYPE_CLI_FLAG(&dtype),
        QUANTIZE_CLI_FLAG(&quantize),
    };
    ctl_store_flags(fl + 8, &sf);
    int n = CTL_STORE_NFLAGS + 8, rc;
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
    int want;
    if ((rc = dtype_cli("grpo-ctl logprobs", dtype, quantize, &want)) != 0 ||
        (rc = device_open_cli("grpo-ctl logprobs", device, DEVICE_READY_SIM, 0, &be)) != 0)
        goto out;
    rc = 1;
    PailErr err = {0};
    ModelWeights w;
    if (model_weights_load_as(&w, model, want, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        backend_close(be);
        goto out;
    }
    LoraLayout lay = {0};
    float *lp_params = NULL;  // the adapter as read (host); on the backend in ts
    Trainable *ts = NULL;
    Transformer *tf = NULL;
    FILE *f = NULL;
    void *block = NULL;
    Pending pend = {0};
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
    TransformerPlan plan = {.max_tokens = (int)budget, .lora_rank = adapter ? lay.cfg.rank : 0, .backend = be};
    if (adapter && (trainable_open(&ts, be, (size_t)lay.n_params, false, NULL, &err) < 0 ||
                    trainable_load(ts, lp_params, NULL, NULL, &err) < 0)) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    if (transformer_init(&tf, &w, &plan, &err) < 0 ||
        (adapter && transformer_set_lora(tf, &lay, trainable_params(ts), &err) < 0)) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    f = strcmp(input, "-") ? fopen(input, "r") : stdin;
    if (!f) {
        fprintf(stderr, "%s: %s: cannot open\n", argv[0], input);
        goto done;
    }
    MemPlan dry = {0};
    plan_pending(&pend, &dry, (int)budget);
    if (!(block = mem_alloc_big(dry.used))) {
        fprintf(stderr, "%s: out of memory for rows of --token-budget %ld (%zu MiB)\n", argv[0], budget, dry.used >> 20);
        goto done;
    }
    MemPlan real = {block, 0};
    plan_pending(&pend, &real, (int)budget);
    memset(pend.all, 1, (size_t)budget + 1);
    pack_reset(&pend.row);
    char *text = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0;
    rc = 0;
    while (rc == 0 && (errno = 0, len = getline(&text, &cap, f)) > 0) {
        lineno++;
        json_error_t jerr;
        json_t *j = json_loadb(text, (size_t)len, 0, &jerr), *ids = j ? json_object_get(j, "ids") : NULL;
        int cnt = ids ? (int)json_array_size(ids) : 0;
        if (!json_is_array(ids) || cnt < 1) {
            fprintf(stderr, "%s: %s:%d: expected {\"ids\": [int, ...]} with at least one id\n", argv[0], input, lineno);
            rc = 1;
        } else if (cnt - 1 > budget) {
            fprintf(stderr, "%s: %s:%d: %d ids need %d rows, more than --token-budget %ld\n", argv[0], input, lineno,
                    cnt, cnt - 1, budget);
            rc = 1;
        }
        for (int pass = 0; rc == 0 && pass < 2; pass++) {  // a full row is flushed, then the line goes in
            int32_t *at = pend.ids + pend.nids;
            for (int t = 0; t < cnt && rc == 0; t++) {
                json_t *v = json_array_get(ids, (size_t)t);
                if (!json_is_integer(v)) {
                    fprintf(stderr, "%s: %s:%d: ids[%d] is not an integer\n", argv[0], input, lineno, t);
                    rc = 1;
                }
                at[t] = (int32_t)json_integer_value(v);
            }
            PackSeq *seq = &pend.seqs[pend.row.nadded];
            *seq = (PackSeq){.prompt = at, .n_prompt = cnt, .mask = pend.all};
            if (rc == 0 && pend.nids + cnt <= 2 * budget && pack_add(&pend.row, seq) == 0) {
                pend.nids += cnt;
                break;
            }
            if (rc == 0 && flush(tf, &pend, temperature, &err) < 0) rc = 1;
        }
        json_decref(j);
    }
    if (rc == 0 && len < 0 && (errno || ferror(f))) {  // not the end: out of memory for a line, or a read error
        fprintf(stderr, "%s: %s: reading after line %d: %s\n", argv[0], input, lineno, strerror(errno ? errno : EIO));
        rc = 1;
    }
    if (rc == 0 && pend.row.nadded > 0 && flush(tf, &pend, temperature, &err) < 0) rc = 1;
    if (rc && err.msg[0]) fprintf(stderr, "%s: %s:%d: %s\n", argv[0], input, lineno, err.msg);
    free(text);
done:
    if (f && f != stdin) fclose(f);
    free(block);
    transformer_free(tf);
    trainable_close(ts);
    free(lp_params);
    lora_layout_free(&lay);
    model_weights_free(&w);
    backend_close(be);
out:
    flags_free(fl, n);
    return rc;
}
