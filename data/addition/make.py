#!/usr/bin/env python3
"""Writes the two-digit addition task: every pair a+b with 0 <= a, b <= 99 (10,000
rows), shuffled with a fixed seed and split 9,000 train / 1,000 eval (disjoint).
Each row: {"prompt": "12+34=", "answer": "46"}. Rows are written sorted so the
files diff well; samplers shuffle anyway. sft.jsonl holds the train rows as
{"prompt", "completion"} for the supervised warm-up (grpo-train --sft).
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
with open(os.path.join(here, "sft.jsonl"), "w") as f:
    for a, b in split["train"]:
        f.write(json.dumps({"prompt": f"{a}+{b}=", "completion": str(a + b)}) + "\n")
