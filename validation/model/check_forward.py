"""Validates pail's decoder (src/model/transformer.c, through
build/tools/model_driver) against Hugging Face transformers + PEFT, the code
users run. For random tiny checkpoints of each model_type (GQA, q/k/v bias,
attention_bias, qwen3 q/k norm, tied and untied embeddings, llama3 rope
scaling, mistral's sliding window W = 8 under 32-token sequences, exaone's own
tensor names, granite's multipliers, olmo2's post-norms and whole-projection q/k
norms, smollm3's layer without RoPE, phi3's fused qkv_proj / gate_up_proj and their
fused LoRA modules, partial rotary, longrope on both sides of its switch, cohere's parallel block, LayerNorms and
paired RoPE, cohere2's windowed and full layers, gemma3_text's sandwich norms with a
sliding and a global layer on two RoPE bases, gemma2 with its two softcaps), saved with
save_pretrained and loaded by pail from the same folder:

- per-token log-probs of packed rows (3 sequences of different lengths in one
  row for pail; each sequence run separately by transformers): max abs error
  <= 1e-4 in fp32, at temperature 1 and 0.7;
- LoRA A and B gradients of sum_t w_t * logp_t (random w; random NON-zero B, as
  with PEFT's B = 0 the gradient of A is exactly zero and could not fail):
  relative error <= 1e-4 per tensor (max abs diff / max abs value);
- full fine-tuning gradients of every base weight (no adapter): same bound;
- the same LoRA gradients with per-layer activation recomputation;
- with grpo-ctl (PAIL_CTL): grpo-ctl logprobs, the PEFT export and merge, a
  PEFT-saved adapter read by pail;
- for the families added since (FULL_CHECKS): the checkpoint saved in bf16,
  pail holding bf16 weights on its exact path (PAIL_KERNELS_GEMM=exact) vs
  transformers fp32 on the upcast weights: <= 1e-3; generation through the
  paged KV cache (prefill + decode, GEN_DRIVER = build/tools/rollout_driver):
  greedy equals transformers' generate token for token, and the log-probs
  stored with sampled tokens equal a full transformers forward (<= 1e-4).
Usage: check_forward.py DRIVER WORKDIR [GEN_DRIVER] -> "model-forward: N passed, N failed"
(CHECK_FORWARD_ONLY=mistral: the variants whose name starts so)."""
import copy
import json
import os
import subprocess
import sys

import h5py
import torch
from peft import LoraConfig, get_peft_model
from transformers import (AutoModelForCausalLM, ExaoneConfig, GraniteConfig, LlamaConfig, MistralConfig, Olmo2Config,
                          Phi3Config, Qwen2Config, Qwen3Config, SmolLM3Config)
from transformers import Cohere2Config, CohereConfig
from transformers import Gemma2Config, Gemma3TextConfig

