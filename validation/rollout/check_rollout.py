"""Validates pail's rollout generation (src/rollout/generate.c + sampler.c,
through build/tools/rollout_driver) against Hugging Face transformers (+ PEFT
for an adapter). For random tiny llama and qwen3 checkpoints saved with
save_pretrained:

- the behaviour log-probs stored with each sampled token equal the log-probs
  transformers recomputes for the same tokens, log_softmax(logits / T): max abs
  error <= 1e-4 (fp32; pail's KV-cache decode against a full forward), at
  temperature 1 and 0.7 with no truncation, with a LoRA adapter, and with top-k
  / top-p (reference: transformers' TopKLogitsWarper then TopPLogitsWarper,
  renormalised; every sampled token inside the kept set);
- greedy (temperature 0) picks the argmax of transformers' logits each step;
- the same seed gives identical completions across two runs, 1 and 2 threads,
  and batch sizes 1, 3 and 16 (each sample has its own RNG stream); another seed differs;
- stop ids end a completion (kept as its last token) and shared-prompt prefill
  runs once per prompt, not once per sample.
Usage: check_rollout.py DRIVER WORKDIR -> "rollout: N passed, N failed"."""
import json
import os
import subprocess
import sys
import warnings

import h5py
import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()
warnings.filterwarnings("ignore", category=FutureWarning)

# One thread each: the tiny models gain nothing from more, and on a shared CI
# machine OpenMP teams spinning against each other cost seconds per run.
torch.set_num_threads(1)
torch.manual_seed(0)
DRIVER, WORK = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pail_files import MODULES, base_sha256, write_pail_adapter  # noqa: E402
G, MAX_NEW = 4, 20
passed = failed = 0


def report(name, ok, detail=""):
    global passed, failed
    passed += bool(ok)
    failed += not ok
    print(f"  {'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")


def report_err(name, err, bound):
    report(name, err <= bound, f"{err:.2e} (bound {bound:g})")


def variants():
    common = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=256, rms_norm_eps=1e-5)
    yield "llama-gqa", LlamaConfig(**common, num_key_value_heads=2, tie_word_embeddings=False)
    yield "qwen3-qk-norm", Qwen3Config(**common, num_key_value_heads=1, head_dim=24, tie_word_embeddings=True)


def randomize(model):
    # larger weights than HF's 0.02 init: peaked, non-uniform next-token
    # distributions, so sampling and truncation are not trivially uniform
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 2:
                p.copy_(0.15 * torch.randn_like(p))


