"""The held-out split of the chat arithmetic tasks (data/multiplication,
data/addition-chat): every ordered pair (a, b) with lo <= a, b <= hi, split by
unordered pair so a op b and b op a fall on the same side and no held-out row
is ever trained on. The unordered pairs are shuffled with a fixed seed and taken
into eval.jsonl until it holds exactly eval_rows rows; the others are
train.jsonl. Rows are written sorted so the files diff well; samplers shuffle
anyway."""
import json
import os
import random


def write(folder, lo, hi, eval_rows, seed, question, answer):
    """question(a, b) -> the user message, answer(a, b) -> the answer string."""
    pairs = [(a, b) for a in range(lo, hi + 1) for b in range(a, hi + 1)]
    random.Random(seed).shuffle(pairs)
    held, n = set(), 0
    for a, b in pairs:
        rows = 1 if a == b else 2
        if n + rows <= eval_rows:
            held.add((a, b))
            n += rows
        if n == eval_rows:
            break
    split = {"eval": [], "train": []}
    for a in range(lo, hi + 1):
        for b in range(lo, hi + 1):
            split["eval" if (min(a, b), max(a, b)) in held else "train"].append((a, b))
    for name, rows in split.items():
        with open(os.path.join(folder, name + ".jsonl"), "w") as f:
            for a, b in rows:
                f.write(json.dumps({"messages": [{"role": "user", "content": question(a, b)}],
                                    "answer": answer(a, b)}) + "\n")
