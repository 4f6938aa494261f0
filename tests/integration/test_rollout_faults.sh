#!/usr/bin/env bash
# The rollout worker under bad input, on file:// buckets with a tiny random
# model: prompts longer than --max-prompt-tokens (one of 10 MB) are skipped and
# counted (rollout and --eval); a worker id over 64 characters is refused.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
M="$WORK/model"
CTL="$BIN/grpo-ctl"
"$CTL" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -16 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
RW=(--reward format --format-regex '[0-9]')
ROLL=("$BIN/grpo-rollout" --model "$M" --group-size 4 --max-new-tokens 4 --batch-size 8 --max-ahead 0 "${RW[@]}")
export OMP_NUM_THREADS=1

# new_run NAME STALENESS: a run with v0 published (the trainer stops at step 0).
new_run() {
  "$BIN/grpo-train" --model "$M" --group-size 4 --run "file://$WORK/$1" --steps 0 --lora-rank 4 \
    --metrics "" --max-staleness "$2" >"$WORK/train-$1.log" 2>&1 || bad "trainer for $1"
}
# count PATTERN FILE: lines matching (grep -E)
count() { grep -Ec -- "$1" "$2"; }

echo "prompts longer than --max-prompt-tokens"
new_run long 4
RUN="file://$WORK/long"
{ head -2 "$WORK/train.jsonl"
  "$PY" -c 'import json; print(json.dumps({"prompt": "1+" * 100 + "1=", "answer": "101"}))'
  sed -n 3,8p "$WORK/train.jsonl"; } >"$WORK/long.jsonl"
# --num-workers 1: the rows in file order, so the long row (line 3) is drawn in the first shard.
"${ROLL[@]}" --run "$RUN" --dataset "$WORK/long.jsonl" --worker-id wl --num-workers 1 --groups-per-shard 4 \
  --max-shards 3 --max-prompt-tokens 64 >"$WORK/long.log" 2>&1
check "a long row: the worker finishes (exit 0)" test $? -eq 0
check "...one line naming the row and its length" \
  test "$(count 'long.jsonl:3: prompt has 202 tokens .*--max-prompt-tokens.*skipped' "$WORK/long.log")" -eq 1
check "...its shards are written" test "$(ls "$WORK"/long/rollouts/v00000000/wl-*.h5 | wc -l)" -eq 3
check "...the heartbeat counts the skipped row" grep -q '"skipped_prompts": 1' "$WORK/long/workers/wl.json"
check "...no shard holds the row" "$PY" -c '
import glob, sys, h5py
rows = [int(r) for f in sorted(glob.glob(sys.argv[1])) for r in h5py.File(f, "r")["prompt_index"][:]]
assert 2 not in rows and len(rows) == 12, rows' "$WORK/long/rollouts/v00000000/wl-*.h5"

"$PY" -c 'import json; print(json.dumps({"prompt": "1+2 " * 2500000 + "=", "answer": "3"}))' >"$WORK/huge.jsonl"
head -4 "$WORK/train.jsonl" >>"$WORK/huge.jsonl"
"${ROLL[@]}" --run "$RUN" --dataset "$WORK/huge.jsonl" --worker-id wh --num-workers 1 --groups-per-shard 2 \
  --max-shards 2 >"$WORK/huge.log" 2>&1
check "a 10 MB prompt: the worker finishes (exit 0)" test $? -eq 0
check "...and names the row and its length" grep -q 'huge.jsonl:1: prompt has 10000001 tokens' "$WORK/huge.log"
check "...its shards are written" test "$(ls "$WORK"/long/rollouts/v00000000/wh-*.h5 | wc -l)" -eq 2

"${ROLL[@]}" --run "$RUN" --eval --eval-dataset "$WORK/long.jsonl" --worker-id ev --max-shards 1 \
  --max-prompt-tokens 64 >"$WORK/long-eval.log" 2>&1
check "--eval with a long row: finishes (exit 0)" test $? -eq 0
check "...one line naming the row and its length" \
  test "$(count 'long.jsonl:3: prompt has 202 tokens .*skipped' "$WORK/long-eval.log")" -eq 1
check "...the result counts it" "$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["prompts"] == 8 and r["skipped_prompts"] == 1, r' "$WORK/long/eval/v00000000.json"
"$CTL" eval --model "$M" --dataset "$WORK/huge.jsonl" >"$WORK/huge-eval.out" 2>"$WORK/huge-eval.log"
check "grpo-ctl eval with a 10 MB prompt: finishes (exit 0)" test $? -eq 0
check "...and counts it" grep -q '"skipped_prompts": 1' "$WORK/huge-eval.out"
{ "$PY" -c 'import json; print(json.dumps({"prompt": "1+" * 100 + "1=", "answer": "101"}))'; } >"$WORK/all-long.jsonl"
expect_fail_last "a dataset with no row short enough: refused" 1 "all-long.jsonl.*no row.*--max-prompt-tokens 64" \
  "${ROLL[@]}" --run "$RUN" --dataset "$WORK/all-long.jsonl" --worker-id wal --max-shards 1 --max-prompt-tokens 64

echo "worker ids"
LONG_ID=$(printf 'w%.0s' $(seq 1 65))
expect_fail "a 65-character --worker-id is refused" 2 "worker id .*1 to 64 characters" \
  "${ROLL[@]}" --run "file://$WORK/long" --dataset "$WORK/train.jsonl" --worker-id "$LONG_ID" --max-shards 1
check "...before writing anything" bash -c "! ls '$WORK'/long/rollouts/*/www* 2>/dev/null"
finish