def generate(model_dir, prompts_path, temperature=1.0, top_p=1.0, top_k=0, seed=7, batch=8, adapter=None,
             stop=(), threads=1):
    args = [DRIVER, "--model", model_dir, "--input", prompts_path, "--group", str(G), "--max-new", str(MAX_NEW),
            "--batch", str(batch), "--temperature", str(temperature), "--top-p", str(top_p), "--top-k", str(top_k),
            "--seed", str(seed)]
    for s in stop:
        args += ["--stop", str(s)]
    if adapter:
        args += ["--adapter", adapter]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(args, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"rollout_driver failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def reference_logprobs(model, prompts, res, temperature, top_p=1.0, top_k=0):
    """Per completion: (log-probs of the sampled tokens under transformers'
    processed distribution, whether every token was in the kept set, argmax ids)."""
    out = []
    warpers = []
    if top_k > 0:
        warpers.append(TopKLogitsWarper(top_k=top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p))
    # one batched forward per (prompt, completion length): same-length rows, no padding
    groups = {}
    for i, c in enumerate(res["completions"]):
        groups.setdefault((c["prompt"], len(c["ids"])), []).append(i)
    out = [None] * len(res["completions"])
    for (p, n), members in groups.items():
        prompt = prompts[p]
        ids = torch.tensor([prompt + res["completions"][i]["ids"] for i in members])
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()
        # the logits that predicted each completion token
        z = logits[:, len(prompt) - 1:len(prompt) - 1 + n].reshape(len(members) * n, -1)
        argmax = z.argmax(dim=-1).reshape(len(members), n).tolist()
        if temperature > 0:
            z = z / temperature
        for wp in warpers:
            z = wp(ids, z)
        lp = torch.log_softmax(z, dim=-1)
        tgt = ids[:, len(prompt):].reshape(-1)
        got = lp.gather(1, tgt[:, None])[:, 0].reshape(len(members), n)
        for k, i in enumerate(members):
            out[i] = (got[k], bool(torch.isfinite(got[k]).all()), argmax[k])
    return out


def logprob_error(res, ref):
    return max(float((torch.tensor(c["logprobs"]) - r[0]).abs().max()) for c, r in zip(res["completions"], ref))


def seqs(res):
    return [c["ids"] for c in res["completions"]]


for name, cfg in variants():
    print(f"{name}:")
    d = os.path.join(WORK, name)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    randomize(model)
    model.eval()
    model.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(len(name))
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in (5, 9, 3)]
    ppath = os.path.join(d, "prompts.json")
    json.dump({"prompts": prompts}, open(ppath, "w"))

    # --- behaviour log-probs against transformers, no truncation
    for temp in (1.0, 0.7):
        res = generate(d, ppath, temperature=temp)
        n_tok = sum(len(c["ids"]) for c in res["completions"])
        ok = len(res["completions"]) == len(prompts) * G and n_tok == len(prompts) * G * MAX_NEW
        report(f"T={temp}: {len(prompts)} prompts x G={G}, {n_tok} tokens, all of length {MAX_NEW}", ok)
        ref = reference_logprobs(model, prompts, res, temp)
        report_err(f"T={temp}: stored logprobs vs transformers log_softmax(logits/T)", logprob_error(res, ref), 1e-4)
    res1 = generate(d, ppath)
    st = res1["stats"]
    report("shared-prompt prefill: once per prompt, prompt tokens once",
           st["prefill_calls"] == len(prompts) and st["prefill_tokens"] == sum(map(len, prompts)),
           f"{st['prefill_calls']} prefill calls, {st['prefill_tokens']} tokens for prompts of "
           f"{[len(p) for p in prompts]} with G={G}")

    # --- determinism across runs and batch sizes; seeds matter
    again = generate(d, ppath)
    report("same seed, second run: identical ids and logprobs",
           seqs(again) == seqs(res1) and [c["logprobs"] for c in again["completions"]] ==
           [c["logprobs"] for c in res1["completions"]])
    for b in (1, 3, 16):
        rb = generate(d, ppath, batch=b)
        lp_diff = max(abs(x - y) for c1, c2 in zip(rb["completions"], res1["completions"])
                      for x, y in zip(c1["logprobs"], c2["logprobs"]))
        report(f"same seed, batch {b} vs 8: identical ids, logprobs within 1e-5",
               seqs(rb) == seqs(res1) and lp_diff <= 1e-5, f"max logprob diff {lp_diff:.1e}")
    r2 = generate(d, ppath, threads=2)
    report("same seed, 2 threads vs 1: identical ids and logprobs",
           seqs(r2) == seqs(res1) and [c["logprobs"] for c in r2["completions"]] ==
           [c["logprobs"] for c in res1["completions"]])
    other = generate(d, ppath, seed=8)
    n_same = sum(a == b for a, b in zip(seqs(other), seqs(res1)))
    report("another seed: different completions", n_same == 0, f"{n_same} of {len(seqs(res1))} identical")
    within = seqs(res1)[:G]
    report("samples of one prompt differ from each other", len(set(map(tuple, within))) == G)

    # --- top-k / top-p: log-probs of the truncated, renormalised distribution
    for temp, top_p, top_k in ((1.0, 0.8, 0), (0.9, 1.0, 10), (1.2, 0.9, 20)):
        res = generate(d, ppath, temperature=temp, top_p=top_p, top_k=top_k, seed=11)
        ref = reference_logprobs(model, prompts, res, temp, top_p, top_k)
        inside = all(r[1] for r in ref)
        report(f"T={temp} top-p {top_p} top-k {top_k}: every sampled token inside HF's kept set", inside)
        if inside:
            report_err(f"T={temp} top-p {top_p} top-k {top_k}: logprobs vs HF warpers + log_softmax",
                       logprob_error(res, ref), 1e-4)

    # --- greedy: argmax of transformers' logits at every step, log-prob 0
    res = generate(d, ppath, temperature=0)
    ref = reference_logprobs(model, prompts, res, 0)
    agree = all(c["ids"] == r[2] for c, r in zip(res["completions"], ref))
    zeros = all(x == 0 for c in res["completions"] for x in c["logprobs"])
    report("greedy: every token the argmax of transformers' logits, logprob 0", agree and zeros)

    # --- stop ids: a completion ends at its first stop id, which it keeps
    stop_ids = sorted(set(t for c in res1["completions"] for t in c["ids"][3:6]))[:2]
    rs = generate(d, ppath, stop=stop_ids)
    ok = True
    for c, full in zip(rs["completions"], res1["completions"]):
        cut = next((i + 1 for i, t in enumerate(full["ids"]) if t in stop_ids), len(full["ids"]))
        ok &= c["ids"] == full["ids"][:cut] and c["finish"] == ("stop" if cut < len(full["ids"]) or
                                                                 full["ids"][-1] in stop_ids else "length")
    n_stopped = sum(c["finish"] == "stop" for c in rs["completions"])
    report(f"stop ids {stop_ids}: completions are the unstopped ones cut after the first stop id",
           ok and n_stopped > 0, f"{n_stopped} stopped")

    # --- a LoRA adapter (random non-zero B): log-probs of the adapted model
    rank, alpha = 4, 8.0
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=MODULES,
                                                  lora_dropout=0.0, init_lora_weights=True))
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if "lora_B" in pname:
                p.copy_(0.1 * torch.randn_like(p))
    peft_model.eval()
    apath = os.path.join(d, "adapter.h5")
    write_pail_adapter(peft_model, apath, cfg.num_hidden_layers, rank, alpha, base_sha256(d))
    res = generate(d, ppath, adapter=apath)
    ref = reference_logprobs(peft_model, prompts, res, 1.0)
    report_err("LoRA adapter, T=1: stored logprobs vs transformers + PEFT", logprob_error(res, ref), 1e-4)
    with peft_model.disable_adapter():
        base_ref = reference_logprobs(peft_model, prompts, res, 1.0)
    report("the adapter changes the distribution (the check could fail)", logprob_error(res, base_ref) > 1e-3,
           f"{logprob_error(res, base_ref):.2e} from the base model's")

print(f"rollout: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
