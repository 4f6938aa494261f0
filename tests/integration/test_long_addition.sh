#!/usr/bin/env bash
# make demo-reason's task (data/long-addition/make.py), in seconds: the files are the
# same for a seed and differ for another; no held-out sum nor its mirror is in train or
# sft (checked here, apart from the script's own check); every worked trace is right
# line by line and ends in "Answer: a+b"; grpo-train --sft reads the rows (a tiny
# byte-level model, 2 steps); bad arguments are one line and exit 1. The reward side
# (exact_answer 1 on each trace, 0 with a wrong final answer) is check_rollout_reward's
# test_long_addition_traces.
source "$(dirname "$0")/lib.sh"
GEN="$ROOT/data/long-addition/make.py"
gen() { python3 "$GEN" "$@" >/dev/null; }
check "make.py writes the task" gen "$WORK/a" --train 300 --eval 100 --sft 200
gen "$WORK/b" --train 300 --eval 100 --sft 200
gen "$WORK/c" --train 300 --eval 100 --sft 200 --seed 7
check "...the same files for the same seed" diff -r "$WORK/a" "$WORK/b"
check "...other files for another seed" bash -c "! cmp -s '$WORK/a/eval.jsonl' '$WORK/c/eval.jsonl'"
check "rows: 300 train, 100 held out, 200 traces" bash -c \
  "[ \$(wc -l <'$WORK/a/train.jsonl') = 300 ] && [ \$(wc -l <'$WORK/a/eval.jsonl') = 100 ] && [ \$(wc -l <'$WORK/a/sft.jsonl') = 200 ]"
cat >"$WORK/verify.py" <<'EOF'
import json, re, sys
d = sys.argv[1]
def pairs(name):
    out = []
    for l in open(f"{d}/{name}.jsonl"):
        r = json.loads(l)
        a, b = map(int, re.match(r"What is (\d+) plus (\d+)\?", r["messages"][0]["content"]).groups())
        assert r["answer"] == str(a + b), (name, a, b, r["answer"])
        out.append((a, b, r))
    return out
held = {(min(a, b), max(a, b)) for a, b, _ in pairs("eval")}
for name in ("train", "sft"):
    shared = [(a, b) for a, b, _ in pairs(name) if (min(a, b), max(a, b)) in held]
    assert not shared, f"{name} shares {shared[:3]} with eval"
n = 0
for a, b, r in pairs("sft"):
    m = r["messages"]
    assert [x["role"] for x in m] == ["user", "assistant"]
    lines = m[1]["content"].split("\n")
    x, y, carry, digits = a, b, 0, ""
    for k, line in enumerate(lines[:-2]):
        s = x % 10 + y % 10 + carry
        digits = str(s % 10) + digits
        want = (f"Step {k + 1}: {x} + {y}. Last digits {x % 10} and {y % 10}, carry {carry}: {x % 10} + {y % 10} + "
                f"{carry} = {s}. Write {s % 10}, carry {s // 10}. Digits so far: {digits}.")
        assert line == want, (line, want)
        x, y, carry = x // 10, y // 10, s // 10
    assert x == 0 and y == 0, lines
    assert lines[-1] == f"Answer: {a + b}", lines[-1]
    n += 1
print(n, "traces right")
EOF
check "no held-out pair (nor its mirror) in train or sft; every trace right, line by line" python3 "$WORK/verify.py" "$WORK/a"
check "...also with 6 digits" bash -c "python3 '$GEN' '$WORK/d6' --digits 6 --train 50 --eval 50 --sft 50 >/dev/null && python3 '$WORK/verify.py' '$WORK/d6'"
expect_fail "more problems than a quarter of the pairs" 1 "make.py: --digits 2 with 3000 problems" \
  python3 "$GEN" "$WORK/x" --digits 2 --train 1000 --eval 1000 --sft 1000
expect_fail "--digits 1" 1 "need 2..12 digits" python3 "$GEN" "$WORK/x" --digits 1

M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$M" --model-type llama --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 \
  --vocab 257 --max-positions 1024 --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 >/dev/null 2>&1 || bad "init-model"
cp "$ROOT/data/calc/chat_template.jinja" "$M/"
head -8 "$WORK/a/sft.jsonl" >"$WORK/sft8.jsonl"
OMP_NUM_THREADS=1 "$BIN/grpo-train" --sft "$WORK/sft8.jsonl" --model "$M" --out "$WORK/sft.h5" --steps 2 \
  --groups-per-step 4 --lr 1e-3 --lora-rank 4 --token-budget 2048 --log-every 1 --metrics "" >"$WORK/sft.log" 2>&1
check "grpo-train --sft reads the traces (8 examples, none skipped) and writes an adapter" bash -c \
  "grep -q 'sft: 8 examples' '$WORK/sft.log' && ! grep -q 'rows skipped' '$WORK/sft.log' && test -s '$WORK/sft.h5'"
finish
