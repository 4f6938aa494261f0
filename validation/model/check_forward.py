"""Validates pail's decoder (src/model/transformer.c, through
build/tools/model_driver) against Hugging Face transformers + PEFT, the code
users run. For random tiny checkpoints of each model_type (GQA, q/k/v bias,
attention_bias, qwen3 q/k norm, tied and untied embeddings, llama3 rope
scaling), saved with save_pretrained and loaded by pail from the same folder:

- per-token log-probs of packed rows (3 sequences of different lengths in one
  row for pail; each sequence run separately by transformers): max abs error
  <= 1e-4 in fp32, at temperature 1 and 0.7;
- LoRA A and B gradients of sum_t w_t * logp_t (random w; random NON-zero B, as
  with PEFT's B = 0 the gradient of A is exactly zero and could not fail):
  relative error <= 1e-3 per tensor (max abs diff / max abs value);
- full fine-tuning gradients of every base weight (no adapter): same bound;
- the same LoRA gradients with per-layer activation recomputation.
Usage: check_forward.py DRIVER WORKDIR -> "model-forward: N passed, N failed"."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

torch.set_num_threads(2)
torch.manual_seed(0)
DRIVER, WORK = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pail_files import MODULES, base_sha256, write_pail_adapter  # noqa: E402
passed = failed = 0


def report(name, err, bound):
    global passed, failed
    ok = err <= bound
    passed += ok
    failed += not ok
    print(f"  {'ok  ' if ok else 'FAIL'} {name}: {err:.2e} (bound {bound:g})")


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


def torch_logprobs(model, seqs, temperature):
    out = []
    for s in seqs:
        ids = torch.tensor([s])
        logits = model(input_ids=ids).logits[0, :-1].float() / temperature
        lp = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
        out.append(lp)
    return out


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


for name, cfg in variants():
    print(f"{name}:")
    d = os.path.join(WORK, name)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    randomize(model)
    model.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(len(name))
    seqs, weights = packed_inputs(cfg.vocab_size, [7, 13, 4], g)
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
                    e = rel(f[pname][:], p.grad.numpy())
                    if e > worst:
                        worst, wname = e, pname
            report(f"full fine-tuning grads (worst: {wname})", worst, 1e-3)
    # --- LoRA on all seven projections with random non-zero A and B
    rank, alpha = 4, 8.0
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=MODULES,
                                                  lora_dropout=0.0, init_lora_weights=True))
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if "lora_B" in pname:
                p.copy_(0.05 * torch.randn_like(p))
    apath = os.path.join(d, "adapter.h5")
    write_pail_adapter(peft_model, apath, cfg.num_hidden_layers, rank, alpha, base_sha256(d))
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
        report(f"LoRA A/B grads{label} (worst: {wname})", worst, 1e-3)
    ctl = os.environ.get("PAIL_CTL")
    if ctl:  # the user-facing command gives the same log-probs
        lines = "".join(json.dumps({"ids": s}) + "\n" for s in seqs)
        out = subprocess.run([ctl, "logprobs", "--model", d, "--adapter", apath, "--input", "-",
                              "--token-budget", "16"], input=lines, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"grpo-ctl logprobs failed: {out.stderr.strip()}")
        got = [json.loads(l)["logprobs"] for l in out.stdout.splitlines()]
        err = max(float((torch.tensor(a) - b.detach()).abs().max()) for a, b in zip(got, ref))
        report("grpo-ctl logprobs (packed in rows of 16 tokens)", err, 1e-4)
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

print(f"model-forward: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
