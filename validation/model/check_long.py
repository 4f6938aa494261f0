"""The trainer's forward and backward at long packed sequences (issue 47)
against Hugging Face transformers + PEFT: a random tiny Qwen2 checkpoint
(C 32, L 2, H 2, Hkv 1, D 16, F 64, V 211, untied, q/k/v bias) and a LoRA
adapter of rank 4 on all seven projections with random NON-zero A and B
(PEFT's B = 0 would make the A gradient exactly zero). For each length N
(2048, 4096, 8192 tokens), one packed row of two sequences, N - 96 and 96
tokens (a query of the long one attends to up to N - 97 keys; the short one
starts at row N - 96 and must see none of them), goes through
build/tools/model_driver with and without --recompute (the trainer's plan past
its memory); transformers runs each sequence alone. Bounds are
check_forward.py's, unchanged by the length:
- per-token log-probs: max abs error <= 1e-4 (fp32);
- LoRA A and B gradients of sum_t w_t logp_t (random w): relative error
  <= 1e-4 per tensor (max abs diff / max abs value).
The model is small so each length costs seconds on 2 cores; attention is the
part that grows with N (quadratic time, linear memory in pail's flash-style
kernels). CHECK_LONG_LENGTHS=2048,4096 picks lengths.
Usage: check_long.py DRIVER WORKDIR -> "model-long: N passed, N failed"."""
import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, Qwen2Config

torch.set_num_threads(2)
DRIVER, WORK = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pail_files import MODULES, base_sha256, write_pail_adapter  # noqa: E402

LENGTHS = [int(x) for x in os.environ.get("CHECK_LONG_LENGTHS", "2048,4096,8192").split(",")]
SHORT, RANK, ALPHA = 96, 4, 8.0
passed = failed = 0


def report(name, err, bound):
    global passed, failed
    ok = err <= bound
    passed += ok
    failed += not ok
    print(f"  {'ok  ' if ok else 'FAIL'} {name}: {err:.2e} (bound {bound:g})", flush=True)


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


cfg = Qwen2Config(vocab_size=211, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=max(LENGTHS), rms_norm_eps=1e-5,
                  tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
torch.manual_seed(0)
d = os.path.join(WORK, "long-model")
model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1.0 + 0.1 * torch.randn_like(p))
        elif "bias" in name:
            p.copy_(0.1 * torch.randn_like(p))
model.save_pretrained(d, safe_serialization=True)
peft_model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=MODULES, lora_dropout=0.0))
with torch.no_grad():
    for pname, p in peft_model.named_parameters():
        if "lora_B" in pname:
            p.copy_(0.05 * torch.randn_like(p))
apath = os.path.join(d, "adapter.h5")
write_pail_adapter(peft_model, apath, cfg.num_hidden_layers, RANK, ALPHA, base_sha256(d))
lora_params = [(n, p) for n, p in peft_model.named_parameters() if "lora_" in n]

for N in LENGTHS:
    print(f"N = {N} tokens ({N - SHORT} + {SHORT} packed):", flush=True)
    g = torch.Generator().manual_seed(N)
    lens = [N - SHORT, SHORT]
    seqs = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in lens]
    weights = [torch.randn(n - 1, generator=g).tolist() for n in lens]
    inp = os.path.join(d, f"input-{N}.json")
    json.dump({"seqs": seqs, "weights": weights, "temperature": 1.0}, open(inp, "w"))
    t0 = time.time()
    peft_model.zero_grad()
    ref = []
    for s in seqs:
        ids = torch.tensor([s])
        logits = peft_model(input_ids=ids).logits[0, :-1].float()
        ref.append(torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0])
    sum((torch.tensor(w) * lp).sum() for w, lp in zip(weights, ref)).backward()
    t_ref = time.time() - t0
    for extra, label in (([], ""), (["--recompute"], ", recompute")):
        gpath = os.path.join(d, f"grads-{N}.h5")
        t0 = time.time()
        out = subprocess.run([DRIVER, "--model", d, "--input", inp, "--adapter", apath, "--grads", gpath] + extra,
                             capture_output=True, text=True)
        t_pail = time.time() - t0
        if out.returncode != 0:
            raise RuntimeError(f"model_driver failed: {out.stderr.strip()}")
        got = json.loads(out.stdout)
        err = max(float((torch.tensor(a) - b.detach()).abs().max()) for a, b in zip(got, ref))
        report(f"N={N}{label}: log-probs vs transformers + PEFT (pail {t_pail:.1f} s, torch {t_ref:.1f} s)", err,
               1e-4)
        worst, wname = 0.0, ""
        with h5py.File(gpath) as f:
            for pname, p in lora_params:
                parts = pname.split(".")
                i, m, ab = parts[4], parts[6], parts[7]
                e = rel(f[f"layers/{i}/{m}/{ab}"][:], p.grad.numpy())
                if e > worst:
                    worst, wname = e, f"layers/{i}/{m}/{ab}"
        report(f"N={N}{label}: LoRA A/B grads (worst: {wname})", worst, 1e-4)

print(f"model-long: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
