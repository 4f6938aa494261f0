// LoRA adapters: configuration, the flat parameter layout shared by params,
// grads and AdamW moments (one array each, same offsets), PEFT's
// initialisation, and the adapter file (HDF5, doc/formats.md). The forward and
// backward of an adapted projection live with the model compute.
// Shapes are PEFT's: lora_A (R, in), lora_B (out, R); y = x W^T + s (x A^T) B^T.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "core/buf.h"
#include "core/err.h"
#include <hdf5.h>
#include "model/config.h"

// LORA_EXP_GATE_UP / LORA_EXP_DOWN: a mixture of experts' fused expert projections (config.h), one
// adapter per expert as PEFT's target_parameters gives them (ParamWrapper on mlp.experts.gate_up_proj
// (E, 2Fe, C) and mlp.experts.down_proj (E, C, Fe)); on qwen2_moe, LORA_GATE / UP / DOWN are its shared expert.
// LORA_ROUTER: a mixture of experts' router (C -> E), adapted only when named ("router"; not in all / mlp).
typedef enum {
    LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_EXP_GATE_UP, LORA_EXP_DOWN, LORA_ROUTER,
    LORA_NMOD
} LoraModule;
extern const char *const LORA_MODULE_NAMES[LORA_NMOD];  // Hugging Face names: "q_proj", ... "down_proj"
extern const char *const LORA_MODULE_PARENT[LORA_NMOD]; // "self_attn" or "mlp"

#define LORA_FORMAT "pail.lora"
#define LORA_FORMAT_VERSION 1

// lora_targets_parse's mark that phi3's fused names were given (qkv_proj = q, k, v; gate_up_proj
// = gate, up): lora_layout_build refuses them for other families and clears the mark.
#define LORA_TARGET_NAMED_FUSED (1u << 12)
// lora_targets_parse's mark for all / mlp: the modules the model has (a dense model has no experts,
// an MoE model without a shared expert no gate_proj) rather than a refusal of the others.
#define LORA_TARGET_PRESENT (1u << 13)
#define LORA_MLP_BITS ((1u << LORA_GATE) | (1u << LORA_UP) | (1u << LORA_DOWN))
#define LORA_EXPERT_BITS ((1u << LORA_EXP_GATE_UP) | (1u << LORA_EXP_DOWN))
#define LORA_DENSE_BITS 0x7fu  // the seven modules of a dense model
#define LORA_TARGETS_ALL ((((1u << LORA_NMOD) - 1) & ~(1u << LORA_ROUTER)) | LORA_TARGET_PRESENT)  // "all"

typedef struct {
    int rank;          // R
    double alpha;
    bool rslora;       // scaling alpha / sqrt(R) instead of alpha / R
    unsigned targets;  // bit m set: module m adapted (phi3: q, k, v together, gate and up together)
} LoraConfig;

typedef struct {
    int64_t a_off, b_off;  // offsets (floats) of lora_A (R, in) and lora_B (out, R) in the flat arrays
    int in, out;
    // experts (1 for a dense module): then A is (n_exp, R, in) and B (n_exp, out, R), expert e's
    // at a_off + e R in and b_off + e out R (pail's order; PEFT's lora_A (n_exp R, in) is the
    // same, its lora_B (out, R n_exp) holds expert e's column r at r n_exp + e)
    int n_exp;
} LoraSlot;

typedef struct {
    LoraConfig cfg;
    // phi3: PEFT's fused modules. qkv_proj is ONE lora_A (R, C) and lora_B ((H+2Hkv)*D, R):
    // the q, k and v slots share that A (same a_off: their gradients add up in it) and point
    // at their rows of B (contiguous: q's, then k's, then v's); gate_up_proj likewise (gate
    // rows, then up). Files, PEFT and merges see the fused module (lora_stored_slot).
    bool fused;
    int n_layers;          // L
    LoraSlot *slots;       // (L, LORA_NMOD), owned; unused modules have in = out = 0
    int64_t n_params;      // floats in one flat array
} LoraLayout;

double lora_scaling(const LoraConfig *c);
// Parses "q_proj,k_proj,..." or "all" (the seven) or "attn" / "mlp", and phi3's
// "qkv_proj" (q, k, v) and "gate_up_proj" (gate, up); see LORA_TARGET_NAMED_*.
int lora_targets_parse(const char *s, unsigned *targets, PailErr *err);
// "q_proj,v_proj" for messages and run.json (buf of >= 96 bytes).
void lora_targets_format(unsigned targets, char *buf, size_t cap);
int lora_layout_build(LoraLayout *l, const ModelConfig *mc, const LoraConfig *c, PailErr *err);
void lora_layout_free(LoraLayout *l);
// Floats of the expert modules (n_exp > 1) in the layout: an adapter on a mixture of experts' experts
// is E times the size of a dense MLP's.
int64_t lora_layout_expert_params(const LoraLayout *l);
const LoraSlot *lora_slot(const LoraLayout *l, int layer, LoraModule m);
// Module m as files store it: 1 with *out and *name ("q_proj", or phi3's fused "qkv_proj"
// covering q, k and v, "gate_up_proj" covering gate and up), 0 when m is not adapted or is
// part of a fused module stored under another m (k, v, up).
int lora_stored_slot(const LoraLayout *l, int layer, LoraModule m, LoraSlot *out, const char **name);
// "all" the stored modules' names, comma-separated ("qkv_proj,o_proj,..." for phi3), buf >= 96 bytes.
void lora_layout_targets_format(const LoraLayout *l, char *buf, size_t cap);
// PEFT's default init: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with
// a = sqrt(5)), B = 0. Deterministic in seed.
void lora_init(const LoraLayout *l, float *params, uint64_t seed);

typedef struct {
    int64_t version, step, created_unix;
    char base_sha256[65];
} AdapterMeta;

// The adapter's attributes (but format) and datasets into / from an open HDF5
// file: the trainer state embeds them.
int lora_adapter_write_h5(hid_t f, const LoraLayout *l, const float *params, const AdapterMeta *meta, PailErr *err);
int lora_adapter_read_h5(hid_t f, const char *name, const ModelConfig *mc, LoraLayout *layout, float **params,
                         AdapterMeta *meta, PailErr *err);
// Adapter file image (HDF5) of params in layout l.
int lora_adapter_write(const LoraLayout *l, const float *params, const AdapterMeta *meta, Buf *out, PailErr *err);
// Reads an adapter file image and checks it against the model: every target
// module of every layer present with PEFT's shapes for this model (mc NULL:
// shapes taken from the file itself, for tools that have no model). On success
// *layout and *params (malloc'ed, layout->n_params floats) are the caller's.
int lora_adapter_read(const void *data, size_t len, const char *name, const ModelConfig *mc, LoraLayout *layout,
                      float **params, AdapterMeta *meta, PailErr *err);