torch.set_num_threads(2)
torch.manual_seed(0)
DRIVER, WORK = sys.argv[1], sys.argv[2]
GEN_DRIVER = sys.argv[3] if len(sys.argv) > 3 else None
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pail_files import MODULES, PHI3_MODULES, base_sha256, write_pail_adapter  # noqa: E402
from hf_checks import counts, generation, rel, report, torch_logprobs  # noqa: E402
def variants():
    common = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=256, rms_norm_eps=1e-5)
    yield "llama-gqa-untied-rope-llama3-bias", LlamaConfig(
        **common, num_key_value_heads=2, tie_word_embeddings=False, attention_bias=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16}, rope_theta=500000.0)
    yield "qwen2-tied-qkv-bias", Qwen2Config(**common, num_key_value_heads=2, tie_word_embeddings=True)
    yield "qwen3-qk-norm-untied-headdim", Qwen3Config(**common, num_key_value_heads=1, head_dim=24,
                                                      tie_word_embeddings=False)
    yield "llama-mha-tied", LlamaConfig(**common, num_key_value_heads=4, tie_word_embeddings=True)
    # a window far shorter than the 32-token sequence: most rows see 8 keys only;
    # no eos, so generate runs its full length as pail's driver does
    yield "mistral-window8-gqa", MistralConfig(**common, num_key_value_heads=2, sliding_window=8,
                                               tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
    # EXAONE 3.5's shape of config: llama3 rope, its own tensor names in the files (transformers 5 renames
    # them to llama's on load, back on save); biases to exercise out_proj's
    yield "exaone-rope-llama3-bias", ExaoneConfig(
        **common, num_key_value_heads=2, tie_word_embeddings=False, attention_bias=True, bos_token_id=None,
        eos_token_id=None, pad_token_id=None,
        rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16, "rope_theta": 1000000.0})
    # Granite 3.x's four multipliers (its values but attention_multiplier, larger so the tiny model's
    # scores are not all ~0), tied
    yield "granite-multipliers-tied", GraniteConfig(
        **common, num_key_value_heads=2, tie_word_embeddings=True, embedding_multiplier=12.0,
        residual_multiplier=0.22, attention_multiplier=0.25, logits_scaling=8.0, bos_token_id=None,
        eos_token_id=None, pad_token_id=None)
    # OLMo 2: norms after the sub-blocks, q/k norms over the whole projection (GQA: Hkv*D != H*D).
    # No attention_bias: with HF's 0.02 init a 0.1 bias dominates k, the normed keys are nearly
    # alike and the q/k gradients lose digits to cancellation (transformers' own fp32 gradients are
    # then 1e-5..6e-5 from float64, pail's up to 1.2e-4; both fine here, measured 2026-12-03)
    yield "olmo2-postnorm-gqa", Olmo2Config(**common, num_key_value_heads=2, tie_word_embeddings=False,
                                            bos_token_id=None, eos_token_id=None, pad_token_id=None)
    # SmolLM3: layer 1 of 2 without RoPE (its no_rope_layers; the default interval 4 would leave none here), tied
    yield "smollm3-nope-tied", SmolLM3Config(**common, num_key_value_heads=2, no_rope_layers=[1, 0],
                                             bos_token_id=None, eos_token_id=None, pad_token_id=None)
    # Phi-3: fused qkv_proj / gate_up_proj (LoRA on PEFT's fused modules: one A for q, k, v), MHA, full
    # RoPE, no window, no scaling
    yield "phi3-plain", Phi3Config(**common, num_key_value_heads=4, tie_word_embeddings=False,
                                   bos_token_id=None, eos_token_id=None, pad_token_id=None)
    # Phi-4-mini's partial_rotary_factor 0.75 (12 of D = 16 dims rotated), GQA, a window of 8 under
    # 32-token sequences (Phi-3-mini's sliding_window, smaller), Phi-3.5's longrope with
    # original_max_position_embeddings 16: the 13-token sequence runs on short_factor, the 32- and
    # 20-token ones on long_factor (transformers' rule: max position + 1 > 16), cos/sin times
    # sqrt(1 + ln(256/16) / ln 16)
    yield "phi3-gqa-partial-window-longrope", Phi3Config(
        **common, num_key_value_heads=2, tie_word_embeddings=False, partial_rotary_factor=0.75, sliding_window=8,
        original_max_position_embeddings=16,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.7, 2.2, 2.9],
                      "long_factor": [1.0, 1.5, 3.0, 6.0, 11.0, 23.0]},
        bos_token_id=None, eos_token_id=None, pad_token_id=None)

    # Command-R / Command-R+: the parallel block under one LayerNorm (no bias), per-head q/k LayerNorms
    # (use_qk_norm, (H, D) / (Hkv, D) weights), RoPE on adjacent pairs, attention_bias on q/k/v/o,
    # logits * logit_scale (0.3: not a power of two), tied, GQA
    cohere_common = {k: v for k, v in common.items() if k != "rms_norm_eps"}
    yield "cohere-qknorm-bias-gqa-tied", CohereConfig(
        **cohere_common, layer_norm_eps=1e-5, num_key_value_heads=2, use_qk_norm=True, attention_bias=True,
        logit_scale=0.3, tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    # Command R7B / Command A: cohere's block; layers 0 and 2 windowed (8 keys, under 32-token sequences)
    # with RoPE, 1 and 3 full attention without RoPE; logit_scale 0.3, tied. No attention_bias (the
    # cohere variant has it): without RoPE a k bias adds q.b to every score of a row, which softmax
    # cancels, so its exact gradient is 0 and both sides' are rounding noise (relative error ~1)
    yield "cohere2-window8-4layers", Cohere2Config(
        **{**cohere_common, "num_hidden_layers": 4}, layer_norm_eps=1e-5, num_key_value_heads=2,
        logit_scale=0.3, sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})

    # Gemma 3 (text): sandwich norms scaled by 1 + w, q/k norms, GeGLU, sqrt(C) embeddings, scores scaled
    # by query_pre_attn_scalar^-0.5 (24, not D = 16), a sliding layer (W = 8 under 32-token sequences,
    # RoPE base 10^4) and a global one (base 10^6, linear scaling x4), tied
    yield "gemma3_text-window8-linear-rope", Gemma3TextConfig(
        **common, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], bos_token_id=None, eos_token_id=None,
        pad_token_id=None, rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                            "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                               "rope_theta": 1000000.0}})
    # Gemma 2: gemma3's layer without q/k norms, one RoPE table; 3 layers in Gemma2Config's default
    # pattern (sliding, full, sliding), W = 8, untied; softcaps small enough to bend this tiny model's
    # scores (~0.1) and logits (~0.3): tanh is far from linear there
    yield "gemma2-window8-softcap", Gemma2Config(
        **dict(common, num_hidden_layers=3), num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=32,
        sliding_window=8, attn_logit_softcapping=0.1, final_logit_softcapping=0.2, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)



