#!/usr/bin/env python3
"""Writes the two-digit addition task: every pair a+b with 0 <= a, b <= 99 (10,000
rows), shuffled with a fixed seed and split 9,000 train / 1,000 eval (disjoint).
Each row: {"prompt": "12+34=", "answer": "46"}. Rows are written sorted so the
files diff well; samplers shuffle anyway. sft.jsonl (8,500) and sft-valid.jsonl
(500) split the train rows as {"prompt", "completion"} for the supervised
warm-up (grpo-train --sft --sft-valid).
Run: python3 data/addition/make.py"""
import json
import os
import random

pairs = [(a, b) for a in range(100) for b in range(100)]
random.Random(20261130).shuffle(pairs)
split = {"eval": sorted(pairs[:1000]), "train": sorted(pairs[1000:])}
here = os.path.dirname(os.path.abspath(__file__))
for name, rows in split.items():
    with open(os.path.join(here, name + ".jsonl"), "w") as f:
        for a, b in rows:
            f.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n")
# The warm-up holds out 500 train rows to decide when to stop (the eval split
# stays untouched for measuring GRPO's effect).
valid = set(random.Random(7).sample(split["train"], 500))
for name, rows in (("sft", [r for r in split["train"] if r not in valid]), ("sft-valid", sorted(valid))):
    with open(os.path.join(here, name + ".jsonl"), "w") as f:
        for a, b in rows:
            f.write(json.dumps({"prompt": f"{a}+{b}=", "completion": str(a + b)}) + "\n")
