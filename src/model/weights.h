// Base model weights: the tensor names a llama / qwen2 / qwen3 checkpoint must
// hold, one block for all of them computed from the config (llm.c
// fill_in_parameter_sizes + malloc_and_point), each matrix family in its
// storage dtype (--dtype: as stored, or bf16 / f16 / f32), loading from safetensors with
// every tensor checked by name, shape and dtype, and the base_sha256 that ties an
// adapter to its base (format in doc/models.md). Not the forward pass.
// Per-layer tensors are stacked over layers: layer l of wq is wq + l * H*D*C.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "model/config.h"
#include "model/safetensors.h"
#include "dtype.h"

typedef enum {
    PARAM_EMBED, PARAM_ATTN_NORM, PARAM_WQ, PARAM_WK, PARAM_WV, PARAM_WO, PARAM_BQ, PARAM_BK, PARAM_BV,
    PARAM_BO, PARAM_Q_NORM, PARAM_K_NORM, PARAM_MLP_NORM, PARAM_W_GATE, PARAM_W_UP, PARAM_W_DOWN,
    PARAM_FINAL_NORM, PARAM_LM_HEAD, PARAM_WQKV, PARAM_W_GATE_UP, PARAM_PRE_FF_NORM, PARAM_POST_FF_NORM,
    PARAM_ROUTER, PARAM_EXP_GATE_UP, PARAM_EXP_DOWN, PARAM_SHARED_GATE,
    PARAM_SINKS, PARAM_ROUTER_BIAS, PARAM_EXP_GATE_UP_BIAS, PARAM_EXP_DOWN_BIAS,
    PARAM_COUNT
} ModelParamId;

// Named pointers into ModelWeights.memory (all borrowed from it). NULL when the
// config has no such tensor. lm_head == embed_tokens when tied. The matrices
// (void *) are stored in their family's dtype (ModelWeights.dtype: f32, bf16 or
// f16, kernels/dtype.h); norms and biases are always fp32 (converted exactly at
// load: a few KiB, and the kernels that read them stay fp32-only).
typedef struct {
    void *embed_tokens;   // (V, C)       model.embed_tokens.weight
    float *attn_norm;     // (L, C)       model.layers.N.input_layernorm.weight
    void *wq;             // (L, H*D, C)  self_attn.q_proj.weight
    void *wk;             // (L, Hkv*D, C)
    void *wv;             // (L, Hkv*D, C)
    void *wo;             // (L, C, H*D)  self_attn.o_proj.weight
    float *bq;            // (L, H*D)     qwen2; llama/qwen3 with attention_bias
    float *bk;            // (L, Hkv*D)
    float *bv;            // (L, Hkv*D)
    float *bo;            // (L, C)       llama/qwen3 with attention_bias
    float *q_norm;        // (L, D)       qwen3: self_attn.q_norm.weight
    float *k_norm;        // (L, D)
    float *mlp_norm;      // (L, C)       post_attention_layernorm.weight
    void *w_gate;         // (L, F, C)    mlp.gate_proj.weight
    void *w_up;           // (L, F, C)
    void *w_down;         // (L, C, F)
    float *final_norm;    // (C)          model.norm.weight
    void *lm_head;        // (V, C)       lm_head.weight, or embed_tokens when tied
    // phi3 (NULL elsewhere): the fused checkpoint tensors; wq/wk/wv and w_gate/w_up are then NULL and
    // model_weights_tensor gives each layer's q, k, v (gate, up) as row blocks of these
    void *wqkv;           // (L, (H+2Hkv)*D, C) self_attn.qkv_proj.weight: q rows, then k, then v
    void *w_gate_up;      // (L, 2F, C)   mlp.gate_up_proj.weight: gate rows, then up (Phi3MLP's chunk)
    // gemma (gemma_norms): mlp_norm is post_attention_layernorm on the attention output; the MLP's
    // pre-norm and its output norm are these two. Every gemma norm is stored as the file's w (the
    // transformer scales by 1 + w).
    float *pre_ff_norm;   // (L, C)       pre_feedforward_layernorm.weight
    float *post_ff_norm;  // (L, C)       post_feedforward_layernorm.weight
    // mixture of experts (config.h; NULL elsewhere). Expert e's rows of a layer are e * 2Fe ..
    // (e + 1) * 2Fe - 1 of exp_gate_up (its gate's Fe rows, then its up's) and e * C .. of
    // exp_down. Checkpoints hold them per expert (qwen*_moe, olmoe: mlp.experts.E.gate_proj /
    // up_proj / down_proj; mixtral: block_sparse_moe.experts.E.w1 / w3 / w2) or fused
    // (granitemoe: block_sparse_moe.input_linear (E, 2Fe, C) / output_linear (E, C, Fe)); the loader
    // assembles each layer's rows from them. w_gate, w_up, w_down are qwen2_moe's shared expert.
    void *router;         // (L, E, C)    mlp.gate.weight (mixtral: block_sparse_moe.gate; granitemoe: .router.layer)
                          // (model_param_part: the checkpoint tensors of a layer of exp_gate_up / exp_down)
    void *exp_gate_up;    // (L, E*2Fe, C)
    void *exp_down;       // (L, E*C, Fe)
    void *shared_gate;    // (L, 1, C)    qwen2_moe: mlp.shared_expert_gate.weight
    // gpt_oss (NULL elsewhere; fp32 vectors): its checkpoint's experts are fused and transposed,
    // mlp.experts.gate_up_proj (E, C, 2Fe) with gate and up INTERLEAVED (columns 2j gate, 2j + 1 up)
    // and mlp.experts.down_proj (E, Fe, C): the loader transposes them into exp_gate_up / exp_down's
    // layout above (gate's rows then up's) and de-interleaves the bias alike
    float *sinks;         // (L, H)       self_attn.sinks
    float *router_bias;   // (L, E)       mlp.router.bias (the router: mlp.router.weight)
    float *exp_gate_up_bias;  // (L, E*2Fe) mlp.experts.gate_up_proj_bias, expert e's gate's Fe then up's
    float *exp_down_bias; // (L, E*C)     mlp.experts.down_proj_bias
} ModelParams;

