"""End-to-end check of grpo-train's first step against PyTorch: a random tiny
transformers checkpoint, a LoRA adapter with random non-zero A and B (PEFT's
B = 0 would make the A gradient exactly zero), and a crafted rollout shard
(written with h5py in doc/formats.md's layout, behaviour log-probs perturbed
so ratios spread across the clip range) are given to
`grpo-train --replay ... --init-adapter ... --dump-grads`; the LoRA gradients
it dumps must equal autograd's through transformers + PEFT with TRL's loss
formulas (relative error <= 1e-3 per tensor), for each loss aggregation, both
ratio types (token with DAPO's clip-higher 0.2/0.28 given as flags, sequence
with GSPO's defaults), with and without the KL term, at a temperature != 1.
The shard is a version-2 multi-turn one: some completions carry stretches of
environment tokens (completion_mask 0, log-prob 0) in the middle or at the
end, which are context for the model but never scored, so the reference loss
runs over mask-1 tokens only (DAPO's token count, GRPO's per-sequence mean and
GSPO's sequence log-ratio are over those; Dr.GRPO's constant stays
max_new_tokens). One case replays the same completions as a version-1 shard
(no mask: every token scored) against the unmasked reference. One group has no reward
spread: without KL the trainer leaves its completions (and any whose reward is
its group's mean: advantage 0) out of the forward and backward (their gradient
is 0), which the metrics must say and the gradients
must not show; --train-zero-advantage runs them and must give the same.
One case adds segments (format 3, an endpoint episode whose agent edited its
history): two further rows of two episodes -- one of them in the flat group --
each trained with its episode's advantage and counted in the normalizers as a
sequence of its own, while the group statistics count each episode once.
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
R, ALPHA, P, G, TEMP, MAX_NEW = 4, 8.0, 3, 4, 0.8, 8
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
# Multi-turn completions: the model's tokens (1) and the environment's (0).
# Every third completion of 4+ tokens gets a stretch of 2 environment tokens
# after its first token (a tool result between two assistant turns); the
# first other one of 3+ tokens ends with 2 (the environment had the last word).
masks = [torch.ones(len(c), dtype=torch.bool) for c in comps]
for i, c in enumerate(comps):
    if i % 3 == 1 and len(c) >= 4:
        masks[i][1:3] = False
tail = next(i for i, c in enumerate(comps) if i % 3 != 1 and len(c) >= 3)
masks[tail][-2:] = False
turns = [int(m[0]) + int((m[1:] & ~m[:-1]).sum()) for m in masks]  # runs of the model's tokens
assert any(not m[-1] for m in masks) and any(not m.all() and m[-1] for m in masks)
ALL = [torch.ones(len(c), dtype=torch.bool) for c in comps]
# Segments (version 3): further rows of episodes 0 and G (G: of the flat group),
# after the P*G rows; the first begins with 2 environment tokens (the rest of
# an edited history), as the worker writes them.
SEG_OF = [0, G]
seg_comps = [torch.randint(0, 97, (int(n),), generator=g) for n in (6, 4)]
seg_masks = [torch.ones(len(c), dtype=torch.bool) for c in seg_comps]
seg_masks[0][:2] = False
seg_turns = [1, 1]


def completion_logprobs(model, temp, rows=None):
    out = []
    for i, c in enumerate(comps if rows is None else rows):
        p = prompts[(i if rows is None else SEG_OF[i]) // G]
        ids = torch.cat([p, c]).unsqueeze(0)
        logits = model(input_ids=ids).logits[0, len(p) - 1:-1].float() / temp
        out.append(torch.log_softmax(logits, -1).gather(1, c[:, None])[:, 0])
    return out


with torch.no_grad():
    behaviour = [lp + 0.3 * torch.randn(lp.shape, generator=g) for lp in completion_logprobs(peft, TEMP)]
    behaviour = [torch.clamp(lp, max=-1e-3) for lp in behaviour]
    seg_behaviour = [torch.clamp(lp + 0.3 * torch.randn(lp.shape, generator=g), max=-1e-3)
                     for lp in completion_logprobs(peft, TEMP, seg_comps)]
    with peft.disable_adapter():
        ref_lp = completion_logprobs(peft, TEMP)
        seg_ref_lp = completion_logprobs(peft, TEMP, seg_comps)


def write_shard(path, version):
    """The crafted shard; version 2 carries the masks (the environment's tokens get log-prob 0), version 3 also
    the segments."""
    segs = version >= 3
    rows = comps + (seg_comps if segs else [])
    rmask = masks + (seg_masks if segs else [])
    rew = torch.cat([rewards, rewards[SEG_OF]]) if segs else rewards
    n = len(rows)
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["format"], a["run_id"], a["worker_id"] = np.bytes_("pail.rollout"), np.bytes_("crafted"), np.bytes_("w")
        a["base_sha256"], a["tokenizer_sha256"] = np.bytes_(sha), np.bytes_("")
        for k, v in dict(format_version=version, adapter_version=0, created_unix=0, top_k=0, max_new_tokens=MAX_NEW,
                         seed=0).items():
            a[k] = np.int64(v)
        a["temperature"], a["top_p"] = np.float64(TEMP), np.float64(1.0)
        f["prompt_ids"] = torch.cat(prompts).numpy().astype(np.int32)
        f["prompt_offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
        f["prompt_index"] = np.arange(P, dtype=np.int64)
        f["completion_ids"] = torch.cat(rows).numpy().astype(np.int32)
        f["completion_offsets"] = np.cumsum([0] + [len(c) for c in rows]).astype(np.int64)
        f["group"] = np.array(list(np.arange(P * G) // G) + ([e // G for e in SEG_OF] if segs else []), np.int32)
        lp = torch.cat(behaviour + (seg_behaviour if segs else []))
        if version >= 2:
            m = torch.cat(rmask)
            lp = torch.where(m, lp, torch.zeros_like(lp))
            f["completion_mask"] = m.numpy().astype(np.uint8)
            f["turns"] = np.array(turns + (seg_turns if segs else []), np.int32)
        if segs:
            f["segment_of"] = np.array(SEG_OF, np.int32)
        f["logprobs"] = lp.numpy().astype(np.float32)
        f["rewards"] = rew.numpy()
        f["reward_valid"] = np.ones(n, np.uint8)
        rc = f.create_dataset("reward_components", data=rew.numpy()[:, None])
        rc.attrs["names"] = np.array([b"exact_answer"])
        f["finish_reason"] = np.zeros(n, np.uint8)


src, src_v1, src_v3 = os.path.join(WORK, "src"), os.path.join(WORK, "src-v1"), os.path.join(WORK, "src-v3")
SRC = {1: src_v1, 2: src, 3: src_v3}
for d, version in ((src, 2), (src_v1, 1), (src_v3, 3)):
    shard = os.path.join(WORK, f"shard-v{version}.h5")
    write_shard(shard, version)
    subprocess.run([os.path.join(BIN, "grpo-ctl"), "put", "--versioned",
                    f"file://{d}/rollouts/v00000000/w-000000.h5", shard], check=True)
print(f"  crafted shard: {sum(len(c) for c in comps)} completion tokens, {int(sum(m.sum() for m in masks))} of "
      f"them the model's; turns {turns}")


def reference(loss_type, ratio, beta, masks, segs=False):
    """TRL's loss over the mask-1 tokens: the environment's tokens are context only. Segments: sequences of
    their own with their episode's advantage (the group statistics over the episodes only)."""
    eps = (3e-4, 4e-4) if ratio == "sequence" else (0.2, 0.28)
    r = rewards.view(P, G)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()
    peft.zero_grad()
    new = completion_logprobs(peft, TEMP)
    old, refl = list(behaviour), list(ref_lp)
    if segs:
        new += completion_logprobs(peft, TEMP, seg_comps)
        old += seg_behaviour
        refl += seg_ref_lp
        masks = masks + seg_masks
        adv = torch.cat([adv, adv[SEG_OF]])
    nseq = len(new)
    total_tokens = int(sum(m.sum() for m in masks))
    loss = 0
    for i, (n_lp, o_lp, r_lp, m) in enumerate(zip(new, old, refl, masks)):
        n_lp, o_lp, r_lp = n_lp[m], o_lp[m], r_lp[m]
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
            loss = loss + ptl.mean() / nseq
        else:
            loss = loss + ptl.sum() / (nseq * MAX_NEW)
    loss.backward()
    return {n: p.grad.clone() for n, p in lora_params.items()}


cases = [(lt, ra, b, False, 2) for lt in ("dapo", "grpo", "dr_grpo") for ra in ("token", "sequence")
         for b in (0.0, 0.05)]
cases += [("dapo", "token", 0.0, True, 2), ("grpo", "sequence", 0.0, True, 2)]
cases += [("dapo", "token", 0.0, False, 1), ("grpo", "sequence", 0.05, False, 1)]  # a version-1 shard: all scored
cases += [(lt, "token", 0.0, False, 3) for lt in ("dapo", "grpo", "dr_grpo")]  # with segments
cases += [("grpo", "sequence", 0.05, False, 3)]
for loss_type, ratio, beta, train_zero, version in cases:
    name = f"{loss_type}/{ratio}/beta={beta}" + ("/train-zero-advantage" if train_zero else "") + \
        {1: "/shard-v1", 2: "/masked", 3: "/segments"}[version]
    run = os.path.join(WORK, "run-" + name.replace("/", "-"))
    dump = run + "-grads.h5"
    metrics = run + "-metrics.jsonl"
    cmd = [os.path.join(BIN, "grpo-train"), "--model", model_dir, "--run", f"file://{run}", "--replay",
           f"file://{SRC[version]}", "--init-adapter", adapter, "--steps", "1",
           "--groups-per-step", str(P),
           "--group-size", str(G), "--lora-rank", str(R), "--lora-alpha", str(ALPHA), "--lr", "0",
           "--loss", loss_type, "--ratio", ratio, "--beta", str(beta), "--dump-grads", dump,
           "--metrics", metrics] + (["--epsilon-high", "0.28"] if ratio == "token" else []) + \
        (["--train-zero-advantage"] if train_zero else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"  FAIL {name}: grpo-train exited {out.returncode}: {out.stderr.strip().splitlines()[-1]}")
        failed += 1
        continue
    ref = reference(loss_type, ratio, beta, ALL if version == 1 else masks, version == 3)
    worst, wname = 0.0, ""
    with h5py.File(dump) as f:
        for n, gr in ref.items():
            parts = n.split(".")
            got = f[f"layers/{parts[4]}/{parts[6]}/{parts[7]}"][:]
            e = float(np.abs(got - gr.numpy()).max() / max(np.abs(gr.numpy()).max(), 1e-12))
            if e > worst:
                worst, wname = e, f"layers/{parts[4]}/{parts[6]}/{parts[7]}"
    with open(metrics) as f:
        mline = json.loads(f.readline())
    skipped = mline["completions/zero_advantage_skipped"]
    # the trained-token and turn means cover every completion of the step
    used = (ALL if version == 1 else masks) + (seg_masks if version == 3 else [])
    want_trained = float(sum(m.sum() for m in used)) / (P * G)  # per episode: its segments' tokens too
    want_turns = (sum(turns) + (sum(seg_turns) if version == 3 else 0)) / (P * G) if version >= 2 else 1.0
    means_ok = abs(mline["completions/mean_trained_tokens"] - want_trained) < 1e-9 and \
        abs(mline["completions/mean_turns"] - want_turns) < 1e-9
    # the flat group, and completions whose reward is their group's mean; none with KL or the flag
    r = rewards.view(P, G)
    zero = ((r - r.mean(1, keepdim=True)) == 0).flatten()
    zero_adv = int(zero.sum()) + (int(zero[SEG_OF].sum()) if version == 3 else 0)
    want_skipped = zero_adv if beta == 0 and not train_zero else 0
    segs_ok = version != 3 or mline["completions/segments"] == len(SEG_OF)
    ok = worst <= 1e-3 and skipped == want_skipped and means_ok and segs_ok
    passed += ok
    failed += not ok
    print(f"  {'ok  ' if ok else 'FAIL'} {name}: LoRA grads rel err {worst:.2e} (worst {wname}); "
          f"{skipped} zero-advantage completions skipped (want {want_skipped})" +
          ("" if means_ok else f"; mean trained tokens {mline['completions/mean_trained_tokens']} (want "
           f"{want_trained}), mean turns {mline['completions/mean_turns']} (want {want_turns})"))
print(f"trainer-grads: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
