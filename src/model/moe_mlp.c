// A mixture of experts' MLP for the transformer (transformer_impl.h): HF's
// Qwen3MoeSparseMoeBlock and its kin. For T rows x (the post-attention norm's):
//   logits = x Wr^T (T,E); idx, w = the K largest and their weights (moe_route:
//   softmax over E, or over the K chosen when norm_topk_prob); the T*K
//   (token, choice) pairs grouped by expert (moe_group), their rows of x
//   gathered (TK,C); each expert's rows through its own SwiGLU MLP, gate and up
//   from its (2Fe, C) block of exp_gate_up, down from its (C, Fe) block of
//   exp_down (the grouped GEMM: one product per expert over its rows);
//   out[t] = sum_k w[t,k] h[grouped row of (t,k)] (moe_combine, in k order);
//   qwen2_moe adds sigmoid(x w_sg^T) * shared_expert(x), a dense SwiGLU MLP.
// LoRA on the experts (LORA_EXP_GATE_UP / LORA_EXP_DOWN) is one adapter per
// expert on its fused gate_up block (one A for gate and up, as PEFT's
// target_parameters gives it) and on its down block. The backward runs it in
// reverse: the router gets the gradient of the weights (through the softmax),
// so x's gradient has the router's term; the choice itself has none.
// Every op goes through the backend's table; the only host read is each
// layer's E+1 expert offsets, which size the per-expert products.
#include <stdio.h>
#include "model/transformer_impl.h"

size_t moe_la_rows(const ModelConfig *c, size_t T) { return model_is_moe(c) ? T * c->num_experts_per_tok : 0; }

void moe_plan(Transformer *tf, LayerActs *a, Bump *b, bool first) {
    const ModelConfig *c = &tf->cfg;
    size_t T = (size_t)tf->plan.max_tokens, C = (size_t)c->hidden_size, E = (size_t)c->num_experts,
           K = (size_t)c->num_experts_per_tok, Fe = (size_t)c->moe_intermediate_size, TK = T * K,
           F = (size_t)c->intermediate_size, R = (size_t)tf->plan.lora_rank;
    a->rlog = take(b, T * E);
    a->rw = take(b, T * K);
    a->ridx = (int *)take(b, T * K);
    a->gtok = (int *)take(b, TK);
    a->gpos = (int *)take(b, TK);
    a->goffs = (int *)take(b, E + 1);
    a->eg = take(b, TK * Fe);
    a->eu = take(b, TK * Fe);
    a->eh = take(b, TK * C);
    if (F > 0) {
        a->sg = take(b, T);
        a->so = take(b, T * C);
    }
    if (!first) return;
    tf->moe_out = take(b, T * C);
    tf->xg = take(b, TK * C);
    tf->eact = take(b, TK * Fe);
    if (!tf->plan.backward) return;
    tf->deh = take(b, TK * C);  // also the grouped rows' dx (deh is read before it is written)
    tf->drw = take(b, T * K);
    tf->deg = take(b, TK * Fe);
    tf->deu = take(b, TK * Fe);
    tf->deact = take(b, TK * Fe);
    tf->drlog = take(b, T * E);
    if (F > 0) {
        tf->ds = take(b, T * C);
        tf->dsg = take(b, T);
    }
    if (R > 0) tf->dla_moe = take(b, TK * R);
}

// Expert e's first row of family id at layer l (rows of `rows` a expert, cols elements a row) in
// backend memory, and its element offset in a num_params-float block.
static const void *expert_w(const Transformer *tf, ModelParamId id, int l, int e, size_t rows, size_t cols) {
    return (const char *)wm(tf, id, l) + (size_t)e * rows * dtype_row_bytes(wdt(tf, id, l), cols);
}
static size_t expert_off(const Transformer *tf, ModelParamId id, int l, int e, size_t rows, size_t cols) {
    return model_weights_elem_offset(tf->w, id, l) + (size_t)e * rows * cols;
}

// The experts' activation of gate and up (n values): SwiGLU, or gpt_oss's clamped one.
static int expert_act(Transformer *tf, float *out, const float *gate, const float *up, size_t n, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    if (c->swiglu_limit > 0)
        OP(swiglu_clamp_forward, out, gate, up, n, (float)c->swiglu_alpha, (float)c->swiglu_limit);
    else
        OP(swiglu_forward, out, gate, up, n);
    return 0;
}