// One tensor family: its HF name (the part after "<prefix>N." when per
// layer), its per-layer shape, and whether this config has it.
typedef struct {
    const char *name;
    const char *prefix;   // per layer: "model.layers." (exaone's checkpoints: "transformer.h.")
    bool per_layer, present;
    int ndim;
    size_t shape[2];
    size_t numel;         // per layer when per_layer
} ModelParamSpec;

// Where one (family, layer) is held: its storage dtype and its first byte in
// ModelWeights.memory. A GGUF Q4_K_M file mixes types within a family (some
// layers' ffn_down Q6_K, the others Q4_K), so the dtype is per layer.
typedef struct {
    DType dt;
    size_t byte;
} ModelSlice;

typedef struct {
    ModelConfig cfg;
    ModelParams p;
    ModelParamSpec specs[PARAM_COUNT];
    DType dtype[PARAM_COUNT];     // storage dtype of each family (DT_F32 for norms and biases); a family
                                  // whose layers differ: its first layer's (model_weights_dtype is exact)
    ModelSlice *slices;           // owned (PARAM_COUNT * L): family id's layer l at id * L + l (a global
                                  // family's at l = 0); absent families' are { DT_F32, 0 }
    size_t offsets[PARAM_COUNT];  // element offset of each family: its place in a num_params-float
                                  // block (gradients, AdamW state), whatever the storage dtype
    size_t num_params;            // elements (lm_head counted once when tied)
    size_t bytes;                 // of memory
    void *memory;                 // owned: the one block
    char base_sha256[65];         // "" until loaded from files
} ModelWeights;

// --dtype of the tools that load a model: every matrix as f32, bf16 or f16 (a
// quantized one dequantized), or MODEL_DTYPE_AUTO, each family as the
// checkpoint stores it (a float family whose layers mix dtypes as f32; a
// quantized tensor as its blocks). --quantize's want is a quantized DType
// (DT_Q8_0, DT_Q4_K): every float matrix quantized to it at load
// (quant_fallback's type where its rows are not whole blocks), the quantized
// ones kept.
#define MODEL_DTYPE_AUTO (-1)
#define MODEL_DTYPE_CLI_HELP "base weights: auto (as the checkpoint stores them), bf16, f16 or f32 (also fp32, float32, bfloat16, fp16, float16, half)"
// "auto", "f32", "bf16", "f16" and the aliases fp32, float32, float, bfloat16,
// fp16, float16, half (any case); -1 otherwise.
int model_dtype_parse(const char *s, int *want);
// --quantize's value: "q8_0" or "q4_k" (any case) as a DType; "none" (or NULL) as
// MODEL_DTYPE_AUTO; -1 otherwise.
int model_quantize_parse(const char *s, int *want);
// True for the families a --dtype applies to (projections, embedding, head).
bool model_param_is_matrix(ModelParamId id);

