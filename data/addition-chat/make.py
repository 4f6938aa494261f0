#!/usr/bin/env python3
"""Writes `make demo-real`'s task: two-digit addition, a + b with
10 <= a, b <= 99 (8,100 ordered pairs), as chat rows for the model's own
template: {"messages": [{"role": "user", "content": "What is 37 plus 48? Answer
with just the number."}], "answer": "85"}. The split is by unordered pair, so
a + b and b + a fall on the same side and no held-out sum is ever trained on:
the pairs are shuffled with a fixed seed and taken into eval.jsonl until it
holds exactly 500 rows; the other 7,600 rows are train.jsonl. A run of the demo
draws a few hundred of them, so nearly every training prompt is new to the
model too: what it gains on the held-out set is a skill, not a memory. Rows are
written sorted so the files diff well; samplers shuffle anyway.
(data/addition is `make demo`'s task for its tiny model: plain "a+b=" prompts.)
Run: python3 data/addition-chat/make.py"""
import json
import os
import random

LO, HI, EVAL_ROWS = 10, 99, 500
pairs = [(a, b) for a in range(LO, HI + 1) for b in range(a, HI + 1)]
random.Random(20261202).shuffle(pairs)
held, n = set(), 0
for a, b in pairs:
    rows = 1 if a == b else 2
    if n + rows <= EVAL_ROWS:
        held.add((a, b))
        n += rows
    if n == EVAL_ROWS:
        break
split = {"eval": [], "train": []}
for a in range(LO, HI + 1):
    for b in range(LO, HI + 1):
        split["eval" if (min(a, b), max(a, b)) in held else "train"].append((a, b))
here = os.path.dirname(os.path.abspath(__file__))
for name, rows in split.items():
    with open(os.path.join(here, name + ".jsonl"), "w") as f:
        for a, b in rows:
            text = f"What is {a} plus {b}? Answer with just the number."
            f.write(json.dumps({"messages": [{"role": "user", "content": text}], "answer": str(a + b)}) + "\n")
