#!/usr/bin/env python3
"""Writes `make demo-real`'s task: two-digit addition, a + b with
10 <= a, b <= 99 (8,100 ordered pairs), as chat rows for the model's own
template: {"messages": [{"role": "user", "content": "What is 37 plus 48? Answer
with just the number."}], "answer": "85"}. Split by unordered pair
(data/pairsplit.py): 500 held-out rows, the other 7,600 are train.jsonl. A run
of the demo draws a few hundred of them, so nearly every training prompt is new
to the model too: what it gains on the held-out set is a skill, not a memory.
(data/addition is `make demo`'s task for its tiny model: plain "a+b=" prompts.)
Run: python3 data/addition-chat/make.py"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in data/
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pairsplit  # noqa: E402

pairsplit.write(os.path.dirname(os.path.abspath(__file__)), 10, 99, 500, 20261202,
                lambda a, b: f"What is {a} plus {b}? Answer with just the number.", lambda a, b: str(a + b))
