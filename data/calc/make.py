#!/usr/bin/env python3
"""Writes the calculator task (doc/environments.md's example): multiply a
three-digit number by a two-digit one, which a tiny model cannot do in its
head but can do with a tool. An episode (env.py): the user asks "123*45"; the
model calls the tool mul in the Hermes format,
    <tool_call>{"name":"mul","arguments":{"a":123,"b":45}}</tool_call>
env.py answers with the product, and the model answers with the number;
reward 1 for the right number. Rows of train.jsonl (4,500: GRPO's problems)
and eval.jsonl (1,000: held out) are {"prompt": "123*45", "answer": "5535"}.
sft.jsonl and sft-valid.jsonl (4,000 / 500 other problems) hold the two
assistant turns of each problem as messages rows for the supervised warm-up
on the tool format (grpo-train --sft: each row trains its last message), so
GRPO's rewards are on problems the warm-up never saw.
Run: python3 data/calc/make.py OUT_DIR (the files are made where they are used:
4 MB, not kept in the repository)."""
import json
import os
import random
import sys

rng = random.Random(20261202)
pairs = sorted({(rng.randrange(100, 1000), rng.randrange(10, 100)) for _ in range(12000)})
rng.shuffle(pairs)
pairs = pairs[:10000]
split = {"eval": sorted(pairs[:1000]), "train": sorted(pairs[1000:5500]), "sft": sorted(pairs[5500:9500]),
         "sft-valid": sorted(pairs[9500:])}
here = sys.argv[1]
os.makedirs(here, exist_ok=True)
for name in ("eval", "train"):
    with open(os.path.join(here, name + ".jsonl"), "w") as f:
        for a, b in split[name]:
            f.write(json.dumps({"prompt": f"{a}*{b}", "answer": str(a * b)}) + "\n")


def call(a, b):
    return '<tool_call>{"name":"mul","arguments":{"a":%d,"b":%d}}</tool_call>' % (a, b)


for name in ("sft", "sft-valid"):
    with open(os.path.join(here, name + ".jsonl"), "w") as f:
        for a, b in split[name]:
            q = {"role": "user", "content": f"{a}*{b}"}
            f.write(json.dumps({"messages": [q, {"role": "assistant", "content": call(a, b)}]}) + "\n")
            f.write(json.dumps({"messages": [q, {"role": "assistant", "content": call(a, b)},
                                             {"role": "tool", "content": str(a * b)},
                                             {"role": "assistant", "content": str(a * b)}]}) + "\n")
