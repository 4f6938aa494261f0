#!/usr/bin/env bash
# The rollout worker under bad input, on file:// buckets with a tiny random
# model: prompts longer than --max-prompt-tokens (one of 10 MB) are skipped and
# counted (rollout and --eval); a corrupt newest adapter (truncated, flipped
# bytes, junk HDF5 under a right hash) is reported once and the worker falls back
# to the newest version that verifies inside the staleness window, or waits for
# the next version with --max-staleness 0; a worker id over 64 characters is
# refused; a worker restarted with the same id continues its prompt stream; a
# shard whose version left the trainer's window while it was generated is not
# written (it would never be listed), said and counted.
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
check "...and names the row and its length, refused by its bytes before tokenizing" \
  grep -q 'huge.jsonl:1: prompt has 10000001 bytes, more than 1024 tokens can hold (53248: --max-prompt-tokens): row skipped' "$WORK/huge.log"
check "...its shards are written" test "$(ls "$WORK"/long/rollouts/v00000000/wh-*.h5 | wc -l)" -eq 2
# One 32 MB word (one pre-tokenizer piece): merging it took ~30 bytes a byte (a 1 GiB word, tens of
# GB: the worker was OOM-killed and crash-looped on the row). Now refused by its bytes, bounded work.
"$PY" -c 'import json; print(json.dumps({"prompt": "a" * (32 << 20), "answer": "3"}))' >"$WORK/word.jsonl"
head -4 "$WORK/train.jsonl" >>"$WORK/word.jsonl"
/usr/bin/time -f "%M KB" -o "$WORK/word.rss" "${ROLL[@]}" --run "$RUN" --dataset "$WORK/word.jsonl" --worker-id ww \
  --num-workers 1 --groups-per-shard 2 --max-shards 1 >"$WORK/word.log" 2>&1
check "a 32 MB word: the worker finishes (exit 0)" test "$(grep -c 'exited with non-zero' "$WORK/word.rss")" -eq 0
check "...the row named and skipped" grep -q 'word.jsonl:1: prompt has 33554432 bytes, more than .*: row skipped' "$WORK/word.log"
check "...within 400 MB ($(tail -1 "$WORK/word.rss"))" test "$(sed -n 's/ KB//p' "$WORK/word.rss" | tail -1)" -lt 400000
check "...the heartbeat counts it" grep -q '"skipped_prompts": 1' "$WORK/long/workers/ww.json"

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

echo "a corrupt newest adapter"
new_run bad 3
RUN="file://$WORK/bad"
A="$WORK/bad/adapters"
cp "$A/v00000000.h5" "$WORK/v0.h5"
"$CTL" put --versioned "$RUN/adapters/v00000001.h5" "$WORK/v0.h5" >/dev/null
"$CTL" put --versioned "$RUN/adapters/v00000002.h5" "$WORK/v0.h5" >/dev/null
"$CTL" put --versioned "$RUN/adapters/v00000003.h5" "$WORK/v0.h5" >/dev/null
head -c 5000 /dev/urandom >"$WORK/junk.h5"
"$CTL" put --versioned "$RUN/adapters/v00000004.h5" "$WORK/junk.h5" >/dev/null
truncate -s 30000 "$A/v00000002.h5"                                            # truncated
printf '\xff\xff\xff\xff' | dd of="$A/v00000003.h5" bs=1 seek=20000 conv=notrunc 2>/dev/null  # flipped bytes
"${ROLL[@]}" --run "$RUN" --dataset "$WORK/train.jsonl" --worker-id wa --groups-per-shard 2 --max-shards 2 \
  >"$WORK/bad.log" 2>&1
check "the worker finishes (exit 0)" test $? -eq 0
check "...names the junk adapter once" test "$(count 'adapters/v00000004.h5.*HDF5' "$WORK/bad.log")" -eq 1
check "...the flipped one once" test "$(count 'adapters/v00000003.h5.*sha256' "$WORK/bad.log")" -eq 1
check "...the truncated one once" test "$(count 'adapters/v00000002.h5.*sha256' "$WORK/bad.log")" -eq 1
check "...and generates with v1" test "$(ls "$WORK"/bad/rollouts/v00000001/wa-*.h5 | wc -l)" -eq 2
"${ROLL[@]}" --run "$RUN" --dataset "$WORK/train.jsonl" --worker-id wa2 --groups-per-shard 2 --max-shards 1 \
  >"$WORK/bad2.log" 2>&1
