// Random-weight Hugging Face checkpoints (see modelgen.h): fills a ModelWeights
// block with seeded normals, writes it as F32 or BF16 safetensors with the names
// transformers expects, plus config.json, generation_config.json and tokenizer files.
#include "model/modelgen.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "core/rng.h"
#include "model/weights.h"

int modelgen_shape(ModelConfig *cfg, const char *shape, ModelType type) {
    ModelConfig c = {0};
    int bos = 1, eos = 2;
    if (!strcmp(shape, "tiny")) {
        c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.num_key_value_heads = 2;
        c.intermediate_size = 128, c.vocab_size = 512;
    } else if (!strcmp(shape, "bench")) {
        c.hidden_size = 512, c.num_hidden_layers = 8, c.num_attention_heads = 8, c.num_key_value_heads = 2;
        c.intermediate_size = 1408, c.vocab_size = 32000;
    } else if (!strcmp(shape, "qwen2.5-0.5b")) {
        if (type != MODEL_QWEN2) return -1;
        c.hidden_size = 896, c.num_hidden_layers = 24, c.num_attention_heads = 14, c.num_key_value_heads = 2;
        c.intermediate_size = 4864, c.vocab_size = 151936;
        bos = eos = 151643;  // <|endoftext|>, as Qwen/Qwen2.5-0.5B's config.json
    } else if (!strcmp(shape, "qwen2.5-7b")) {  // Qwen/Qwen2.5-7B's config.json
        if (type != MODEL_QWEN2) return -1;
        c.hidden_size = 3584, c.num_hidden_layers = 28, c.num_attention_heads = 28, c.num_key_value_heads = 4;
        c.intermediate_size = 18944, c.vocab_size = 152064;
        bos = eos = 151643;
    } else if (!strcmp(shape, "granite-3.1-1b-a400m")) {  // ibm-granite/granite-3.1-1b-a400m-base's config.json
        if (type != MODEL_GRANITEMOE) return -1;
        c.hidden_size = 1024, c.num_hidden_layers = 24, c.num_attention_heads = 16, c.num_key_value_heads = 8;
        c.intermediate_size = 512, c.vocab_size = 49155;
        c.num_experts = 32, c.num_experts_per_tok = 8, c.moe_intermediate_size = 512;
        bos = eos = 0;  // <|end_of_text|>
    } else {
        return -1;
    }
    bool moe = type >= MODEL_QWEN3_MOE;
    if (moe && !c.num_experts) {  // tiny: E 4, K 2, Fe 32 (whole q8_0 blocks), qwen2_moe's shared expert 64
        c.num_experts = !strcmp(shape, "tiny") ? 4 : 8, c.num_experts_per_tok = 2;
        c.moe_intermediate_size = c.intermediate_size / 4;
        c.intermediate_size /= 2;
    }
    model_config_defaults(&c, type);
    if (type == MODEL_GPT_OSS && !strcmp(shape, "tiny")) c.sliding_window = 8;  // layer 0 sliding, 1 full
    if (!strcmp(shape, "granite-3.1-1b-a400m")) {
        c.embedding_multiplier = 12.0, c.residual_multiplier = 0.22, c.attention_multiplier = 0.015625;
        c.logits_scaling = 6.0;
        c.rope_theta = 1500000.0;
        c.max_position_embeddings = 131072;
        c.tie_word_embeddings = true;
    }
    if (!strcmp(shape, "qwen2.5-0.5b") || !strcmp(shape, "qwen2.5-7b")) {
        c.tie_word_embeddings = !strcmp(shape, "qwen2.5-0.5b");  // 7B has its own lm_head
        c.rope_theta = 1000000.0;
        c.max_position_embeddings = 32768;
    }
    c.bos_token_id = bos;
    c.eos_token_ids[0] = eos;
    c.n_eos = 1;
    *cfg = c;
    return 0;
}

// One chunk of one tensor to fill; chunks run in parallel, each with its own
// stream so the result does not depend on the thread count.
typedef struct {
    float *dst;
    size_t n;
    uint64_t stream;
    bool norm;
} FillChunk;

#define FILL_CHUNK (1u << 20)