# variants checked on the bf16 exact path and through generation too
FULL_CHECKS = ("mistral", "exaone", "granite", "smollm3", "olmo2", "phi3", "cohere", "cohere2", "gemma3_text", "gemma2")


def file_name(pname, model_type):
    """The checkpoint's name of a transformers parameter (exaone files keep EXAONE's names)."""
    if model_type != "exaone":
        return pname
    for a, b in (("model.embed_tokens.", "transformer.wte."), ("model.layers.", "transformer.h."),
                 ("model.norm.", "transformer.ln_f."), (".self_attn.o_proj.", ".attn.attention.out_proj."),
                 (".self_attn.", ".attn.attention."), (".input_layernorm.", ".ln_1."),
                 (".post_attention_layernorm.", ".ln_2."), (".mlp.gate_proj.", ".mlp.c_fc_0."),
                 (".mlp.up_proj.", ".mlp.c_fc_1."), (".mlp.down_proj.", ".mlp.c_proj.")):
        pname = pname.replace(a, b)
    return pname
# sequence lengths of the packed row: longer than a variant's window
LENS = {"mistral": [32, 13, 20], "phi3": [32, 13, 20], "cohere2": [32, 13, 20], "gemma3_text": [32, 13, 20],
        "gemma2": [32, 13, 20]}


def randomize(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))  # non-trivial norm weights
            elif "bias" in name:
                p.copy_(0.1 * torch.randn_like(p))


def run_driver(args):
    out = subprocess.run([DRIVER] + args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"model_driver failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def packed_inputs(vocab, lens, g):
    seqs = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]
    weights = [torch.randn(n - 1, generator=g).tolist() for n in lens]
    return seqs, weights


def bf16_exact(model, d, seqs):
    """The checkpoint in bf16: pail holds the weights as bf16 on its exact path,
    transformers runs fp32 on the same weights upcast."""
    bdir = os.path.join(d, "bf16")
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(bdir, safe_serialization=True)
    lines = "".join(json.dumps({"ids": s}) + "\n" for s in seqs)
    ref_model = AutoModelForCausalLM.from_pretrained(bdir, dtype=torch.float32)
    with torch.no_grad():
        ref = torch_logprobs(ref_model, seqs, 1.0)
    out = subprocess.run([os.environ["PAIL_CTL"], "logprobs", "--model", bdir, "--input", "-"], input=lines,
                         capture_output=True, text=True, env=dict(os.environ, PAIL_KERNELS_GEMM="exact"))
    if out.returncode != 0:
        raise RuntimeError(f"grpo-ctl logprobs (bf16) failed: {out.stderr.strip()}")
    got = [json.loads(l)["logprobs"] for l in out.stdout.splitlines()]
    err = max(float((torch.tensor(a) - b).abs().max()) for a, b in zip(got, ref))
    report("bf16 weights, exact path: logprobs vs transformers fp32 on the upcast weights", err, 1e-3)