check "another worker started later generates with v1 too" test $? -eq 0 -a -f "$WORK/bad/rollouts/v00000001/wa2-000000.h5"
"${ROLL[@]}" --run "$RUN" --eval --eval-dataset "$WORK/train.jsonl" --worker-id ev --max-shards 2 \
  >"$WORK/bad-eval.log" 2>&1
check "the eval worker finishes (exit 0)" test $? -eq 0
check "...names the bad adapters" test "$(count 'adapters/v0000000[234].h5' "$WORK/bad-eval.log")" -eq 3
check "...and evaluates v0 and v1" test -f "$WORK/bad/eval/v00000000.json" -a -f "$WORK/bad/eval/v00000001.json"

echo "a corrupt newest adapter with --max-staleness 0"
new_run strict 0
RUN="file://$WORK/strict"
"$CTL" put --versioned "$RUN/adapters/v00000001.h5" "$WORK/junk.h5" >/dev/null
"${ROLL[@]}" --run "$RUN" --dataset "$WORK/train.jsonl" --worker-id ws --groups-per-shard 2 --max-shards 1 \
  >"$WORK/strict.log" 2>&1 &
WS=$!; PIDS+=($WS)
"${ROLL[@]}" --run "$RUN" --eval --eval-dataset "$WORK/train.jsonl" --worker-id evs --max-shards 2 \
  >"$WORK/strict-eval.log" 2>&1 &
EV=$!; PIDS+=($EV)
for i in $(seq 1 100); do
  grep -q "waiting for the next version" "$WORK/strict.log" && grep -q "waiting for the next version" \
    "$WORK/strict-eval.log" && break
  sleep 0.1
done
check "the worker says it waits for the next version" grep -q 'adapters/v00000001.h5.*waiting for the next version' "$WORK/strict.log"
check "...and is still running" kill -0 $WS
check "the eval worker says so too" grep -q 'adapters/v00000001.h5.*waiting for the next version' "$WORK/strict-eval.log"
check "...and is still running" kill -0 $EV
sleep 1.5
"$CTL" put --versioned "$RUN/adapters/v00000002.h5" "$WORK/v0.h5" >/dev/null
for i in $(seq 1 300); do kill -0 $WS 2>/dev/null || kill -0 $EV 2>/dev/null || break; sleep 0.1; done
wait $WS
check "the worker then generates with v2 and exits 0" test $? -eq 0 -a -f "$WORK/strict/rollouts/v00000002/ws-000000.h5"
check "...having said it waits once" test "$(count 'waiting for the next version' "$WORK/strict.log")" -eq 1
wait $EV
check "the eval worker evaluates v2 and exits 0" test $? -eq 0 -a -f "$WORK/strict/eval/v00000002.json"
check "...never v1" test ! -f "$WORK/strict/eval/v00000001.json"