static int fill_random(ModelWeights *w, uint64_t seed, PailErr *err) {
    size_t cap = 64, n = 0;
    FillChunk *ch = malloc(cap * sizeof *ch);
    if (!ch) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    int L = w->cfg.num_hidden_layers;
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &w->specs[id];
        if (!s->present) continue;
        bool norm = id == PARAM_ATTN_NORM || id == PARAM_MLP_NORM || id == PARAM_FINAL_NORM ||
                    id == PARAM_Q_NORM || id == PARAM_K_NORM;
        if (w->cfg.gemma_norms) norm = false;  // gemma scales by 1 + w: w ~ 0 is the identity
        for (int l = 0; l < (s->per_layer ? L : 1); l++) {
            char nm[256];
            model_param_name(s, l, nm, sizeof nm);
            uint64_t h = hash64(nm, strlen(nm));
            float *p = model_weights_tensor(w, id, l);
            for (size_t off = 0, k = 0; off < s->numel; off += FILL_CHUNK, k++) {
                if (n == cap) {
                    FillChunk *nc = realloc(ch, 2 * cap * sizeof *ch);
                    if (!nc) { free(ch); return err_set(err, PAIL_ERR_NOMEM, "out of memory"); }
                    ch = nc, cap *= 2;
                }
                size_t len = s->numel - off < FILL_CHUNK ? s->numel - off : FILL_CHUNK;
                ch[n++] = (FillChunk){p + off, len, h + k, norm};
            }
        }
    }
#pragma omp parallel for schedule(dynamic, 4)
    for (size_t i = 0; i < n; i++) {
        Rng r;
        rng_seed(&r, seed, ch[i].stream);
        for (size_t j = 0; j < ch[i].n; j++)
            ch[i].dst[j] = (ch[i].norm ? 1.0f : 0.0f) + (float)(0.02 * rng_normal(&r));
    }
    free(ch);
    return 0;
}

static int write_json_file(const char *dir, const char *name, const Buf *b, PailErr *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return fs_write_file_atomic(path, b->data, b->len, err);
}

static int copy_file(const char *src_dir, const char *dst_dir, const char *name, bool required, PailErr *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", src_dir, name);
    Buf b = {0};
    PailErr e = {0};
    if (fs_read_file(path, &b, &e) < 0) {
        buf_free(&b);
        if (e.code == PAIL_ERR_NOT_FOUND && !required) return 0;
        *err = e;
        return err_wrap(err, "--tokenizer");
    }
    int rc = write_json_file(dst_dir, name, &b, err);
    buf_free(&b);
    return rc;
}

int modelgen_write(const ModelConfig *cfg, const char *dir, const ModelGenOptions *opt, PailErr *err) {
    if (model_config_validate(cfg, "model config", err) < 0) return -1;
    ModelWeights w;
    if (model_weights_alloc(&w, cfg, err) < 0) return -1;
    int rc = fill_random(&w, opt->seed, err);
    if (rc == 0) rc = model_weights_save(&w, dir, opt, err);
    model_weights_free(&w);
    return rc;
}

