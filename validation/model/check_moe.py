"""Validates pail's mixtures of experts (src/model/moe_mlp.c through
build/tools/model_driver and build/tools/rollout_driver) against Hugging Face
transformers + PEFT (target_parameters on the fused expert tensors). For a tiny
random checkpoint of each MoE model_type (gpt_oss with its sinks, biases,
clamped SwiGLU and YaRN), saved by transformers' save_pretrained (per-expert
tensors, or granitemoe's and gpt_oss's fused ones) and loaded by
pail from the same folder, with the router's weights scaled up so that no two
experts' logits are within float rounding of each other (the choice has no
gradient; a near tie could route differently on each side):

- per-token log-probs of packed rows (3 sequences in one row for pail, each run
  alone by transformers): max abs error <= 1e-4 at temperature 1 and 0.7;
- full fine-tuning gradients of every base weight (router, experts, shared
  expert and its gate included): relative error <= 1e-3 per tensor;
- LoRA on attention, both expert projections (PEFT's ParamWrapper: one adapter
  per expert), the router and qwen2_moe's shared expert, random non-zero A and B: log-probs
  <= 1e-4, A and B gradients <= 1e-4 relative, with and without per-layer
  recomputation;
- generation through the paged KV cache: greedy equals transformers' generate
  token for token, sampled tokens' log-probs equal a full forward (<= 1e-4).
Usage: check_moe.py DRIVER GEN_DRIVER WORKDIR -> "model-moe: N passed, N failed"
(CHECK_MOE_ONLY=qwen2_moe: the variants whose name starts so)."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

torch.set_num_threads(2)
torch.manual_seed(0)
DRIVER, GEN_DRIVER, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pail_files import base_sha256  # noqa: E402
from hf_checks import counts, generation, rel, report, torch_logprobs  # noqa: E402
from hf_checks import run_json as run  # noqa: E402
E, K, FE = 8, 2, 32


def variants():
    common = dict(vocab_size=211, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=None,
                  eos_token_id=None, pad_token_id=None)
    # Qwen3-30B-A3B's layout: per-head q/k norms, the K weights renormalised (norm_topk_prob)
    yield "qwen3_moe-norm-topk", AutoConfig.for_model(
        "qwen3_moe", **common, head_dim=16, intermediate_size=96, moe_intermediate_size=FE, num_experts=E,
        num_experts_per_tok=K, norm_topk_prob=True)
    # Qwen1.5/2-MoE: q/k/v bias, the softmax's own probabilities (norm_topk_prob false), a shared
    # expert of its own width under a sigmoid gate
    yield "qwen2_moe-shared-expert", AutoConfig.for_model(
        "qwen2_moe", **common, intermediate_size=96, moe_intermediate_size=FE, shared_expert_intermediate_size=48,
        num_experts=E, num_experts_per_tok=K, norm_topk_prob=False)
    # OLMoE: q/k norms over the whole projection (GQA), softmax probabilities not renormalised
    yield "olmoe-qknorm", AutoConfig.for_model(
        "olmoe", **common, intermediate_size=FE, num_experts=E, num_experts_per_tok=K, norm_topk_prob=False)
    # Granite 3.x MoE: granite's four multipliers, top-k then softmax over the K chosen, tied
    yield "granitemoe-multipliers", AutoConfig.for_model(
        "granitemoe", **{**common, "tie_word_embeddings": True}, intermediate_size=FE, num_local_experts=E,
        num_experts_per_tok=K, embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.25,
        logits_scaling=8.0)
    # Mixtral: a window of 8 under 32-token sequences
    yield "mixtral-window8", AutoConfig.for_model(
        "mixtral", **common, intermediate_size=FE, num_local_experts=E, num_experts_per_tok=K, sliding_window=8)


    # gpt-oss: attention sinks, sliding (8, under 32-token sequences) and full layers, q/k/v/o biases,
    # router and expert biases, the clamped SwiGLU (limit 0.1 so that this tiny model's values clamp),
    # YaRN over original_max_position_embeddings 16 (factor 4, max_position_embeddings 64), the
    # fused, transposed, interleaved expert tensors
    yield "gpt_oss-sinks-yarn-clamp", AutoConfig.for_model(
        "gpt_oss", **{**common, "max_position_embeddings": 64}, head_dim=16, intermediate_size=FE, num_local_experts=E, num_experts_per_tok=K,
        sliding_window=8, layer_types=["sliding_attention", "full_attention"], swiglu_limit=0.1,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "original_max_position_embeddings": 16, "truncate": False})


LENS = {"mixtral": [32, 13, 20], "gpt_oss": [32, 13, 20]}


def randomize(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif "bias" in name:
                p.copy_(0.1 * torch.randn_like(p))
            elif name.endswith("mlp.gate.weight") or "router" in name:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5 * 4)  # logits ~ N(0, 16): no near ties
            elif name.endswith("sinks"):
                p.copy_(torch.randn_like(p))  # a sink near the scores' size: it takes a real share
            elif "shared_expert_gate" in name:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)


def to_hf(pname, g, shape):
    """pail's layout of an expert tensor's gradient into transformers' (gpt_oss's experts are transposed,
    gate and up interleaved; pail holds each expert's gate rows, then its up rows, as (out, in))."""
    if pname.endswith("experts.gate_up_proj") and GPT_OSS:
        e, c, f2 = shape
        return g.reshape(e, 2, f2 // 2, c).transpose(0, 3, 2, 1).reshape(e, c, f2)
    if pname.endswith("experts.gate_up_proj_bias") and GPT_OSS:
        e, f2 = shape
        return g.reshape(e, 2, f2 // 2).transpose(0, 2, 1).reshape(e, f2)
    if pname.endswith("experts.down_proj") and GPT_OSS:
        e, fe, c = shape
        return g.reshape(e, c, fe).transpose(0, 2, 1)
    return g.reshape(shape)


def file_grad(f, pname):
    """pail's full gradient of transformers parameter pname, in its shape."""
    # transformers' names in memory; pail's are the checkpoint's (granitemoe's input/output_linear and
    # router.layer, mixtral's block_sparse_moe) where those differ
    alts = [(".router.weight", ".router.layer.weight"), (".experts.gate_up_proj", ".input_linear.weight"),
            (".experts.down_proj", ".output_linear.weight"), (".mlp.", ".block_sparse_moe.")]
    cands = [pname, pname + ".weight"] + [pname.replace(a, b) for a, b in alts if a in pname]
    for c in cands:
        if c in f:
            return f[c][:]
    raise KeyError(f"no gradient for {pname} in pail's file (has {sorted(f.keys())[:8]}...)")


def expert_parts(cfg):
    """The fused expert parameters' path under a layer, and PEFT's target_parameters: both expert
    projections and the router's weight."""
    par = "block_sparse_moe" if cfg.model_type == "granitemoe" else "mlp"
    router = {"granitemoe": "block_sparse_moe.router", "gpt_oss": "mlp.router"}.get(cfg.model_type, "mlp.gate")
    return par, [f"{par}.experts.gate_up_proj", f"{par}.experts.down_proj", f"{router}.weight"]


def lora_tensors(peft_model, cfg, layer, C):
    """{(module, 'lora_A'|'lora_B'): (param, to_pail)}: PEFT's tensors of one layer, with the map to
    pail's layout (experts: A (E R, in) -> (E, R, in); B (out, R E) -> (E, out, R))."""
    out = {}
    par, _ = expert_parts(cfg)
    for n, p in peft_model.named_parameters():
        if "lora_" not in n or f"layers.{layer}." not in n:
            continue
        ab = "lora_A" if "lora_A" in n else "lora_B"
        if ".experts." in n:
            # nested ParamWrappers: tell gate_up (in = C) from down (in = Fe) by lora_A's width
            ina = dict(peft_model.named_parameters())[n.replace("lora_B", "lora_A")].shape[1]
            mod = "experts.gate_up_proj" if ina == C else "experts.down_proj"
            if ab == "lora_A":
                fn = lambda t: t.reshape(E, -1, t.shape[1])  # noqa: E731
            elif GPT_OSS and mod == "experts.gate_up_proj":  # out rows interleaved (2j gate, 2j + 1 up)
                fn = lambda t: torch.cat([(b := t.reshape(t.shape[0], -1, E).permute(2, 0, 1))[:, 0::2],  # noqa: E731
                                          b[:, 1::2]], dim=1)
            else:
                fn = lambda t: t.reshape(t.shape[0], -1, E).permute(2, 0, 1)  # noqa: E731
        else:
            mod = n.split(".")[-4]  # ...<module>.lora_A.default.weight (shared_expert.gate_proj: pail's gate_proj)
            if mod in ("gate", "router"):  # the router's ParamWrapper (mlp.gate, block_sparse_moe.router, mlp.router)
                mod = "router"
            fn = lambda t: t  # noqa: E731
        out[(mod, ab)] = (p, fn)
    return out


def write_adapter(peft_model, cfg, path, rank, alpha, base, modules):
    L, C = cfg.num_hidden_layers, cfg.hidden_size
    with h5py.File(path, "w") as f:
        f.attrs["format"] = np.bytes_("pail.lora")
        f.attrs["format_version"] = np.int64(1)
        for k, v in dict(version=0, step=0, rank=rank, use_rslora=0, num_layers=L, created_unix=0).items():
            f.attrs[k] = np.int64(v)
        f.attrs["alpha"] = np.float64(alpha)
        f.attrs["scaling"] = np.float64(alpha / rank)
        f.attrs["target_modules"] = np.array([m.encode() for m in modules])
        f.attrs["base_sha256"] = np.bytes_(base)
        for i in range(L):
            for (m, ab), (p, fn) in lora_tensors(peft_model, cfg, i, C).items():
                f[f"layers/{i}/{m}/{ab}"] = fn(p.detach()).contiguous().numpy()


ONLY = os.environ.get("CHECK_MOE_ONLY")
for name, cfg in variants():
    if ONLY and not name.startswith(ONLY):
        continue
    print(f"{name}:")
    GPT_OSS = cfg.model_type == "gpt_oss"
    d = os.path.join(WORK, name)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    randomize(model)
    model.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(len(name))
    lens = LENS.get(cfg.model_type, [7, 13, 4])
    seqs = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in lens]
    weights = [torch.randn(n - 1, generator=g).tolist() for n in lens]
    inp = os.path.join(d, "input.json")
    for temp in (1.0, 0.7):
        json.dump({"seqs": seqs, "weights": weights, "temperature": temp}, open(inp, "w"))
        full = temp == 1.0
        gpath = os.path.join(d, "full_grads.h5")
        got = run(DRIVER, ["--model", d, "--input", inp] + (["--grads", gpath, "--full"] if full else []),
                  "model_driver")
        model.zero_grad()
        ref = torch_logprobs(model, seqs, temp)
        err = max(float((torch.tensor(a) - b.detach()).abs().max()) for a, b in zip(got, ref))
        report(f"base logprobs, packed, T={temp}", err, 1e-4)
        if full:
            sum((torch.tensor(w) * lp).sum() for w, lp in zip(weights, ref)).backward()
            worst, wname = 0.0, ""
            with h5py.File(gpath) as f:
                for pname, p in model.named_parameters():
                    if pname == "lm_head.weight" and cfg.tie_word_embeddings:
                        continue
                    e = rel(to_hf(pname, file_grad(f, pname), tuple(p.shape)), p.grad.numpy())
                    if e > worst:
                        worst, wname = e, pname
            report(f"full fine-tuning grads (worst: {wname})", worst, 1e-3)
    # LoRA on attention, the experts (and qwen2_moe's shared expert), random non-zero A and B
    rank, alpha = 4, 8.0
    par, tparams = expert_parts(cfg)
    tmods = ["q_proj", "k_proj", "v_proj", "o_proj"]
    modules = tmods + ["experts.gate_up_proj", "experts.down_proj", "router"]
    if cfg.model_type == "qwen2_moe":
        tmods += ["gate_proj", "up_proj", "down_proj"]  # only the shared expert has these modules
        modules += ["gate_proj", "up_proj", "down_proj"]
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=tmods,
                                                  target_parameters=tparams, lora_dropout=0.0))
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if "lora_B" in pname:
                p.copy_(0.05 * torch.randn_like(p))
    apath = os.path.join(d, "adapter.h5")
    write_adapter(peft_model, cfg, apath, rank, alpha, base_sha256(d), modules)
    json.dump({"seqs": seqs, "weights": weights, "temperature": 1.0}, open(inp, "w"))
    peft_model.zero_grad()
    ref = torch_logprobs(peft_model, seqs, 1.0)
    sum((torch.tensor(w) * lp).sum() for w, lp in zip(weights, ref)).backward()
    for extra, label in (([], ""), (["--recompute"], ", recompute")):
        gpath = os.path.join(d, "lora_grads.h5")
        got = run(DRIVER, ["--model", d, "--input", inp, "--adapter", apath, "--grads", gpath] + extra, "model_driver")
        err = max(float((torch.tensor(a) - b.detach()).abs().max()) for a, b in zip(got, ref))
        report(f"LoRA logprobs, packed{label}", err, 1e-4)
        worst, wname = 0.0, ""
        with h5py.File(gpath) as f:
            for i in range(cfg.num_hidden_layers):
                for (m, ab), (p, fn) in lora_tensors(peft_model, cfg, i, cfg.hidden_size).items():
                    e = rel(f[f"layers/{i}/{m}/{ab}"][:], fn(p.grad).numpy())
                    if e > worst:
                        worst, wname = e, f"layers/{i}/{m}/{ab}"
        report(f"LoRA A/B grads on attention and experts{label} (worst: {wname})", worst, 1e-4)
    ctl = os.environ.get("PAIL_CTL")
    if ctl:  # the PEFT round trip through grpo-ctl, and the merged checkpoint in transformers
        from peft import PeftModel
        lines = "".join(json.dumps({"ids": s}) + "\n" for s in seqs)
        out = subprocess.run([ctl, "logprobs", "--model", d, "--adapter", apath, "--input", "-"], input=lines,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"grpo-ctl logprobs failed: {out.stderr.strip()}")
        pail_lp = [json.loads(line)["logprobs"] for line in out.stdout.splitlines()]
        err = max(float((torch.tensor(a) - b.detach()).abs().max()) for a, b in zip(pail_lp, ref))
        report("grpo-ctl logprobs with the adapter", err, 1e-4)
        pdir = os.path.join(d, "peft-export")
        out = subprocess.run([ctl, "export", "--adapter", apath, "--out", pdir, "--model", d], capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise RuntimeError(f"grpo-ctl export failed: {out.stderr.strip()}")
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32), pdir)
        with torch.no_grad():
            lp = torch_logprobs(loaded, seqs, 1.0)
        err = max(float((torch.tensor(a) - b).abs().max()) for a, b in zip(pail_lp, lp))
        report("PEFT loads grpo-ctl export (target_parameters on the experts): logprobs equal pail's", err, 1e-4)
        sdir = os.path.join(d, "peft-saved")
        peft_model.save_pretrained(sdir)
        out = subprocess.run([ctl, "logprobs", "--model", d, "--adapter", sdir, "--input", "-"], input=lines,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"grpo-ctl logprobs with a PEFT folder failed: {out.stderr.strip()}")
        got = [json.loads(line)["logprobs"] for line in out.stdout.splitlines()]
        err = max(float((torch.tensor(a) - b.detach()).abs().max()) for a, b in zip(got, ref))
        report("a PEFT-saved adapter read by pail: logprobs equal PEFT's", err, 1e-4)
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
    generation(GEN_DRIVER, d, cfg, g)

print(f"model-moe: {counts['passed']} passed, {counts['failed']} failed")
sys.exit(1 if counts["failed"] else 0)