echo "a shard whose version left the trainer's window while it was generated is not written"
# The reward program holds the shard until $WORK/go exists; meanwhile the
# trainer (played here: adapters v1..v5 and its progress.json) moves to v5 with
# --max-staleness 1, so a v0 shard would never be listed: lost, uncounted.
new_run late 1
RUN="file://$WORK/late"
cat >"$WORK/hold.sh" <<HOLD
#!/bin/sh
while read -r line; do
  i=0; while [ ! -e "$WORK/go" ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done
  echo 1
done
HOLD
chmod +x "$WORK/hold.sh"
"${ROLL[@]}" --run "$RUN" --dataset "$WORK/train.jsonl" --worker-id wk --groups-per-shard 2 --max-shards 1 \
  --reward cmd --reward-cmd "$WORK/hold.sh" >"$WORK/late.log" 2>&1 &
WK=$!; PIDS+=($WK)
for i in $(seq 1 200); do grep -q "using adapter v00000000" "$WORK/late.log" && break; sleep 0.1; done
cp "$WORK/late/adapters/v00000000.h5" "$WORK/late-v0.h5"
for v in 1 2 3 4 5; do "$CTL" put --versioned "$RUN/adapters/v0000000$v.h5" "$WORK/late-v0.h5" >/dev/null; done
"$PY" -c '
import json, sys
p = json.load(open(sys.argv[1])); p["version"] = 5; p["step"] = 5
json.dump(p, open(sys.argv[2], "w"))' "$WORK/late/trainer/progress.json" "$WORK/progress5.json"
"$CTL" put "$RUN/trainer/progress.json" "$WORK/progress5.json" >/dev/null
touch "$WORK/go"
wait $WK
check "the worker finishes (exit 0)" test $? -eq 0
check "...writes no shard of v0" bash -c "! ls '$WORK'/late/rollouts/v00000000/wk-*.h5 2>/dev/null"
check "...says why, naming the trainer's version" grep -q \
  "shard of adapter v00000000 not written (1 so far): the trainer is at v00000005 .*--max-staleness" "$WORK/late.log"
check "...and writes its shard with v5 instead" test -f "$WORK/late/rollouts/v00000005/wk-000000.h5"
check "...counted in its heartbeat" grep -q '"shards_not_written_stale": 1' "$WORK/late/workers/wk.json"

echo "worker ids"
LONG_ID=$(printf 'w%.0s' $(seq 1 65))
expect_fail "a 65-character --worker-id is refused" 2 "worker id .*1 to 64 characters" \
  "${ROLL[@]}" --run "file://$WORK/long" --dataset "$WORK/train.jsonl" --worker-id "$LONG_ID" --max-shards 1
check "...before writing anything" bash -c "! ls '$WORK'/long/rollouts/*/www* 2>/dev/null"

echo "a worker restarted with the same id continues its prompt stream"
new_run ref 4
new_run resume 4
RS=(--dataset "$WORK/train.jsonl" --worker-id wr --groups-per-shard 2 --seed 7)
"${ROLL[@]}" --run "file://$WORK/ref" "${RS[@]}" --max-shards 6 >"$WORK/ref.log" 2>&1
check "reference: 6 shards in one go" test "$(ls "$WORK"/ref/rollouts/v00000000/wr-*.h5 | wc -l)" -eq 6
"${ROLL[@]}" --run "file://$WORK/resume" "${RS[@]}" --max-shards 2 >"$WORK/resume1.log" 2>&1
check "first start says it starts from the beginning" grep -q 'wr: no earlier shard or heartbeat.*beginning' "$WORK/resume1.log"
rm "$WORK/resume/workers/wr.json"
"${ROLL[@]}" --run "file://$WORK/resume" "${RS[@]}" --max-shards 2 >"$WORK/resume2.log" 2>&1
check "restart without a heartbeat resumes from its last shard" grep -q 'resuming after 4 prompts.*wr-000001.h5' "$WORK/resume2.log"
"${ROLL[@]}" --run "file://$WORK/resume" "${RS[@]}" --max-shards 2 >"$WORK/resume3.log" 2>&1
check "restart with both resumes too" grep -q 'resuming after 8 prompts' "$WORK/resume3.log"
check "2 + 2 + 2 shards hold the prompts of 6 straight (no replay)" "$PY" -c '
import glob, sys, h5py
def rows(d):
    fs = sorted(glob.glob(d + "/rollouts/v00000000/wr-*.h5"))
    return [int(r) for f in fs for r in h5py.File(f, "r")["prompt_index"][:]], [f[-9:-3] for f in fs]
a, ka = rows(sys.argv[1]); b, kb = rows(sys.argv[2])
assert a == b, (a, b)
assert ka == kb, (ka, kb)' "$WORK/ref" "$WORK/resume"
"$CTL" rm "file://$WORK/resume/rollouts/v00000000/wr-000005.h5" >/dev/null
"${ROLL[@]}" --run "file://$WORK/resume" "${RS[@]}" --max-shards 1 >"$WORK/resume4.log" 2>&1
check "restart after its last shard is gone resumes from its heartbeat" \
  grep -q 'resuming after 12 prompts drawn (from workers/wr.json)' "$WORK/resume4.log"
finish