ONLY = os.environ.get("CHECK_FORWARD_ONLY")  # a name prefix: one family while working on it
for name, cfg in variants():
    if ONLY and not name.startswith(ONLY):
        continue
    print(f"{name}:")
    d = os.path.join(WORK, name)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    randomize(model)
    model.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(len(name))
    seqs, weights = packed_inputs(cfg.vocab_size, LENS.get(cfg.model_type, [7, 13, 4]), g)
    inp = os.path.join(d, "input.json")
    # --- base model log-probs at two temperatures, and full fine-tuning grads
    for temp in (1.0, 0.7):
        json.dump({"seqs": seqs, "weights": weights, "temperature": temp}, open(inp, "w"))
        full = temp == 1.0
        gpath = os.path.join(d, "full_grads.h5")
        got = run_driver(["--model", d, "--input", inp] + (["--grads", gpath, "--full"] if full else []))
        model.zero_grad()
        ref = torch_logprobs(model, seqs, temp)
        err = max(float((torch.tensor(a) - b.detach()).abs().max()) for a, b in zip(got, ref))
        report(f"base logprobs, packed, T={temp}", err, 1e-4)
        if full:
            loss = sum((torch.tensor(w) * lp).sum() for w, lp in zip(weights, ref))
            loss.backward()
            worst, wname = 0.0, ""
            with h5py.File(gpath) as f:
                for pname, p in model.named_parameters():
                    if pname == "lm_head.weight" and cfg.tie_word_embeddings:
                        continue
                    e = rel(f[file_name(pname, cfg.model_type)][:], p.grad.numpy())
                    if e > worst:
                        worst, wname = e, pname
            report(f"full fine-tuning grads (worst: {wname})", worst, 1e-3)
    if os.environ.get("PAIL_CTL") and cfg.model_type in FULL_CHECKS:
        bf16_exact(model, d, seqs)
    # --- LoRA on all seven projections with random non-zero A and B
    rank, alpha = 4, 8.0
    modules = PHI3_MODULES if cfg.model_type == "phi3" else MODULES
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=modules,
                                                  lora_dropout=0.0, init_lora_weights=True))
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if "lora_B" in pname:
                p.copy_(0.05 * torch.randn_like(p))
    apath = os.path.join(d, "adapter.h5")
    write_pail_adapter(peft_model, apath, cfg.num_hidden_layers, rank, alpha, base_sha256(d), modules)
    json.dump({"seqs": seqs, "weights": weights, "temperature": 1.0}, open(inp, "w"))
    peft_model.zero_grad()
    ref = torch_logprobs(peft_model, seqs, 1.0)
    loss = sum((torch.tensor(w) * lp).sum() for w, lp in zip(weights, ref))
    loss.backward()
    for extra, label in (([], ""), (["--recompute"], ", recompute")):
        gpath = os.path.join(d, "lora_grads.h5")
        got = run_driver(["--model", d, "--input", inp, "--adapter", apath, "--grads", gpath] + extra)
        err = max(float((torch.tensor(a) - b.detach()).abs().max()) for a, b in zip(got, ref))
        report(f"LoRA logprobs, packed{label}", err, 1e-4)
        worst, wname = 0.0, ""
        with h5py.File(gpath) as f:
            for pname, p in peft_model.named_parameters():
                if "lora_" not in pname:
                    continue
                parts = pname.split(".")
                i, m, ab = parts[4], parts[6], parts[7]
                e = rel(f[f"layers/{i}/{m}/{ab}"][:], p.grad.numpy())
                if e > worst:
                    worst, wname = e, f"layers/{i}/{m}/{ab}"
        report(f"LoRA A/B grads{label} (worst: {wname})", worst, 1e-4)
    ctl = os.environ.get("PAIL_CTL")
    if ctl:  # the user-facing command gives the same log-probs
        lines = "".join(json.dumps({"ids": s}) + "\n" for s in seqs)
        budget = 16 if max(map(len, seqs)) <= 17 else 40  # rows of 16 tokens where every sequence fits
        out = subprocess.run([ctl, "logprobs", "--model", d, "--adapter", apath, "--input", "-",
                              "--token-budget", str(budget)], input=lines, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"grpo-ctl logprobs failed: {out.stderr.strip()}")
        got = [json.loads(l)["logprobs"] for l in out.stdout.splitlines()]
        err = max(float((torch.tensor(a) - b.detach()).abs().max()) for a, b in zip(got, ref))
        report(f"grpo-ctl logprobs (packed in rows of {budget} tokens)", err, 1e-4)
        pail_lp = got
        # Export to PEFT: PEFT loads the folder onto a fresh transformers model
        # and gives pail's log-probs.
        from peft import PeftModel
        pdir = os.path.join(d, "peft-export")
        out = subprocess.run([ctl, "export", "--adapter", apath, "--out", pdir, "--model", d],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"grpo-ctl export failed: {out.stderr.strip()}")
        fresh = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        loaded = PeftModel.from_pretrained(fresh, pdir)
        with torch.no_grad():
            lp = torch_logprobs(loaded, seqs, 1.0)
        err = max(float((torch.tensor(a) - b).abs().max()) for a, b in zip(pail_lp, lp))
        report("PEFT loads grpo-ctl export: logprobs equal pail's", err, 1e-4)
        # --merge: transformers loads the merged checkpoint.
        mdir = os.path.join(d, "merged")
        out = subprocess.run([ctl, "export", "--adapter", apath, "--out", mdir, "--model", d, "--merge"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"grpo-ctl export --merge failed: {out.stderr.strip()}")
        merged = AutoModelForCausalLM.from_pretrained(mdir, dtype=torch.float32)
        with torch.no_grad():
            lp = torch_logprobs(merged, seqs, 1.0)
        err = max(float((torch.tensor(a) - b).abs().max()) for a, b in zip(pail_lp, lp))
        report("merged checkpoint in transformers: logprobs equal pail's", err, 1e-4)
        # The other way in: a folder saved by PEFT itself, read by pail.
        sdir = os.path.join(d, "peft-saved")
        peft_model.save_pretrained(sdir)
        out = subprocess.run([ctl, "logprobs", "--model", d, "--adapter", sdir, "--input", "-"],
                             input=lines, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"grpo-ctl logprobs with a PEFT folder failed: {out.stderr.strip()}")
        got = [json.loads(l)["logprobs"] for l in out.stdout.splitlines()]
        err = max(float((torch.tensor(a) - b.detach()).abs().max()) for a, b in zip(got, ref))
        report("a PEFT-saved adapter read by pail: logprobs equal PEFT's", err, 1e-4)
    longrope = (cfg.rope_parameters or {}).get("rope_type") == "longrope"
    if GEN_DRIVER and cfg.model_type in FULL_CHECKS and not longrope:
        generation(GEN_DRIVER, d, cfg, g)
    elif GEN_DRIVER and longrope:
        # long_factor from the prefill on (prompts past original_max 16), short_factor throughout
        # (3 + 12 tokens); a sequence crossing 16 in decode, where transformers recomputes the
        # whole cache with long_factor, is refused by name
        omax = cfg.original_max_position_embeddings
        generation(GEN_DRIVER, d, cfg, g, (20, omax + 1), 24)
        generation(GEN_DRIVER, d, cfg, g, (3,), omax - 3)
        ppath = os.path.join(d, "prompts.json")
        json.dump({"prompts": [[1, 2, 3]]}, open(ppath, "w"))
        out = subprocess.run([GEN_DRIVER, "--model", d, "--input", ppath, "--group", "1", "--max-new", "24",
                              "--temperature", "0"], capture_output=True, text=True)
        ok = out.returncode != 0 and "cross phi3's longrope original_max_position_embeddings 16" in out.stderr
        report("decode crossing original_max_position_embeddings refused by name (0 = refused)", 0 if ok else 1, 0)

print(f"model-forward: {counts['passed']} passed, {counts['failed']} failed")
sys.exit(1 if counts["failed"] else 0)
