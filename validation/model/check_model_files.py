#!/usr/bin/env python3
"""pail's Hugging Face model files against transformers (the independent reference).

(a) Checkpoints pail writes (`grpo-ctl init-model`) load in transformers'
    AutoModelForCausalLM with no missing / unexpected / mismatched keys, a forward
    pass runs, and pail's `model-info --sums` reads the same values torch does.
(b) Checkpoints transformers writes (save_pretrained: f32, bf16, f16, sharded,
    tied / untied, q/k/v bias, qwen3 and olmo2 q/k norms, llama3 rope scaling, exaone names, granite, smollm3, mistral
    windows and null, phi3's fused qkv_proj / gate_up_proj with longrope and partial
    rotary, cohere's (H, D) q/k norms, cohere2's layer_types, the mixtures of experts qwen3_moe,
    qwen2_moe, olmoe and mixtral with per-expert tensors, granitemoe's fused ones and gpt_oss's
    transposed, interleaved ones with their biases, sinks and YaRN) load in pail
    with every tensor's fp32 values bit-identical to torch's (sha256 of the fp32
    bytes) and the same config fields, parameter count and base_sha256 (the
    format doc/models.md defines, recomputed here from the files).
(c) --big: the Qwen2.5-0.5B shape (bf16, ~1 GB) generated, checked and loaded.

Usage: python check_model_files.py --grpo-ctl bin/grpo-ctl --work DIR [--big]
Prints one line per check and "model-files: N passed, N failed"; exits 1 on failure.
"""
import argparse, hashlib, json, math, os, re, shutil, subprocess, sys, time
import warnings

import torch
import transformers
from transformers import (AutoConfig, AutoModelForCausalLM, ExaoneConfig, GraniteConfig, LlamaConfig, MistralConfig,
                          Olmo2Config, Phi3Config, Qwen2Config, Qwen3Config, SmolLM3Config)
from transformers import Cohere2Config, CohereConfig
from transformers import Gemma2Config, Gemma3TextConfig
from transformers import GraniteMoeConfig, MixtralConfig, OlmoeConfig, Qwen2MoeConfig, Qwen3MoeConfig
from transformers import GptOssConfig

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
warnings.filterwarnings("ignore")

passed = failed = 0