// The tensor families of cfg (specs[PARAM_COUNT]); absent ones have present = false.
void model_param_specs(const ModelConfig *cfg, ModelParamSpec specs[PARAM_COUNT]);
// Floats the block holds for cfg (lm_head counted once when tied), without allocating.
size_t model_params_count(const ModelConfig *cfg);
// Sizes the block from cfg, allocates it (uninitialised) and points the params:
// every family fp32 (model_weights_alloc), or as dt[] says (matrices only:
// vectors stay fp32 whatever dt says).
int model_weights_alloc(ModelWeights *w, const ModelConfig *cfg, PailErr *err);
int model_weights_alloc_as(ModelWeights *w, const ModelConfig *cfg, const DType dt[PARAM_COUNT], PailErr *err);
void model_weights_free(ModelWeights *w);
// dt[] with every matrix family mat and every vector DT_F32.
void model_dtypes_uniform(DType mat, DType dt[PARAM_COUNT]);
// Bytes the block takes for cfg with dt[] (without allocating).
size_t model_weights_bytes(const ModelConfig *cfg, const DType dt[PARAM_COUNT]);
// Sizes the block with a dtype per (family, layer): ldt[id * L + l] (vectors
// stay fp32; a quantized dtype only where the rows are whole blocks, else -1).
int model_weights_alloc_layers(ModelWeights *w, const ModelConfig *cfg, const DType *ldt, PailErr *err);
// Pointer to (family, layer) in w (layer ignored for global tensors), in its dtype
// (model_weights_dtype). phi3's q, k, v, gate and up are views into the fused families.
void *model_weights_tensor(const ModelWeights *w, ModelParamId id, int layer);
// The storage dtype of (family, layer): the tied embedding's for lm_head, the fused
// family's for phi3's views; DT_F32 for an absent family.
DType model_weights_dtype(const ModelWeights *w, ModelParamId id, int layer);
// True when some matrix of w is block-quantized.
bool model_weights_quantized(const ModelWeights *w);
// Element offset of (family, layer) in a num_params-float block (gradients, an fp32 block),
// phi3's views included; (size_t)-1 when the config has no such tensor.
size_t model_weights_elem_offset(const ModelWeights *w, ModelParamId id, int layer);
// The block as fp32 when every family is (full fine-tuning, merging, tests); NULL otherwise.
float *model_weights_f32(const ModelWeights *w);
// What the matrices are stored as: "bf16", "f32", "f16", "q4_k", or the mix
// ("bf16+f32", "q4_k+q6_k+q5_0") when they differ, quantized types first; out
// holds at least 48 bytes. Recorded in run.json (compute_dtype).
#define MODEL_DTYPE_DESC 48
void model_weights_dtype_desc(const ModelWeights *w, char *out, size_t cap);
void model_layer_dtypes_desc(const ModelConfig *cfg, const DType *ldt, char *out, size_t cap);
// HF name of (family, layer): "model.layers.3.self_attn.q_proj.weight".
void model_param_name(const ModelParamSpec *s, int layer, char *out, size_t cap);