int model_weights_save(const ModelWeights *wp, const char *dir, const ModelGenOptions *opt, PailErr *err) {
    DType out_dt;
    if (opt->dtype == ST_DTYPE_F32) out_dt = DT_F32;
    else if (opt->dtype == ST_DTYPE_BF16) out_dt = DT_BF16;
    else if (opt->dtype == ST_DTYPE_F16) out_dt = DT_F16;
    else
        return err_set(err, PAIL_ERR_INVALID, "modelgen: dtype %s is not F32, BF16 or F16",
                       safetensors_dtype_name(opt->dtype));
    const ModelConfig *cfg = &wp->cfg;
    if (fs_mkdirs(dir, err) < 0) return -1;
    int rc = -1;
    uint8_t *conv = NULL;
    SafeTensorsWriteItem *items = NULL;
    char(*names)[256] = NULL, (*qkeys)[300] = NULL;
    const char **mk = NULL, **mv = NULL;
    Buf b = {0};
    size_t esz = dtype_size(out_dt);
    int L = cfg->num_hidden_layers, cap = 0, n = 0, nq = 0;
    for (int id = 0; id < PARAM_COUNT; id++)  // a tensor per part: the experts are one per expert (weights.h)
        if (wp->specs[id].present) cap += L * model_param_nparts(cfg, (ModelParamId)id);
    // Tensors stored in another dtype than the file's are converted (rounded
    // once, to nearest even; a quantized one dequantized when asked) into one
    // block; the file then holds exactly these values.
    // gpt_oss's experts are permuted back into transformers' layout (model_part_to_file), always as
    // floats (a quantized layer dequantized: its blocks are rows of pail's layout, not the file's).
    size_t conv_elems = 0;
    for (int id = 0; id < PARAM_COUNT; id++)
        for (int l = 0; wp->specs[id].present && l < (wp->specs[id].per_layer ? L : 1); l++) {
            DType dt = model_weights_dtype(wp, (ModelParamId)id, l);
            ModelTensorPart tp;
            model_param_part(cfg, wp->specs, (ModelParamId)id, l, 0, &tp);
            if (tp.transposed || tp.interleaved || (dt != out_dt && (opt->dequantize || !dtype_is_quant(dt))))
                conv_elems += wp->specs[id].numel;
        }
    if (conv_elems && !(conv = malloc(conv_elems * esz))) {
        err_set(err, PAIL_ERR_NOMEM, "out of memory for %zu converted parameters", conv_elems);
        goto out;
    }
    items = calloc(cap, sizeof *items);
    names = calloc(cap, sizeof *names);
    qkeys = calloc(cap + 1, sizeof *qkeys);
    mk = calloc(cap + 1, sizeof *mk);
    mv = calloc(cap + 1, sizeof *mv);
    if (!items || !names || !qkeys || !mk || !mv) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
    mk[0] = "format", mv[0] = "pt";  // transformers refuses files without format "pt"
    size_t used = 0;
    for (int id = 0; id < PARAM_COUNT; id++) {
        const ModelParamSpec *s = &wp->specs[id];
        if (!s->present) continue;
        for (int l = 0; l < (s->per_layer ? L : 1); l++)
            for (int k = 0; k < model_param_nparts(cfg, (ModelParamId)id); k++) {
                ModelTensorPart tp;
                model_param_part(cfg, wp->specs, (ModelParamId)id, l, k, &tp);
                snprintf(names[n], sizeof names[n], "%s", tp.name);
                DType dt = model_weights_dtype(wp, (ModelParamId)id, l);
                const void *src = (const char *)model_weights_tensor(wp, id, l) +
                                  (s->ndim == 2 ? tp.row0 * dtype_row_bytes(dt, tp.cols) : 0);
                size_t numel = tp.rows * tp.cols;
                bool perm = tp.transposed || tp.interleaved;
                if (perm) {
                    uint8_t *d = conv + used * esz;
                    if (model_part_to_file(d, out_dt, src, dt, &tp) < 0) {
                        err_set(err, PAIL_ERR_NOMEM, "out of memory");
                        goto out;
                    }
                    used += numel;
                    src = d;
                } else if (dtype_is_quant(dt) && !opt->dequantize) {  // the blocks as they are
                    snprintf(qkeys[nq], sizeof qkeys[nq], "%s%s", MODEL_QUANT_META, names[n]);
                    mk[1 + nq] = qkeys[nq], mv[1 + nq] = dtype_name(dt), nq++;
                    items[n] = (SafeTensorsWriteItem){names[n], ST_DTYPE_U8, 2,
                                                      {(int64_t)tp.rows, (int64_t)dtype_row_bytes(dt, tp.cols)}, src};
                    n++;
                    continue;
                }
                if (!perm && dt != out_dt) {
                    uint8_t *d = conv + used * esz;
                    dtype_convert(d, out_dt, src, dt, numel);
                    used += numel;
                    src = d;
                }
                items[n] = (SafeTensorsWriteItem){names[n], opt->dtype, tp.ndim,
                                                  {(int64_t)tp.shape[0], (int64_t)tp.shape[1], (int64_t)tp.shape[2]},
                                                  src};
                n++;
            }
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (safetensors_write(path, items, n, mk, mv, 1 + nq, err) < 0) goto out;

    const char *dtname = out_dt == DT_BF16 ? "bfloat16" : out_dt == DT_F16 ? "float16" : "float32";
    if (model_config_to_json(cfg, dtname, &b) < 0) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
    if (write_json_file(dir, "config.json", &b, err) < 0) goto out;
    buf_reset(&b);
    json_t *g = json_object();
    json_object_set_new(g, "bos_token_id", cfg->bos_token_id >= 0 ? json_integer(cfg->bos_token_id) : json_null());
    json_t *eos = cfg->n_eos == 1 ? json_integer(cfg->eos_token_ids[0]) : json_array();
    if (cfg->n_eos != 1)
        for (int i = 0; i < cfg->n_eos; i++) json_array_append_new(eos, json_integer(cfg->eos_token_ids[i]));
    json_object_set_new(g, "eos_token_id", eos);
    char *gs = json_dumps(g, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(g);
    if (!gs || buf_printf(&b, "%s\n", gs) < 0) { free(gs); err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
    free(gs);
    if (write_json_file(dir, "generation_config.json", &b, err) < 0) goto out;
    if (opt->tokenizer_dir) {
        if (copy_file(opt->tokenizer_dir, dir, "tokenizer.json", true, err) < 0 ||
            copy_file(opt->tokenizer_dir, dir, "tokenizer_config.json", true, err) < 0 ||
            copy_file(opt->tokenizer_dir, dir, "special_tokens_map.json", false, err) < 0 ||
            copy_file(opt->tokenizer_dir, dir, "chat_template.jinja", false, err) < 0)
            goto out;
    }
    rc = 0;
out:
    buf_free(&b);
    free(items);
    free(names);
    free(qkeys);
    free(mk);
    free(mv);
    free(conv);
    return rc;
}

// "bos_token": "<s>" or {"content": "<s>", ...} or null.
static const char *special_content(json_t *v) {
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_string_value(v);
}

static int token_id(json_t *tok, const char *content) {
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(tok, "added_tokens"), i, x) {
        const char *c = json_string_value(json_object_get(x, "content"));
        if (c && !strcmp(c, content) && json_is_integer(json_object_get(x, "id")))
            return (int)json_integer_value(json_object_get(x, "id"));
    }
    json_t *id = json_object_get(json_object_get(json_object_get(tok, "model"), "vocab"), content);
    return json_is_integer(id) ? (int)json_integer_value(id) : -2;
}

int modelgen_tokenizer_ids(const char *dir, int *bos, int *eos, int *max_id, PailErr *err) {
    char tp[4096], cp[4096];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", dir);
    snprintf(cp, sizeof cp, "%s/tokenizer_config.json", dir);
    json_error_t je;
    json_t *tok = json_load_file(tp, 0, &je), *cfg = NULL;
    if (!tok) return err_set(err, PAIL_ERR_INVALID, "%s: %s", tp, je.text);
    // tokenizer_config.json often holds model_max_length = 1e30 written as an integer
    if (!(cfg = json_load_file(cp, JSON_DECODE_INT_AS_REAL, &je))) {
        json_decref(tok);
        return err_set(err, PAIL_ERR_INVALID, "%s: %s", cp, je.text);
    }
    int rc = 0, mx = -1;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(json_object_get(tok, "model"), "vocab"), k, v)
        if (json_is_integer(v) && json_integer_value(v) > mx) mx = (int)json_integer_value(v);
    size_t i;
    json_array_foreach(json_object_get(tok, "added_tokens"), i, v) {
        json_t *id = json_object_get(v, "id");
        if (json_is_integer(id) && json_integer_value(id) > mx) mx = (int)json_integer_value(id);
    }
    *max_id = mx;
    const char *names[2] = {"bos_token", "eos_token"};
    int *outs[2] = {bos, eos};
    for (int j = 0; j < 2; j++) {
        const char *c = special_content(json_object_get(cfg, names[j]));
        *outs[j] = c ? token_id(tok, c) : -1;
        if (*outs[j] == -2) {
            rc = err_set(err, PAIL_ERR_INVALID, "%s: %s '%s' is not a token of %s", cp, names[j], c, tp);
            break;
        }
    }
    json_decref(tok);
    json_decref(cfg);
    return rc;
}