def report(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def model_info(ctl, d):
    """Runs grpo-ctl model-info --sums; returns (fields dict, {tensor: (sha, sum)})."""
    r = subprocess.run([ctl, "model-info", "--model", d, "--sums"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"model-info {d} exit {r.returncode}: {r.stderr.strip()}")
    fields, sums = {}, {}
    for line in r.stdout.splitlines():
        if line.startswith("tensor "):
            _, name, sha, s = line.split(" ")
            sums[name] = (sha.split("=", 1)[1], float(s.split("=", 1)[1]))
        elif ": " in line:
            k, v = line.split(": ", 1)
            fields.setdefault(k, v)
    return fields, sums


def f32_sha(t):
    return hashlib.sha256(t.detach().to(torch.float32).contiguous().cpu().numpy().tobytes()).hexdigest()


def base_sha256(d):
    """doc/models.md: sha256 over `sha256sum` lines "<hex>  <file>\\n" of the weight files sorted by name."""
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    lines = ""
    for f in sorted(files, key=lambda s: s.encode()):
        lines += hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest() + "  " + f + "\n"
    return hashlib.sha256(lines.encode()).hexdigest()


# EXAONE files keep EXAONE's tensor names; transformers 5 renames them to llama's on
# load (conversion_mapping.py "exaone"): the same renames, file name -> torch name.
EXAONE_RENAMES = [(r"^transformer\.wte\.", "model.embed_tokens."), (r"^transformer\.h\.", "model.layers."),
                  (r"^transformer\.ln_f\.", "model.norm."), (r"\.attn\.attention\.", ".self_attn."),
                  (r"\.self_attn\.out_proj\.", ".self_attn.o_proj."), (r"\.ln_1\.", ".input_layernorm."),
                  (r"\.ln_2\.", ".post_attention_layernorm."), (r"\.mlp\.c_fc_0\.", ".mlp.gate_proj."),
                  (r"\.mlp\.c_fc_1\.", ".mlp.up_proj."), (r"\.mlp\.c_proj\.", ".mlp.down_proj.")]


# The MoE routers and granitemoe's fused experts: pail reports the file's name, torch holds them under
# transformers 5's (the per-expert families pail reports as torch's fused gate_up_proj / down_proj).
MOE_RENAMES = {"mixtral": [(r"\.block_sparse_moe\.gate\.weight$", ".mlp.gate.weight")],
               "granitemoe": [(r"\.router\.layer\.weight$", ".router.weight"),
                              (r"\.input_linear\.weight$", ".experts.gate_up_proj"),
                              (r"\.output_linear\.weight$", ".experts.down_proj")]}


def torch_name(t, model_type):
    renames = EXAONE_RENAMES if model_type == "exaone" else MOE_RENAMES.get(model_type, [])
    for a, b in renames:
        t = re.sub(a, b, t)
    return t


def compare_values(name, model, fields, sums, d):
    """Every tensor pail reports equals torch's, bit for bit after conversion to fp32."""
    sd = model.state_dict()
    bad = []
    sums = {torch_name(t, model.config.model_type): v for t, v in sums.items()}
    for t, (sha, s) in sums.items():
        if t not in sd:
            bad.append(f"{t} not in torch's state_dict")
            continue
        if f32_sha(sd[t]) != sha:
            bad.append(f"{t}: fp32 sha256 differs")
        ts = sd[t].double().sum().item()
        if abs(ts - s) > 1e-9 * max(1.0, sd[t].double().abs().sum().item()):
            bad.append(f"{t}: sum {s} vs torch {ts}")
    # pail must report every tensor torch has (lm_head only when untied)
    tied = model.config.tie_word_embeddings
    want = {k for k in sd if not (tied and k == "lm_head.weight") and "rotary_emb" not in k}
    missing = want - set(sums)
    if missing:
        bad.append(f"pail did not report {sorted(missing)[:3]}")
    nparams = sum(p.numel() for p in model.parameters())  # unique parameters: tied counted once
    if int(fields["parameters"]) != nparams:
        bad.append(f"parameters {fields['parameters']} vs torch {nparams}")
    if fields["base_sha256"] != base_sha256(d):
        bad.append(f"base_sha256 {fields['base_sha256']} vs recomputed {base_sha256(d)}")
    report(f"{name}: values, parameter count, base_sha256", not bad, "; ".join(bad[:5]))


def compare_config(name, cfg, fields):
    rp = getattr(cfg, "rope_parameters", None) or {}
    if cfg.model_type == "gemma3_text":  # the global layers' (the sliding ones' base is checked below)
        rp = rp.get("full_attention", {})
    theta = rp.get("rope_theta", getattr(cfg, "rope_theta", None))
    rtype = rp.get("rope_type", "default")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    want = {
        "model_type": cfg.model_type, "hidden_size (C)": cfg.hidden_size,
        "intermediate_size (F)": cfg.intermediate_size, "num_hidden_layers (L)": cfg.num_hidden_layers,
        "num_attention_heads (H)": cfg.num_attention_heads, "num_key_value_heads (Hkv)": cfg.num_key_value_heads,
        "head_dim (D)": head_dim, "vocab_size (V)": cfg.vocab_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": str(bool(cfg.tie_word_embeddings)).lower(),
    }
    bad = [f"{k}: pail {fields.get(k)} vs {v}" for k, v in want.items() if fields.get(k) != str(v)]
    if abs(float(fields["rope_theta"]) - theta) > 1e-6 * theta:
        bad.append(f"rope_theta {fields['rope_theta']} vs {theta}")
    eps = cfg.layer_norm_eps if cfg.model_type in ("cohere", "cohere2") else cfg.rms_norm_eps  # cohere: LayerNorm's
    if abs(float(fields["rms_norm_eps"]) - eps) > 1e-6 * eps:
        bad.append(f"rms_norm_eps {fields['rms_norm_eps']} vs {eps}")
    if rtype == "llama3":
        want_rs = "llama3 factor=%g low_freq_factor=%g high_freq_factor=%g original_max=%d" % (
            rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"])
        if fields["rope_scaling"] != want_rs:
            bad.append(f"rope_scaling '{fields['rope_scaling']}' vs '{want_rs}'")
    elif rtype == "longrope":  # phi3: original_max is Phi3Config's top-level field
        want_rs = "longrope original_max=%d " % cfg.original_max_position_embeddings
        if not fields["rope_scaling"].startswith(want_rs):
            bad.append(f"rope_scaling '{fields['rope_scaling']}' vs '{want_rs}...'")
    elif rtype == "yarn":  # gpt_oss: _compute_yarn_parameters' reading of the fields
        f = rp["factor"] or cfg.max_position_embeddings / rp["original_max_position_embeddings"]
        af = rp.get("attention_factor") or (0.1 * math.log(f) + 1.0 if f > 1 else 1.0)
        want_rs = "yarn factor=%g original_max=%d beta_fast=%g beta_slow=%g truncate=%s attention_factor=%g" % (
            f, rp["original_max_position_embeddings"], rp.get("beta_fast") or 32, rp.get("beta_slow") or 1,
            str(bool(rp.get("truncate", True))).lower(), af)
        if fields["rope_scaling"] != want_rs:
            bad.append(f"rope_scaling '{fields['rope_scaling']}' vs '{want_rs}'")
    elif rtype == "linear":  # gemma3_text's global layers
        if fields.get("rope_scaling (full layers)") != "linear factor=%g" % rp["factor"]:
            bad.append(f"rope_scaling (full layers) {fields.get('rope_scaling (full layers)')} vs {rp['factor']}")
    elif fields["rope_scaling"] != "none":
        bad.append(f"rope_scaling {fields['rope_scaling']} vs none")
    if cfg.model_type == "granite":  # the four multipliers
        for k in ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"):
            if abs(float(fields.get(k, "nan")) - getattr(cfg, k)) > 1e-6 * abs(getattr(cfg, k)):
                bad.append(f"{k} {fields.get(k)} vs {getattr(cfg, k)}")
    if cfg.model_type == "smollm3":  # the layers without RoPE
        want_nr = " ".join(str(l) for l, r in enumerate(cfg.no_rope_layers) if not r) or "none"
        if fields.get("no_rope_layers") != want_nr:
            bad.append(f"no_rope_layers {fields.get('no_rope_layers')} vs {want_nr}")
    if cfg.model_type == "phi3":  # the rotated head dims (partial_rotary_factor)
        want_pr = "%d of %d head dims rotated" % (int(head_dim * rp.get("partial_rotary_factor", 1.0)), head_dim)
        if fields.get("partial_rotary") != want_pr:
            bad.append(f"partial_rotary {fields.get('partial_rotary')} vs {want_pr}")
    if cfg.model_type in ("mistral", "phi3"):  # the window on every layer; null: full attention
        want_sw = str(cfg.sliding_window) if cfg.sliding_window else "none"
        if fields.get("sliding_window") != want_sw:
            bad.append(f"sliding_window {fields.get('sliding_window')} vs {want_sw}")
    if cfg.model_type in ("cohere", "cohere2"):  # logit_scale; use_qk_norm as qk_norm
        if abs(float(fields.get("logit_scale", "nan")) - cfg.logit_scale) > 1e-6 * cfg.logit_scale:
            bad.append(f"logit_scale {fields.get('logit_scale')} vs {cfg.logit_scale}")
        if fields.get("qk_norm") != str(bool(getattr(cfg, "use_qk_norm", False))).lower():
            bad.append(f"qk_norm {fields.get('qk_norm')} vs use_qk_norm {getattr(cfg, 'use_qk_norm', False)}")
    if cfg.model_type == "cohere2":  # the window, and the full_attention layers (no window, no RoPE)
        want_full = " ".join(str(l) for l, t in enumerate(cfg.layer_types) if t == "full_attention") or "none"
        if fields.get("full_attention_layers", "").strip() != want_full or fields.get("no_rope_layers") != want_full:
            bad.append(f"full_attention_layers {fields.get('full_attention_layers')} / no_rope_layers "
                       f"{fields.get('no_rope_layers')} vs {want_full}")
        if fields.get("sliding_window") != str(cfg.sliding_window):
            bad.append(f"sliding_window {fields.get('sliding_window')} vs {cfg.sliding_window}")
    if cfg.model_type in ("gemma2", "gemma3_text"):  # the window, which layers have it, the sliding layers' base
        want_sw = str(cfg.sliding_window) if cfg.sliding_window else "none"
        if fields.get("sliding_window") != want_sw:
            bad.append(f"sliding_window {fields.get('sliding_window')} vs {want_sw}")
        want_lt = " ".join("sliding" if t == "sliding_attention" and cfg.sliding_window else "full"
                           for t in cfg.layer_types)
        if fields.get("layer_types") != want_lt:
            bad.append(f"layer_types '{fields.get('layer_types')}' vs '{want_lt}'")
        for k in ("attn_logit_softcapping", "final_logit_softcapping"):
            want_cap = "%g" % getattr(cfg, k) if getattr(cfg, k) else "null"
            if fields.get(k) != want_cap:
                bad.append(f"{k} {fields.get(k)} vs {want_cap}")
        if cfg.model_type == "gemma3_text":
            local = cfg.rope_parameters["sliding_attention"]["rope_theta"]
            if abs(float(fields.get("rope_local_base_freq (sliding layers)", "nan")) - local) > 1e-6 * local:
                bad.append(f"rope_local_base_freq {fields.get('rope_local_base_freq (sliding layers)')} vs {local}")
    experts = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None)
    if experts:  # the mixtures of experts: E, K, Fe, the routing weights' normalisation, qwen2_moe's shared expert
        fe = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
        want_moe = {"num_experts (E)": experts, "num_experts_per_tok (K)": cfg.num_experts_per_tok,
                    "moe_intermediate_size (Fe)": fe,
                    "norm_topk_prob": str(bool(getattr(cfg, "norm_topk_prob", True))).lower(),
                    "shared_expert": "intermediate_size %d under a sigmoid gate" % cfg.shared_expert_intermediate_size
                    if cfg.model_type == "qwen2_moe" else "none"}
        bad += [f"{k}: pail {fields.get(k)} vs {v}" for k, v in want_moe.items() if fields.get(k) != str(v)]
    if cfg.model_type == "granitemoe":
        for k in ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"):
            if abs(float(fields.get(k, "nan")) - getattr(cfg, k)) > 1e-6 * abs(getattr(cfg, k)):
                bad.append(f"{k} {fields.get(k)} vs {getattr(cfg, k)}")
    if cfg.model_type == "gpt_oss":  # the window, which layers have it, the clamped SwiGLU
        want_sw = str(cfg.sliding_window) if cfg.sliding_window else "none"
        want_lt = " ".join("sliding" if t == "sliding_attention" and cfg.sliding_window else "full"
                           for t in cfg.layer_types)
        want_sg = "clamped, alpha %g, limit %g" % (cfg.swiglu_alpha, cfg.swiglu_limit)
        if fields.get("sliding_window") != want_sw or fields.get("layer_types") != want_lt or \
                not fields.get("swiglu", "").startswith(want_sg):
            bad.append(f"sliding_window {fields.get('sliding_window')} / layer_types {fields.get('layer_types')} / "
                       f"swiglu {fields.get('swiglu')} vs {want_sw} / {want_lt} / {want_sg}")
        if not fields.get("attention_sinks") or fields.get("qkv_bias") != str(cfg.attention_bias).lower():
            bad.append(f"attention_sinks {fields.get('attention_sinks')} qkv_bias {fields.get('qkv_bias')}")
    if cfg.model_type == "mixtral":
        want_sw = str(cfg.sliding_window) if cfg.sliding_window else "none"
        if fields.get("sliding_window") != want_sw:
            bad.append(f"sliding_window {fields.get('sliding_window')} vs {want_sw}")
    report(f"{name}: config fields", not bad, "; ".join(bad))


def load_hf(d, dtype=torch.float32):
    model, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True, dtype=dtype)
    return model, info


def check_pail_written(ctl, work, name, args, tokdir=None):
    d = os.path.join(work, "pail-" + name)
    shutil.rmtree(d, ignore_errors=True)
    cmd = [ctl, "init-model", "--out", d] + args + (["--tokenizer", tokdir] if tokdir else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        report(f"pail-{name}: init-model", False, r.stderr.strip())
        return
    try:
        model, info = load_hf(d)
    except Exception as e:  # noqa: BLE001 - any failure is the finding
        report(f"pail-{name}: transformers loads it", False, repr(e)[:300])
        return
    problems = {k: v for k, v in info.items() if v}
    report(f"pail-{name}: transformers loads it, no missing/unexpected/mismatched keys", not problems, str(problems)[:300])
    ids = torch.tensor([[1, 5, 7, 11, 2, 3]])
    with torch.no_grad():
        logits = model(ids).logits
    report(f"pail-{name}: forward runs", logits.shape == (1, 6, model.config.vocab_size) and
           bool(torch.isfinite(logits).all()), str(logits.shape))
    fields, sums = model_info(ctl, d)
    compare_config(f"pail-{name}", model.config, fields)
    compare_values(f"pail-{name}", model, fields, sums, d)
    if tokdir:
        tok = transformers.AutoTokenizer.from_pretrained(d)
        ok = (tok.bos_token_id == model.config.bos_token_id and tok.eos_token_id == model.config.eos_token_id
              and tok.bos_token_id is not None)
        report(f"pail-{name}: tokenizer copied, bos/eos ids from it", ok,
               f"tokenizer {tok.bos_token_id}/{tok.eos_token_id} config {model.config.bos_token_id}/"
               f"{model.config.eos_token_id}")


def check_hf_written(ctl, work, name, cfg, dtype, shard=None):
    d = os.path.join(work, "hf-" + name)
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(len(name))
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for p in model.parameters():  # random everywhere: zero biases / unit norms would hide mix-ups
            p.normal_(0, 0.05)
    model = model.to(dtype)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(d, **kw)
    sharded = os.path.exists(os.path.join(d, "model.safetensors.index.json"))
    if shard and not sharded:
        report(f"hf-{name}: save_pretrained sharded", False, "no index written")
    try:
        fields, sums = model_info(ctl, d)
    except RuntimeError as e:
        report(f"hf-{name}: pail model-info", False, str(e)[:400])
        return
    report(f"hf-{name}: pail loads it ({fields.get('dtype')}, {len(sums)} tensors"
           f"{', %d shards' % sum(1 for k in os.listdir(d) if k.endswith('.safetensors')) if sharded else ''})",
           True)
    compare_config(f"hf-{name}", model.config, fields)
    compare_values(f"hf-{name}", model, fields, sums, d)


def make_tokenizer(d):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog " * 20], trainer)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    json.dump({"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "PreTrainedTokenizerFast",
               "model_max_length": 2048}, open(os.path.join(d, "tokenizer_config.json"), "w"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grpo-ctl", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--big", action="store_true", help="also the Qwen2.5-0.5B shape (~1 GB bf16, ~1 min)")
    a = ap.parse_args()
    ctl = os.path.abspath(a.grpo_ctl)
    os.makedirs(a.work, exist_ok=True)
    tokdir = os.path.join(a.work, "tokenizer")
    make_tokenizer(tokdir)

    # (a) pail writes, transformers reads
    tiny = ["--shape", "tiny"]
    check_pail_written(ctl, a.work, "llama-f32", tiny + ["--model-type", "llama", "--dtype", "f32"])
    check_pail_written(ctl, a.work, "llama-bias-rope3-bf16", tiny + ["--model-type", "llama", "--attention-bias",
                       "--rope-scaling", "llama3", "--rope-theta", "500000", "--max-positions", "131072"])
    check_pail_written(ctl, a.work, "qwen2-tied-bf16", tiny + ["--model-type", "qwen2", "--tie-embeddings"], tokdir)
    check_pail_written(ctl, a.work, "qwen2-f32", tiny + ["--model-type", "qwen2", "--dtype", "f32"])
    check_pail_written(ctl, a.work, "qwen3-headdim-bf16", tiny + ["--model-type", "qwen3", "--head-dim", "32"])
    check_pail_written(ctl, a.work, "qwen3-bias-tied-f32", tiny + ["--model-type", "qwen3", "--attention-bias",
                       "--tie-embeddings", "--dtype", "f32"])
    check_pail_written(ctl, a.work, "mistral-window8-bf16", tiny + ["--model-type", "mistral", "--sliding-window", "8"])
    check_pail_written(ctl, a.work, "mistral-nowindow-f32", tiny + ["--model-type", "mistral", "--sliding-window", "0",
                       "--dtype", "f32"])
    check_pail_written(ctl, a.work, "exaone-bias-rope3-f32", tiny + ["--model-type", "exaone", "--attention-bias",
                       "--rope-scaling", "llama3", "--rope-theta", "1000000", "--dtype", "f32"])
    check_pail_written(ctl, a.work, "granite-f32", tiny + ["--model-type", "granite", "--dtype", "f32"])
    check_pail_written(ctl, a.work, "olmo2-bf16", tiny + ["--model-type", "olmo2"])
    check_pail_written(ctl, a.work, "smollm3-4layers-bf16", tiny + ["--model-type", "smollm3", "--layers", "4"])
    check_pail_written(ctl, a.work, "phi3-partial-window8-bf16", tiny + ["--model-type", "phi3", "--sliding-window",
                       "8", "--partial-rotary-factor", "0.75"])
    check_pail_written(ctl, a.work, "phi3-f32", tiny + ["--model-type", "phi3", "--dtype", "f32"])
    check_pail_written(ctl, a.work, "cohere-qknorm-bias-bf16", tiny + ["--model-type", "cohere", "--qk-norm",
                       "--attention-bias", "--logit-scale", "0.3"])
    check_pail_written(ctl, a.work, "cohere2-4layers-window8-f32", tiny + ["--model-type", "cohere2", "--layers", "4",
                       "--sliding-window", "8", "--dtype", "f32"])
    check_pail_written(ctl, a.work, "gemma2-window8-3layers-bf16", tiny + ["--model-type", "gemma2", "--sliding-window",
                       "8", "--layers", "3"])
    check_pail_written(ctl, a.work, "gemma3_text-6layers-f32", tiny + ["--model-type", "gemma3_text", "--layers", "6",
                       "--dtype", "f32"])
    check_pail_written(ctl, a.work, "bench-llama-bf16", ["--shape", "bench"])
    # mixtures of experts: E 4, K 2 (tiny); the experts written per expert (granitemoe fused)
    check_pail_written(ctl, a.work, "qwen3_moe-normtopk-f32", tiny + ["--model-type", "qwen3_moe", "--norm-topk-prob",
                       "--dtype", "f32"])
    check_pail_written(ctl, a.work, "qwen2_moe-6experts-bf16", tiny + ["--model-type", "qwen2_moe", "--experts", "6",
                       "--experts-per-token", "3"])
    check_pail_written(ctl, a.work, "olmoe-f32", tiny + ["--model-type", "olmoe", "--dtype", "f32"])
    check_pail_written(ctl, a.work, "granitemoe-tied-bf16", tiny + ["--model-type", "granitemoe", "--tie-embeddings"])
    check_pail_written(ctl, a.work, "mixtral-window8-f32", tiny + ["--model-type", "mixtral", "--sliding-window", "8",
                       "--dtype", "f32"])
    # gpt_oss: transposed, interleaved experts, biases, sinks, YaRN; layers sliding, full, sliding
    check_pail_written(ctl, a.work, "gpt_oss-f32", tiny + ["--model-type", "gpt_oss", "--dtype", "f32"])
    check_pail_written(ctl, a.work, "gpt_oss-3layers-window4-6experts-bf16", tiny + [
        "--model-type", "gpt_oss", "--layers", "3", "--sliding-window", "4", "--experts", "6",
        "--experts-per-token", "3"])

    # (b) transformers writes, pail reads
    small = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=320, bos_token_id=1, eos_token_id=2)
    rope3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
    cases = [
        ("llama-f32-rope3-bias", LlamaConfig(**small, rope_parameters=rope3, max_position_embeddings=131072,
                                             attention_bias=True, rms_norm_eps=1e-5), torch.float32, None),
        ("llama-bf16-tied-sharded", LlamaConfig(**small, tie_word_embeddings=True), torch.bfloat16, "40KB"),
        ("llama-f16", LlamaConfig(**small), torch.float16, None),
        ("qwen2-bf16-tied", Qwen2Config(**small, tie_word_embeddings=True), torch.bfloat16, None),
        ("qwen2-f32-sharded", Qwen2Config(**small), torch.float32, "60KB"),
        ("qwen3-bf16-headdim-sharded", Qwen3Config(**small, head_dim=32), torch.bfloat16, "50KB"),
        ("qwen3-f32-bias-tied", Qwen3Config(**small, attention_bias=True, tie_word_embeddings=True),
         torch.float32, None),
        ("mistral-bf16-window16", MistralConfig(**small, sliding_window=16), torch.bfloat16, None),
        ("mistral-f32-window-null-sharded", MistralConfig(**small, sliding_window=None), torch.float32, "40KB"),
        ("exaone-bf16-rope3-tied-sharded", ExaoneConfig(**small, rope_parameters=rope3, tie_word_embeddings=True,
                                                        max_position_embeddings=32768), torch.bfloat16, "40KB"),
        ("granite-bf16-multipliers-tied", GraniteConfig(**small, embedding_multiplier=12.0, residual_multiplier=0.22,
                                                        attention_multiplier=0.015625, logits_scaling=8.0,
                                                        tie_word_embeddings=True), torch.bfloat16, None),
        ("olmo2-f32-sharded", Olmo2Config(**small, pad_token_id=None), torch.float32, "40KB"),
        ("smollm3-f32-nope-untied", SmolLM3Config(**small, no_rope_layers=[1, 0, 1], tie_word_embeddings=False,
                                                  pad_token_id=None), torch.float32, None),
        # Phi-3.5 / Phi-4-mini: fused tensors, longrope (legacy rope_scaling in, rope_parameters out), half the dims
        ("phi3-bf16-longrope-partial-window-sharded", Phi3Config(
            **small, pad_token_id=None, partial_rotary_factor=0.5, sliding_window=16, max_position_embeddings=1024,
            original_max_position_embeddings=64, rope_scaling={"type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0],
                                                               "long_factor": [1.0, 3.0, 9.0, 27.0]}),
         torch.bfloat16, "40KB"),
        ("phi3-f32-tied", Phi3Config(**small, pad_token_id=None, tie_word_embeddings=True), torch.float32, None),
    ]
    cases += [  # cohere: one norm per layer, (H, D) / (Hkv, D) q/k norms, tied by default
        ("cohere-bf16-qknorm-bias-sharded", CohereConfig(**small, use_qk_norm=True, attention_bias=True,
                                                         logit_scale=0.25, pad_token_id=None), torch.bfloat16, "40KB"),
        ("cohere-f32-untied", CohereConfig(**small, tie_word_embeddings=False, pad_token_id=None), torch.float32, None),
        ("cohere2-bf16-layer-types-bias", Cohere2Config(**small, sliding_window=16, attention_bias=True, pad_token_id=None,
                                                        layer_types=["full_attention", "sliding_attention",
                                                                     "full_attention"]), torch.bfloat16, None),
        ("cohere2-f32-pattern-sharded", Cohere2Config(**{**small, "num_hidden_layers": 4}, sliding_window_pattern=2,
                                                      pad_token_id=None), torch.float32, "40KB"),
        # gemma2 with Gemma2Config's softcaps (50, 30); gemma3's rope given in the legacy spelling,
        # which transformers saves as rope_parameters per layer type
        ("gemma2-bf16-window16-softcaps", Gemma2Config(**small, head_dim=16, sliding_window=16, pad_token_id=None),
         torch.bfloat16, None),
        ("gemma3_text-f32-linear-rope-sharded", Gemma3TextConfig(
            **small, head_dim=16, sliding_window=16, layer_types=["sliding_attention", "full_attention",
                                                                 "sliding_attention"],
            rope_scaling={"rope_type": "linear", "factor": 8.0}, rope_local_base_freq=20000.0, rope_theta=500000.0,
            pad_token_id=None), torch.float32, "40KB"),
    ]
    moe = dict(small, num_experts_per_tok=2)
    cases += [  # mixtures of experts as save_pretrained writes them: per expert, granitemoe fused
        ("qwen3_moe-bf16-sharded", Qwen3MoeConfig(**moe, num_experts=4, moe_intermediate_size=32, head_dim=16,
                                                  norm_topk_prob=True), torch.bfloat16, "40KB"),
        ("qwen2_moe-f32-shared", Qwen2MoeConfig(**moe, num_experts=4, moe_intermediate_size=32,
                                                shared_expert_intermediate_size=48), torch.float32, None),
        ("olmoe-f16", OlmoeConfig(**moe, num_experts=4, pad_token_id=None), torch.float16, None),
        ("granitemoe-bf16-multipliers-tied", GraniteMoeConfig(**moe, num_local_experts=4, embedding_multiplier=12.0,
                                                              residual_multiplier=0.22, attention_multiplier=0.015625,
                                                              logits_scaling=6.0, tie_word_embeddings=True),
         torch.bfloat16, None),
        ("mixtral-f32-window16-sharded", MixtralConfig(**moe, num_local_experts=4, sliding_window=16), torch.float32,
         "40KB"),
        # gpt_oss: GptOssConfig's YaRN defaults, then its own yarn object (truncate absent: true) and layers
        ("gpt_oss-bf16", GptOssConfig(**moe, num_local_experts=4, head_dim=16, pad_token_id=None), torch.bfloat16,
         None),
        ("gpt_oss-f32-yarn-layers-sharded", GptOssConfig(
            **moe, num_local_experts=4, head_dim=16, sliding_window=16, swiglu_alpha=1.5, swiglu_limit=5.0,
            layer_types=["full_attention", "sliding_attention", "sliding_attention"], pad_token_id=None,
            rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 16.0, "attention_factor": 1.2,
                             "original_max_position_embeddings": 1024, "rope_theta": 50000.0}), torch.float32, "40KB"),
    ]
    for name, cfg, dt, shard in cases:
        check_hf_written(ctl, a.work, name, cfg, dt, shard)

    # (c) the Qwen2.5-0.5B shape
    if a.big:
        t0 = time.time()
        d = os.path.join(a.work, "pail-qwen2.5-0.5b")
        r = subprocess.run([ctl, "init-model", "--out", d, "--shape", "qwen2.5-0.5b", "--dtype", "bf16"],
                           capture_output=True, text=True)
        t1 = time.time()
        report(f"qwen2.5-0.5b: init-model ({t1 - t0:.1f} s)", r.returncode == 0, r.stderr.strip()[-300:])
        if r.returncode == 0:
            fields, sums = model_info(ctl, d)
            t2 = time.time()
            report(f"qwen2.5-0.5b: model-info --sums ({t2 - t1:.1f} s)", fields["parameters"] == "494032768",
                   fields["parameters"])
            model, info = load_hf(d, torch.bfloat16)
            problems = {k: v for k, v in info.items() if v}
            report("qwen2.5-0.5b: transformers loads it", not problems, str(problems)[:300])
            compare_config("qwen2.5-0.5b", model.config, fields)
            compare_values("qwen2.5-0.5b", model, fields, sums, d)
            shutil.rmtree(d, ignore_errors=True)

    print(f"model-files: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
