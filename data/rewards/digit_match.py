#!/usr/bin/env python3
"""Example cmd reward for grpo-rollout (--reward cmd --reward-cmd "python3 data/rewards/digit_match.py"):
reads one JSON line per completion on stdin, writes one number per line on stdout.
Score: the fraction of the answer's digits the completion's first number gets right,
aligned from the right (units with units), so "46" for 46 is 1.0, "47" is 0.5.
A denser signal than exact_answer for data/addition; see doc/rewards.md."""
import json
import re
import sys

for line in sys.stdin:
    row = json.loads(line)
    want = str(row["answer"])
    m = re.search(r"\d+", row["completion"])
    got = m.group(0) if m else ""
    hits = sum(1 for i in range(1, len(want) + 1) if i <= len(got) and got[-i] == want[-i])
    score = hits / max(len(want), len(got), 1)
    print(score, flush=True)  # flush: pail waits for each answer