int moe_mlp_forward(Transformer *tf, int l, LayerActs *a, int T, const float *xin, float *out, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    int C = c->hidden_size, E = c->num_experts, K = c->num_experts_per_tok, Fe = c->moe_intermediate_size,
        F = c->intermediate_size, TK = T * K;
    // the router (+ gpt_oss's bias), through its LoRA when named (proj_forward's la in a->la[LORA_ROUTER])
    if (proj_forward(tf, a->rlog, a->la[LORA_ROUTER], xin, PARAM_ROUTER, wv(tf, PARAM_ROUTER_BIAS, l), T, C, E, l,
                     LORA_ROUTER, 0, err) < 0)
        return -1;

    OP(moe_route_forward, a->ridx, a->rw, a->rlog, T, E, K, c->norm_topk_prob ? 1 : 0);
    OP(moe_group, a->gtok, a->gpos, a->goffs, a->ridx, T, K, E);
    OP(to_host, a->h_offs, a->goffs, (size_t)(E + 1) * sizeof(int));
    const int *offs = a->h_offs;
    OP(gather_rows, tf->xg, xin, a->gtok, TK, C);
    const LoraSlot *sgu = tf->lora_on ? lora_slot(tf->lora, l, LORA_EXP_GATE_UP) : NULL,
                   *sdn = tf->lora_on ? lora_slot(tf->lora, l, LORA_EXP_DOWN) : NULL;
    int R = tf->lora ? tf->lora->cfg.rank : 0;
    DType gdt = wdt(tf, PARAM_EXP_GATE_UP, l), ddt = wdt(tf, PARAM_EXP_DOWN, l);
    size_t up_bytes = (size_t)Fe * dtype_row_bytes(gdt, (size_t)C);                               // gate's Fe rows, then up's
    const float *gub = wv(tf, PARAM_EXP_GATE_UP_BIAS, l), *dnb = wv(tf, PARAM_EXP_DOWN_BIAS, l);  // gpt_oss
    for (int e = 0; e < E; e++) {
        int r0 = offs[e], n = offs[e + 1] - r0;
        if (n == 0) continue;
        const float *x = tf->xg + (size_t)r0 * C;
        const char *Wg = expert_w(tf, PARAM_EXP_GATE_UP, l, e, 2 * (size_t)Fe, C), *Wu = Wg + up_bytes;
        const float *bg = gub ? gub + (size_t)e * 2 * Fe : NULL, *bu = gub ? bg + Fe : NULL;
        float *g = a->eg + (size_t)r0 * Fe, *u = a->eu + (size_t)r0 * Fe;
        if (sgu) {  // one A (R,C) for gate and up; B (2Fe,R): gate's rows, then up's
            const float *A = tf->lora_params + sgu->a_off + (size_t)e * R * C,
                        *B = tf->lora_params + sgu->b_off + (size_t)e * 2 * Fe * R;
            float *la = a->la[LORA_EXP_GATE_UP] + (size_t)r0 * R;
            OP(matmul_forward_lora, g, la, x, Wg, gdt, bg, A, B, n, C, Fe, R, tf->lora_scale, 0.0f);
            OP(matmul_forward_lora, u, la, x, Wu, gdt, bu, A, B + (size_t)Fe * R, n, C, Fe, R, tf->lora_scale, 0.0f);
        } else {
            OP(matmul_forward, g, x, Wg, gdt, bg, n, C, Fe, 1.0f, 0.0f);
            OP(matmul_forward, u, x, Wu, gdt, bu, n, C, Fe, 1.0f, 0.0f);
        }
    }
    if (expert_act(tf, tf->eact, a->eg, a->eu, (size_t)TK * Fe, err) < 0) return -1;
    for (int e = 0; e < E; e++) {
        int r0 = offs[e], n = offs[e + 1] - r0;
        if (n == 0) continue;
        const float *x = tf->eact + (size_t)r0 * Fe;
        const void *Wd = expert_w(tf, PARAM_EXP_DOWN, l, e, C, Fe);
        const float *bd = dnb ? dnb + (size_t)e * C : NULL;
        float *h = a->eh + (size_t)r0 * C;
        if (sdn) {
            const float *A = tf->lora_params + sdn->a_off + (size_t)e * R * Fe,
                        *B = tf->lora_params + sdn->b_off + (size_t)e * C * R;
            OP(matmul_forward_lora, h, a->la[LORA_EXP_DOWN] + (size_t)r0 * R, x, Wd, ddt, bd, A, B, n, Fe, C, R,
               tf->lora_scale, 0.0f);
        } else {
            OP(matmul_forward, h, x, Wd, ddt, bd, n, Fe, C, 1.0f, 0.0f);
        }
    }
    OP(moe_combine_forward, out, a->eh, a->rw, a->gpos, T, K, C, 0.0f);
    if (F == 0) return 0;
    // qwen2_moe: out += sigmoid(x w_sg^T) * down(silu(gate x) * up x)
    if (proj_forward(tf, a->gate, a->la[LORA_GATE], xin, PARAM_W_GATE, NULL, T, C, F, l, LORA_GATE, 0, err) < 0 ||
        proj_forward(tf, a->up, a->la[LORA_UP], xin, PARAM_W_UP, NULL, T, C, F, l, LORA_UP, 0, err) < 0)
        return -1;
    OP(swiglu_forward, a->act, a->gate, a->up, (size_t)T * F);
    if (proj_forward(tf, a->so, a->la[LORA_DOWN], a->act, PARAM_W_DOWN, NULL, T, F, C, l, LORA_DOWN, 0, err) < 0)
        return -1;
    OP(matmul_forward, a->sg, xin, wm(tf, PARAM_SHARED_GATE, l), wdt(tf, PARAM_SHARED_GATE, l), NULL, T, C, 1, 1.0f,
       0.0f);
    OP(sigmoid_gate_forward, out, a->sg, a->so, T, C, 1.0f);
    return 0;
}

