"""End-to-end check of grpo-train's first step against PyTorch: a random tiny
transformers checkpoint, a LoRA adapter with random non-zero A and B (PEFT's
B = 0 would make the A gradient exactly zero), and a crafted rollout shard
(written with h5py in doc/formats.md's layout, behaviour log-probs perturbed
so ratios spread across the clip range) are given to
`grpo-train --replay ... --init-adapter ... --dump-grads`; the LoRA gradients
it dumps must equal autograd's through transformers + PEFT with TRL's loss
formulas (relative error <= 1e-3 per tensor), for each loss aggregation, both
ratio types (token with DAPO's clip-higher 0.2/0.28 given as flags, sequence
with GSPO's defaults), with and without the KL term, at a temperature != 1. One group has no reward
spread: without KL the trainer leaves its completions (and any whose reward is
its group's mean: advantage 0) out of the forward and backward (their gradient
is 0), which the metrics must say and the gradients
must not show; --train-zero-advantage runs them and must give the same.
Usage: check_trainer_grads.py BIN WORKDIR -> "trainer-grads: N passed, N failed"."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, Qwen2Config

torch.set_num_threads(2)
BIN, WORK = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pail_files import MODULES, base_sha256, write_pail_adapter  # noqa: E402
R, ALPHA, P, G, TEMP = 4, 8.0, 3, 4, 0.8
passed = failed = 0


model_dir = os.path.join(WORK, "model")
cfg = Qwen2Config(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True)
torch.manual_seed(0)
base = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
with torch.no_grad():
    for name, p in base.named_parameters():
        if "norm" in name:
            p.copy_(1 + 0.1 * torch.randn_like(p))
base.save_pretrained(model_dir)
sha = base_sha256(model_dir)
peft = get_peft_model(base, LoraConfig(r=R, lora_alpha=ALPHA, target_modules=MODULES, lora_dropout=0.0))
with torch.no_grad():
    for name, p in peft.named_parameters():
        if "lora_" in name:
            p.copy_(0.1 * torch.randn_like(p))
lora_params = {n: p for n, p in peft.named_parameters() if "lora_" in n}

adapter = os.path.join(WORK, "init.h5")
write_pail_adapter(peft, adapter, cfg.num_hidden_layers, R, ALPHA, sha)

# A crafted shard: P prompts x G completions, behaviour log-probs = the policy's
# at TEMP plus noise, rewards with spread (one group flat: no signal).
g = torch.Generator().manual_seed(1)
prompts = [torch.randint(0, 97, (int(n),), generator=g) for n in torch.randint(3, 7, (P,), generator=g)]
comps = [torch.randint(0, 97, (int(n),), generator=g) for n in torch.randint(2, 8, (P * G,), generator=g)]
rewards = torch.randint(0, 3, (P * G,), generator=g).float()
rewards[G:2 * G] = 1.0


def completion_logprobs(model, temp):
    out = []
    for i, c in enumerate(comps):
        p = prompts[i // G]
        ids = torch.cat([p, c]).unsqueeze(0)
        logits = model(input_ids=ids).logits[0, len(p) - 1:-1].float() / temp
        out.append(torch.log_softmax(logits, -1).gather(1, c[:, None])[:, 0])
    return out


with torch.no_grad():
    behaviour = [lp + 0.3 * torch.randn(lp.shape, generator=g) for lp in completion_logprobs(peft, TEMP)]
    behaviour = [torch.clamp(lp, max=-1e-3) for lp in behaviour]
    with peft.disable_adapter():
        ref_lp = completion_logprobs(peft, TEMP)

src = os.path.join(WORK, "src")
shard = os.path.join(WORK, "shard.h5")
with h5py.File(shard, "w") as f:
    a = f.attrs
    a["format"], a["run_id"], a["worker_id"] = np.bytes_("pail.rollout"), np.bytes_("crafted"), np.bytes_("w")
    a["base_sha256"], a["tokenizer_sha256"] = np.bytes_(sha), np.bytes_("")
    for k, v in dict(format_version=1, adapter_version=0, created_unix=0, top_k=0, max_new_tokens=8, seed=0).items():
        a[k] = np.int64(v)
    a["temperature"], a["top_p"] = np.float64(TEMP), np.float64(1.0)
    f["prompt_ids"] = torch.cat(prompts).numpy().astype(np.int32)
    f["prompt_offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
    f["prompt_index"] = np.arange(P, dtype=np.int64)
    f["completion_ids"] = torch.cat(comps).numpy().astype(np.int32)
    f["completion_offsets"] = np.cumsum([0] + [len(c) for c in comps]).astype(np.int64)
    f["group"] = (np.arange(P * G) // G).astype(np.int32)
    f["logprobs"] = torch.cat(behaviour).numpy().astype(np.float32)
    f["rewards"] = rewards.numpy()
    f["reward_valid"] = np.ones(P * G, np.uint8)
    rc = f.create_dataset("reward_components", data=rewards.numpy()[:, None])
    rc.attrs["names"] = np.array([b"exact_answer"])
    f["finish_reason"] = np.zeros(P * G, np.uint8)
subprocess.run([os.path.join(BIN, "grpo-ctl"), "put", "--versioned",
                f"file://{src}/rollouts/v00000000/w-000000.h5", shard], check=True)


def reference(loss_type, ratio, beta):
    eps = (3e-4, 4e-4) if ratio == "sequence" else (0.2, 0.28)
    r = rewards.view(P, G)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()
    peft.zero_grad()
    new = completion_logprobs(peft, TEMP)
    total_tokens = sum(len(c) for c in comps)
    loss = 0
    for i, (n_lp, o_lp, r_lp) in enumerate(zip(new, behaviour, ref_lp)):
        lr = n_lp - o_lp
        if ratio == "sequence":
            lr = lr.mean().expand_as(lr)
        c1 = torch.exp(lr)
        c2 = torch.clamp(c1, 1 - eps[0], 1 + eps[1])
        ptl = -torch.min(c1 * adv[i], c2 * adv[i])
        if beta:
            ptl = ptl + beta * (torch.exp(r_lp - n_lp) - (r_lp - n_lp) - 1)
        if loss_type == "dapo":
            loss = loss + ptl.sum() / total_tokens
        elif loss_type == "grpo":
            loss = loss + ptl.mean() / (P * G)
        else:
            loss = loss + ptl.sum() / (P * G * 8)
    loss.backward()
    return {n: p.grad.clone() for n, p in lora_params.items()}


cases = [(lt, ra, b, False) for lt in ("dapo", "grpo", "dr_grpo") for ra in ("token", "sequence") for b in (0.0, 0.05)]
cases += [("dapo", "token", 0.0, True), ("grpo", "sequence", 0.0, True)]
for loss_type, ratio, beta, train_zero in cases:
    name = f"{loss_type}/{ratio}/beta={beta}" + ("/train-zero-advantage" if train_zero else "")
    run = os.path.join(WORK, "run-" + name.replace("/", "-"))
    dump = run + "-grads.h5"
    metrics = run + "-metrics.jsonl"
    cmd = [os.path.join(BIN, "grpo-train"), "--model", model_dir, "--run", f"file://{run}", "--replay",
           f"file://{src}", "--init-adapter", adapter, "--steps", "1", "--groups-per-step", str(P),
           "--group-size", str(G), "--lora-rank", str(R), "--lora-alpha", str(ALPHA), "--lr", "0",
           "--loss", loss_type, "--ratio", ratio, "--beta", str(beta), "--dump-grads", dump,
           "--metrics", metrics] + (["--epsilon-high", "0.28"] if ratio == "token" else []) + \
        (["--train-zero-advantage"] if train_zero else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"  FAIL {name}: grpo-train exited {out.returncode}: {out.stderr.strip().splitlines()[-1]}")
        failed += 1
        continue
    ref = reference(loss_type, ratio, beta)
    worst, wname = 0.0, ""
    with h5py.File(dump) as f:
        for n, gr in ref.items():
            parts = n.split(".")
            got = f[f"layers/{parts[4]}/{parts[6]}/{parts[7]}"][:]
            e = float(np.abs(got - gr.numpy()).max() / max(np.abs(gr.numpy()).max(), 1e-12))
            if e > worst:
                worst, wname = e, f"layers/{parts[4]}/{parts[6]}/{parts[7]}"
    with open(metrics) as f:
        skipped = json.loads(f.readline())["completions/zero_advantage_skipped"]
    # the flat group, and completions whose reward is their group's mean; none with KL or the flag
    r = rewards.view(P, G)
    zero_adv = int(((r - r.mean(1, keepdim=True)) == 0).sum())
    want_skipped = zero_adv if beta == 0 and not train_zero else 0
    ok = worst <= 1e-3 and skipped == want_skipped
    passed += ok
    failed += not ok
    print(f"  {'ok  ' if ok else 'FAIL'} {name}: LoRA grads rel err {worst:.2e} (worst {wname}); "
          f"{skipped} zero-advantage completions skipped (want {want_skipped})")
print(f"trainer-grads: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
