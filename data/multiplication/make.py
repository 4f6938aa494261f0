#!/usr/bin/env python3
"""Writes the harder chat task of doc/models.md: two-number multiplication,
a * b with 2 <= a, b <= 30 (841 ordered pairs), as chat rows for the model's own
template: {"messages": [{"role": "user", "content": "What is 9 times 20? Answer
with just the number."}], "answer": "180"}. Split by unordered pair
(data/pairsplit.py): 500 held-out rows, the other 341 are train.jsonl, so a run
sees each training product several times and the held-out ones never.
Run: python3 data/multiplication/make.py"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in data/
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pairsplit  # noqa: E402

pairsplit.write(os.path.dirname(os.path.abspath(__file__)), 2, 30, 500, 20261201,
                lambda a, b: f"What is {a} times {b}? Answer with just the number.", lambda a, b: str(a * b))
