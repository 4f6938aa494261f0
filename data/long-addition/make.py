#!/usr/bin/env python3
"""Writes `make demo-reason`'s task: adding two DIGITS-digit numbers worked
column by column, a reasoning-length task (a worked answer is 200+ tokens of
SmolLM2's tokenizer, which writes each digit as its own token).

The prompt asks for the sum worked from the ones column, ending "Answer: N".
The worked trace (sft.jsonl) peels one column off per line, so every line is
a local copy of the line before with the last digits dropped, plus one digit
sum and the carry; the result grows from the right:
    Step 1: 4821 + 3069. Last digits 1 and 9, carry 0: 1 + 9 + 0 = 10. Write 0, carry 1. Digits so far: 0.
    Step 2: 482 + 306. Last digits 2 and 6, carry 1: 2 + 6 + 1 = 9. Write 9, carry 0. Digits so far: 90.
    ...
    Answer: 7890
Only the final answer is rewarded (grpo-rollout --reward exact_answer: the last
number of the completion, which is the "Answer:" line's), so GRPO is free to
change anything before it.

Files (rows {"messages": [{"role": "user", ...}], "answer": "7890"}; sft.jsonl's
rows add the assistant's trace, the message --sft trains):
  train.jsonl  GRPO's problems (TRAIN rows)
  eval.jsonl   held-out problems (EVAL rows)
  sft.jsonl    worked traces of SFT other problems, none of them in eval.jsonl
The split is by unordered pair: no held-out sum, nor its mirror b + a, is in
train.jsonl or sft.jsonl; the script checks that before it writes anything.
Deterministic for a seed (standard library only; the files are made where they
are used, not kept in the repository).
Run: python3 data/long-addition/make.py OUT_DIR [--digits 4] [--train 4000]
     [--eval 200] [--sft 2000] [--seed 20261206]"""
import argparse
import json
import os
import random
import sys


def question(a, b):
    return (f"What is {a} plus {b}? Work it out column by column from the ones digit, "
            "then give the sum on a last line as \"Answer: N\".")


def trace(a, b):
    """The worked answer for a + b (a and b of the same number of digits)."""
    lines, x, y, carry, digits, step = [], a, b, 0, "", 1
    while x or y:
        da, db = x % 10, y % 10
        s = da + db + carry
        digits = str(s % 10) + digits
        lines.append(f"Step {step}: {x} + {y}. Last digits {da} and {db}, carry {carry}: "
                     f"{da} + {db} + {carry} = {s}. Write {s % 10}, carry {s // 10}. Digits so far: {digits}.")
        x, y, carry, step = x // 10, y // 10, s // 10, step + 1
    if carry:
        digits = "1" + digits
        lines.append(f"No digits left; the carry 1 goes in front: {digits}.")
    else:
        lines.append(f"No digits left and no carry: {digits}.")
    assert int(digits) == a + b
    lines.append(f"Answer: {a + b}")
    return "\n".join(lines)


def row(a, b, with_trace):
    msgs = [{"role": "user", "content": question(a, b)}]
    if with_trace:
        msgs.append({"role": "assistant", "content": trace(a, b)})
    return {"messages": msgs, "answer": str(a + b)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--digits", type=int, default=4)
    p.add_argument("--train", type=int, default=4000)
    p.add_argument("--eval", type=int, default=200)
    p.add_argument("--sft", type=int, default=2000)
    p.add_argument("--seed", type=int, default=20261206)
    o = p.parse_args()
    lo, hi = 10 ** (o.digits - 1), 10 ** o.digits - 1
    need = o.train + o.eval + o.sft
    if o.digits < 2 or o.digits > 12 or min(o.train, o.eval, o.sft) < 1 or need > (hi - lo + 1) ** 2 // 4:
        sys.exit(f"make.py: --digits {o.digits} with {need} problems: need 2..12 digits, counts >= 1 and at most "
                 "a quarter of the pairs")
    rng = random.Random(o.seed)
    seen, pairs = set(), []  # distinct unordered pairs, in draw order
    while len(pairs) < need:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        key = (min(a, b), max(a, b))
        if key not in seen:
            seen.add(key)
            pairs.append((a, b))
    split = {"eval": pairs[:o.eval], "train": pairs[o.eval:o.eval + o.train], "sft": pairs[o.eval + o.train:]}
    held = {(min(a, b), max(a, b)) for a, b in split["eval"]}
    for name in ("train", "sft"):
        shared = [ab for ab in split[name] if (min(ab), max(ab)) in held]
        if shared:
            sys.exit(f"make.py: {name} shares {len(shared)} problems with eval (first {shared[0]})")
    os.makedirs(o.out, exist_ok=True)
    for name, rows in split.items():
        with open(os.path.join(o.out, name + ".jsonl"), "w") as f:
            for a, b in rows:
                f.write(json.dumps(row(a, b, name == "sft")) + "\n")
    print(f"make.py: {o.out}: {len(split['train'])} train, {len(split['eval'])} held-out, {len(split['sft'])} worked "
          f"traces of {o.digits}-digit sums; no held-out pair in train or sft")


if __name__ == "__main__":
    main()
