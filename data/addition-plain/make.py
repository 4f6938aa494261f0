#!/usr/bin/env python3
"""Writes `make demo-real PAIL_DEMO_MODEL=gemma3-270m`'s task: data/addition-chat's
two-digit sums (a + b, 10 <= a, b <= 99) and its very split (data/pairsplit.py, the
same seed: 500 held-out rows, 7,600 training rows, split by unordered pair), as
plain text for a base model: {"messages": [{"role": "user", "content": "37 + 48 ="}],
"answer": "85"}, rendered with --prompt-format (a one-message row gives {prompt}).
Run: python3 data/addition-plain/make.py"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in data/
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pairsplit  # noqa: E402

pairsplit.write(os.path.dirname(os.path.abspath(__file__)), 10, 99, 500, 20261202,
                lambda a, b: f"{a} + {b} =", lambda a, b: str(a + b))
