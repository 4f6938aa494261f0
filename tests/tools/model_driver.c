// Test driver for validation/model/check_forward.py: loads a Hugging Face
// model folder and (optionally) a pail adapter, packs the given sequences into
// one row, prints per-token log-probs as JSON, and with --grads writes the
// gradients of sum_t w_t * logp_t: LoRA grads in the adapter file layout
// (lora_A/lora_B datasets hold d/dA, d/dB) and, with --full, every base
// weight's gradient under its Hugging Face name (HDF5 datasets).
// Input JSON: {"seqs": [[ids...], ...], "weights": [[w per token...], ...],
//              "temperature": 1.0}; logp[t] is of seq[t+1] given seq[..t].
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "model/transformer.h"
#include "shard/h5file.h"

static void die(const char *what, const PailErr *err) {
    fprintf(stderr, "model_driver: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

int main(int argc, char **argv) {
    const char *model = NULL, *adapter = NULL, *input = NULL, *grads = NULL;
    int full = 0, recompute = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--adapter") && i + 1 < argc) adapter = argv[++i];
        else if (!strcmp(argv[i], "--input") && i + 1 < argc) input = argv[++i];
        else if (!strcmp(argv[i], "--grads") && i + 1 < argc) grads = argv[++i];
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--recompute")) recompute = 1;
        else { fprintf(stderr, "model_driver: bad argument %s\n", argv[i]); return 2; }
    }
    if (!model || !input) { fprintf(stderr, "usage: model_driver --model DIR --input JSON [--adapter H5] [--grads H5] [--full]\n"); return 2; }
    PailErr err = {0};
    ModelWeights w;
    if (model_weights_load(&w, model, &err) < 0) die("load model", &err);
    json_error_t jerr;
    json_t *in = json_load_file(input, 0, &jerr);
    if (!in) die(jerr.text, NULL);
    json_t *seqs = json_object_get(in, "seqs"), *wts = json_object_get(in, "weights");
    double temp = json_object_get(in, "temperature") ? json_number_value(json_object_get(in, "temperature")) : 1.0;
    int nseq = (int)json_array_size(seqs), T = 0;
    for (int s = 0; s < nseq; s++) T += (int)json_array_size(json_array_get(seqs, (size_t)s));
    int *tok = malloc(T * sizeof *tok), *pos = malloc(T * sizeof *pos), *tgt = malloc(T * sizeof *tgt),
        *cu = malloc((nseq + 1) * sizeof *cu);
    float *logp = malloc(T * sizeof *logp), *dlogp = calloc(T, sizeof *dlogp);
    cu[0] = 0;
    for (int s = 0, t = 0; s < nseq; s++) {
        json_t *sq = json_array_get(seqs, (size_t)s), *ws = wts ? json_array_get(wts, (size_t)s) : NULL;
        int n = (int)json_array_size(sq);
        for (int i = 0; i < n; i++, t++) {
            tok[t] = (int)json_integer_value(json_array_get(sq, (size_t)i));
            pos[t] = i;
            tgt[t] = i + 1 < n ? (int)json_integer_value(json_array_get(sq, (size_t)i + 1)) : -1;
            if (ws && i + 1 < n) dlogp[t] = (float)json_number_value(json_array_get(ws, (size_t)i));
        }
        cu[s + 1] = t;
    }
    LoraLayout lay = {0};
    float *lp = NULL;
    if (adapter) {
        Buf b = {0};
        AdapterMeta meta;
        if (fs_read_file(adapter, &b, &err) < 0) die("read adapter", &err);
        if (lora_adapter_read(b.data, b.len, adapter, &w.cfg, &lay, &lp, &meta, &err) < 0) die("adapter", &err);
        buf_free(&b);
    }
    TransformerPlan plan = {.max_tokens = T, .backward = grads != NULL, .full = full, .recompute = recompute,
                            .vchunk = 37,  // an odd chunk exercises the streaming LSE's chunk edges
                            .lora_rank = adapter ? lay.cfg.rank : 0};
    Transformer *tf;
    if (transformer_init(&tf, &w, &plan, &err) < 0) die("init", &err);
    if (adapter && transformer_set_lora(tf, &lay, lp, &err) < 0) die("lora", &err);
    if (transformer_forward(tf, logp, NULL, tok, pos, cu, nseq, T, tgt, (float)temp, &err) < 0) die("forward", &err);
    json_t *out = json_array();
    for (int s = 0; s < nseq; s++) {
        json_t *row = json_array();
        for (int t = cu[s]; t < cu[s + 1] - 1; t++) json_array_append_new(row, json_real(logp[t]));
        json_array_append_new(out, row);
    }
    json_dumpf(out, stdout, JSON_COMPACT);
    putchar('\n');
    if (grads) {
        float *lg = adapter ? calloc((size_t)lay.n_params, sizeof *lg) : NULL;
        float *bg = full ? calloc(w.num_params, sizeof *bg) : NULL;
        if (transformer_backward(tf, lg, bg, dlogp, &err) < 0) die("backward", &err);
        Buf img = {0};
        if (adapter) {
            AdapterMeta gm = {0};
            if (lora_adapter_write(&lay, lg, &gm, &img, &err) < 0) die("write grads", &err);
        } else {
            hid_t f = h5f_create_mem("grads", &err);
            h5a_write_str(f, "format", "pail.grads", &err);
            h5f_image(f, &img, "grads", &err);
            h5f_close(f);
        }
        if (full) {  // re-open the image and add the base grads by HF name
            hid_t f = h5f_create_mem("full", &err);
            for (int id = 0; id < PARAM_COUNT; id++) {
                const ModelParamSpec *sp = &w.specs[id];
                if (!sp->present) continue;
                if (id == PARAM_LM_HEAD && w.cfg.tie_word_embeddings) continue;
                int nl = sp->per_layer ? w.cfg.num_hidden_layers : 1;
                for (int l = 0; l < nl; l++) {
                    char name[256];
                    model_param_name(sp, l, name, sizeof name);
                    int64_t dims[2] = {(int64_t)sp->shape[0], (int64_t)sp->shape[1]};
                    const float *g = bg + w.offsets[id] + (size_t)l * sp->numel;
                    h5d_write(f, name, H5T_NATIVE_FLOAT, sp->ndim, dims, g, &err);
                }
            }
            buf_reset(&img);
            if (h5f_image(f, &img, "full", &err) < 0) die("full grads", &err);
            h5f_close(f);
        }
        if (h5f_write_path(&img, grads, &err) < 0) die("write grads", &err);
        buf_free(&img);
        free(lg);
        free(bg);
    }
    transformer_free(tf);
    return 0;
}
