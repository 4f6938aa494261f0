"""What validation/model/check_forward.py and check_moe.py share: the pass/fail
count, transformers' per-token log-probs, the relative error of a gradient, and
generation through pail's paged KV cache (build/tools/rollout_driver) against
transformers' generate and a full forward."""
import json
import os
import subprocess

import numpy as np
import torch
from transformers import AutoModelForCausalLM

counts = {"passed": 0, "failed": 0}


def report(name, err, bound):
    ok = err <= bound
    counts["passed" if ok else "failed"] += 1
    print(f"  {'ok  ' if ok else 'FAIL'} {name}: {err:.2e} (bound {bound:g})")


def torch_logprobs(model, seqs, temperature):
    out = []
    for s in seqs:
        ids = torch.tensor([s])
        logits = model(input_ids=ids).logits[0, :-1].float() / temperature
        out.append(torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0])
    return out


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


def run_json(exe, args, what):
    out = subprocess.run([exe] + args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def generation(gen_driver, d, cfg, g, plens=(20, 3), new=24):
    """Prefill (a 20-token prompt, past a window) and decode through pail's
    paged KV cache against transformers: greedy equal to generate token for
    token, sampled tokens' log-probs equal a full forward."""
    fresh = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in plens]
    ppath = os.path.join(d, "prompts.json")
    json.dump({"prompts": prompts}, open(ppath, "w"))
    greedy = run_json(gen_driver, ["--model", d, "--input", ppath, "--group", "1", "--max-new", str(new),
                                   "--temperature", "0"], "rollout_driver")
    worst = 0
    for c in greedy["completions"]:
        p = prompts[c["prompt"]]
        with torch.no_grad():
            # the attention mask given: generate would take a prompt's token 0 (pad_token_id) for padding
            ref = fresh.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 do_sample=False, max_new_tokens=new, min_new_tokens=new,
                                 pad_token_id=0)[0, len(p):].tolist()
        worst += ref != c["ids"]
        if ref != c["ids"]:
            print(f"    prompt {c['prompt']}: pail {c['ids']}\n    transformers {ref}")
    report(f"greedy generation = transformers generate ({new} tokens, prompts of {' and '.join(map(str, plens))}), "
           "mismatches", worst, 0)
    sampled = run_json(gen_driver, ["--model", d, "--input", ppath, "--group", "3", "--max-new", str(new),
                                    "--temperature", "1", "--seed", "5"], "rollout_driver")
    err = 0.0
    for c in sampled["completions"]:
        p = prompts[c["prompt"]]
        ids = torch.tensor([p + c["ids"]])
        with torch.no_grad():
            lp = torch.log_softmax(fresh(input_ids=ids).logits[0].float(), dim=-1)
        ref = lp[len(p) - 1:-1].gather(1, ids[0, len(p):, None])[:, 0]
        err = max(err, float((torch.tensor(c["logprobs"]) - ref).abs().max()))
    report("KV-cache decode: sampled tokens' log-probs vs a full transformers forward", err, 1e-4)