// A checkpoint tensor that holds all or part of a (family, layer): rows row0 .. row0 + rows - 1 of
// the family's layer (cols each). Every family is one tensor a layer (row0 0, the family's shape)
// but the per-expert ones: exp_gate_up is 2E tensors a layer, part 2e expert e's gate_proj (mixtral:
// w1) at rows e*2Fe, part 2e+1 its up_proj (w3) at e*2Fe + Fe; exp_down E tensors, part e its
// down_proj (w2) at rows e*C. granitemoe's fused input_linear / output_linear are one 3-D tensor
// (E, 2Fe, C) / (E, C, Fe) a layer. transformers' save_pretrained writes these names (and loads them).
// gpt_oss's are one tensor a layer holding the family's rows permuted: mlp.experts.gate_up_proj (E, C,
// 2Fe) transposed and interleaved, down_proj (E, Fe, C) transposed, gate_up_proj_bias (E, 2Fe)
// interleaved (down_proj_bias (E, C) is the vector as it is).
typedef struct {
    char name[256];
    size_t row0, rows, cols;  // in the family's (rows, cols) view; a vector: cols 1
    int ndim;                 // the file's shape
    size_t shape[3];
    // The file's shape[0] blocks (experts) of R = rows / shape[0] family rows each; block e of the file
    // is (cols, R) when transposed (family row r, col k = file [e][k][j]), (R) or (R, cols) when not; with
    // interleaved, file index j is family row (j % 2) R/2 + j / 2 (gate rows then up rows), else r = j.
    bool transposed, interleaved;
} ModelTensorPart;
// Part tp (transposed or interleaved) between the file's layout and the family's rows: from the
// family's rows src (dt, rows x cols, quantized rows dequantized) to the file's layout dst (as to).
// 0, or -1 when out of memory.
int model_part_to_file(void *dst, DType to, const void *src, DType dt, const ModelTensorPart *tp);
// The tensors a layer of family id is made of (>= 1).
int model_param_nparts(const ModelConfig *cfg, ModelParamId id);
// Part `part` of (family id, layer); specs from model_param_specs(cfg).
void model_param_part(const ModelConfig *cfg, const ModelParamSpec *specs, ModelParamId id, int layer, int part,
                      ModelTensorPart *out);

// Checks set against cfg without loading: every expected tensor present with the
// expected shape and a float dtype (F32/F16/BF16), or a matrix quantized in
// pail's layout (doc/models.md: U8 [rows, row bytes] named by the file's
// "pail.quant.<tensor>" metadata, whole blocks); nothing unexpected except
// harmless extras (rotary_emb.inv_freq buffers; lm_head.weight when tied). The
// message names the tensor, its dtype or shape, and the file.
int model_weights_check(const ModelConfig *cfg, const SafeTensorsSet *set, PailErr *err);
// The storage dtype of every (family, layer) for want (MODEL_DTYPE_AUTO, a float
// DType, or --quantize's quantized one) over a checked set: ldt (PARAM_COUNT * L).
// A --dtype f16 of a family stored wider is refused at load if a value would
// overflow f16.
void model_weights_choose_dtypes(const ModelConfig *cfg, const SafeTensorsSet *set, int want, DType *ldt);
// The quantized dtype the set stores tensor t (of file index fi) as (its
// "pail.quant.<name>" metadata), or -1 for a plain tensor.
int model_tensor_quant(const SafeTensorsSet *set, int fi, const SafeTensor *t);
#define MODEL_QUANT_META "pail.quant."
// Alloc (as chosen) + check + copy or convert every tensor + base_sha256. w->cfg = *cfg.
int model_weights_load_set(ModelWeights *w, const ModelConfig *cfg, const SafeTensorsSet *set, int want,
                           PailErr *err);
// dir/config.json (+ generation_config.json) and the safetensors in dir;
// model_weights_load is want = DT_F32 (every weight fp32, as pail held them before --dtype).
int model_weights_load_as(ModelWeights *w, const char *dir, int want, PailErr *err);
int model_weights_load(ModelWeights *w, const char *dir, PailErr *err);
// The block's bytes and model_layer_dtypes_desc of the dtypes a load of dir with
// want would choose (bytes, desc may be NULL; desc holds MODEL_DTYPE_DESC bytes),
// reading only config.json and the safetensors headers (for the memory plan
// printed before anything is loaded).
int model_weights_probe(const char *dir, int want, size_t *bytes, char *desc, PailErr *err);
// base_sha256 of the set's files: sha256 over the lines "<file sha256 hex>  <file
// name>\n" sorted by file name (bytewise), i.e. `sha256sum` output. Hashes the
// mapped bytes; no second read.
void model_base_sha256(const SafeTensorsSet *set, char hex[65]);