int moe_mlp_backward(Transformer *tf, int l, LayerActs *a, int T, const float *dy, const float *xin, float *dxin,
                     float *lg, float *bg, PailErr *err) {
    const ModelConfig *c = &tf->cfg;
    int C = c->hidden_size, E = c->num_experts, K = c->num_experts_per_tok, Fe = c->moe_intermediate_size,
        F = c->intermediate_size, TK = T * K;
    bool full = bg && tf->plan.full, has_bias = c->moe_bias;  // gpt_oss: the router's and experts' biases
    float dx_beta = 0.0f;                                     // 1 once dxin holds a term
    if (F > 0) {                                              // the shared expert under its gate: out = sigmoid(g) s
        OP(sigmoid_gate_backward, tf->ds, tf->dsg, dy, a->sg, a->so, T, C);
        if (proj_backward(tf, tf->dact, lg, bg, PARAM_W_DOWN, PARAM_COUNT, tf->ds, a->act, a->la[LORA_DOWN], T, F, C,
                          l, LORA_DOWN, 0, err) < 0)
            return -1;
        OP(swiglu_backward, tf->dgate, tf->dup, tf->dact, a->gate, a->up, (size_t)T * F);
        if (proj_backward(tf, dxin, lg, bg, PARAM_W_GATE, PARAM_COUNT, tf->dgate, xin, a->la[LORA_GATE], T, C, F, l,
                          LORA_GATE, 0, err) < 0 ||
            proj_backward(tf, dxin, lg, bg, PARAM_W_UP, PARAM_COUNT, tf->dup, xin, a->la[LORA_UP], T, C, F, l, LORA_UP,
                          1, err) < 0)
            return -1;
        float *dwsg = full ? bg + model_weights_elem_offset(tf->w, PARAM_SHARED_GATE, l) : NULL;
        OP(matmul_backward, dxin, dwsg, NULL, tf->dsg, xin, wm(tf, PARAM_SHARED_GATE, l), wdt(tf, PARAM_SHARED_GATE, l),
           T, C, 1, 1.0f, 1.0f);
        dx_beta = 1.0f;
    }
    const int *offs = a->h_offs;
    const LoraSlot *sgu = tf->lora_on ? lora_slot(tf->lora, l, LORA_EXP_GATE_UP) : NULL,
                   *sdn = tf->lora_on ? lora_slot(tf->lora, l, LORA_EXP_DOWN) : NULL;
    int R = tf->lora ? tf->lora->cfg.rank : 0;
    float s = tf->lora_scale;
    DType gdt = wdt(tf, PARAM_EXP_GATE_UP, l), ddt = wdt(tf, PARAM_EXP_DOWN, l);
    size_t up_bytes = (size_t)Fe * dtype_row_bytes(gdt, (size_t)C);
    // the routed experts: the weights' and the rows' gradients of the combine
    OP(moe_combine_backward, tf->deh, tf->drw, dy, a->eh, a->rw, a->gpos, T, K, C);
    // the grouped inputs and activations are shared scratch: this layer's again
    OP(gather_rows, tf->xg, xin, a->gtok, TK, C);
    if (expert_act(tf, tf->eact, a->eg, a->eu, (size_t)TK * Fe, err) < 0) return -1;
    for (int e = 0; e < E; e++) {  // down: h = act Wd^T (+ s (act A^T) B^T)
        int r0 = offs[e], n = offs[e + 1] - r0;
        if (n == 0) continue;
        const float *x = tf->eact + (size_t)r0 * Fe, *dh = tf->deh + (size_t)r0 * C;
        float *dx = tf->deact + (size_t)r0 * Fe;
        float *dW = full ? bg + expert_off(tf, PARAM_EXP_DOWN, l, e, C, Fe) : NULL;
        float *db = full && has_bias ? bg + model_weights_elem_offset(tf->w, PARAM_EXP_DOWN_BIAS, l) + (size_t)e * C : NULL;
        OP(matmul_backward, dx, dW, db, dh, x, expert_w(tf, PARAM_EXP_DOWN, l, e, C, Fe), ddt, n, Fe, C, 1.0f, 0.0f);
        if (!sdn) continue;
        size_t ao = sdn->a_off + (size_t)e * R * Fe, bo = sdn->b_off + (size_t)e * C * R;
        float *dla = tf->dla_moe + (size_t)r0 * R;
        OP(matmul_backward, dla, lg ? lg + bo : NULL, NULL, dh, a->la[LORA_EXP_DOWN] + (size_t)r0 * R,
           tf->lora_params + bo, DT_F32, n, R, C, s, 0.0f);
        OP(matmul_backward, dx, lg ? lg + ao : NULL, NULL, dla, x, tf->lora_params + ao, DT_F32, n, Fe, R, 1.0f, 1.0f);
    }
    if (c->swiglu_limit > 0)
        OP(swiglu_clamp_backward, tf->deg, tf->deu, tf->deact, a->eg, a->eu, (size_t)TK * Fe, (float)c->swiglu_alpha,
           (float)c->swiglu_limit);
    else
        OP(swiglu_backward, tf->deg, tf->deu, tf->deact, a->eg, a->eu, (size_t)TK * Fe);
    float *dxg = tf->deh;          // deh is spent
    for (int e = 0; e < E; e++) {  // gate and up: one A, B's gate rows then up rows
        int r0 = offs[e], n = offs[e + 1] - r0;
        if (n == 0) continue;
        const float *x = tf->xg + (size_t)r0 * C, *dg = tf->deg + (size_t)r0 * Fe, *du = tf->deu + (size_t)r0 * Fe;
        float *dx = dxg + (size_t)r0 * C;
        const char *Wg = expert_w(tf, PARAM_EXP_GATE_UP, l, e, 2 * (size_t)Fe, C);
        size_t wo = full ? expert_off(tf, PARAM_EXP_GATE_UP, l, e, 2 * (size_t)Fe, C) : 0;
        float *db = full && has_bias ? bg + model_weights_elem_offset(tf->w, PARAM_EXP_GATE_UP_BIAS, l) + (size_t)e * 2 * Fe : NULL;
        OP(matmul_backward, dx, full ? bg + wo : NULL, db, dg, x, Wg, gdt, n, C, Fe, 1.0f, 0.0f);
        OP(matmul_backward, dx, full ? bg + wo + (size_t)Fe * C : NULL, db ? db + Fe : NULL, du, x, Wg + up_bytes, gdt, n, C, Fe,
           1.0f, 1.0f);
        if (!sgu) continue;
        size_t ao = sgu->a_off + (size_t)e * R * C, bo = sgu->b_off + (size_t)e * 2 * Fe * R;
        const float *la = a->la[LORA_EXP_GATE_UP] + (size_t)r0 * R;
        float *dla = tf->dla_moe + (size_t)r0 * R;
        for (int half = 0; half < 2; half++) {  // the gate's rows of B, then the up's
            size_t bh = bo + (size_t)half * Fe * R;
            OP(matmul_backward, dla, lg ? lg + bh : NULL, NULL, half ? du : dg, la, tf->lora_params + bh, DT_F32, n, R,
               Fe, s, 0.0f);
            OP(matmul_backward, dx, lg ? lg + ao : NULL, NULL, dla, x, tf->lora_params + ao, DT_F32, n, C, R, 1.0f,
               1.0f);
        }
    }
    // the gather's backward: each token's K grouped rows summed into its row
    OP(moe_combine_forward, dxin, dxg, NULL, a->gpos, T, K, C, dx_beta);
    // the router: logits = x Wr^T, through the weights' softmax
    OP(moe_route_backward, tf->drlog, tf->drw, a->rlog, a->ridx, a->rw, T, E, K, c->norm_topk_prob ? 1 : 0);
    if (proj_backward(tf, dxin, lg, bg, PARAM_ROUTER, PARAM_ROUTER_BIAS, tf->drlog, xin, a->la[LORA_ROUTER], T, C, E, l,
                      LORA_ROUTER, 1.0f, err) < 0)
        return -1;
    return 0;
}
