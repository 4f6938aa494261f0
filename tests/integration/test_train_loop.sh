#!/usr/bin/env bash
# The async loop on a file:// bucket with a tiny random model: one trainer and
# two rollout workers as separate processes; then offline replay (two replays
# give bit-identical adapters), resume after a kill between the state and the
# adapter write, a corrupt shard rejected, and the usage errors.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
M="$WORK/model" RUN="file://$WORK/run"
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -64 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
# Rewards with spread on a random model: a digit somewhere, and a length penalty.
RW=(--reward format --format-regex '[0-9]' --reward length:0.5 --length-target 3)
COMMON=(--model "$M" --group-size 4)
export OMP_NUM_THREADS=1

"$BIN/grpo-train" "${COMMON[@]}" --run "$RUN" --steps 4 --groups-per-step 4 --lr 5e-3 --lora-rank 4 \
  --metrics "$WORK/metrics.jsonl" --rollout-timeout 120 >"$WORK/train.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
for w in wa wb; do
  "$BIN/grpo-rollout" "${COMMON[@]}" --run "$RUN" --dataset "$WORK/train.jsonl" --worker-id "$w" \
    --groups-per-shard 2 --max-new-tokens 6 --batch-size 8 --max-shards 4 --seed 7 "${RW[@]}" \
    >"$WORK/roll-$w.log" 2>&1 &
  PIDS+=($!)
done
check "trainer finishes 4 steps" wait $TRAIN
D="$WORK/run"
check "adapter versions v0..v4 published" test -f "$D/adapters/v00000004.h5" -a -f "$D/adapters/v00000000.h5"
check "a state per version" test -f "$D/trainer/state-v00000004.h5"
check "metrics per step in the bucket" test -f "$D/metrics/step-00000004.json"
check "local metrics.jsonl has 4 lines" test "$(wc -l <"$WORK/metrics.jsonl")" -eq 4
check "shards from both workers" bash -c "ls '$D'/rollouts/*/wa-*.h5 && ls '$D'/rollouts/*/wb-*.h5"
check "heartbeats" test -f "$D/workers/wa.json" -a -f "$D/workers/wb.json"
check "the trainer's publish line has its parts" grep -Eq 'published adapter v00000004 \(step 4\) in [0-9.]+ s \([0-9]+ MB; serialise [0-9.]+ s, state put [0-9.]+ s \([0-9]+ MB\), adapter put [0-9.]+ s\)' "$WORK/train.log"
# Any version: on a busy machine the other worker's shards can make v1 before this one's first load.
check "a worker says each adapter's load and its first tokens" bash -c "grep -Eq 'adapter v[0-9]+ loaded in [0-9.]+ s \([0-9]+ MB, fetch [0-9.]+ s, parse [0-9.]+ s, attach [0-9.]+ s\)' '$WORK/roll-wa.log' && grep -Eq 'adapter v[0-9]+: first tokens [0-9.]+ s after its load' '$WORK/roll-wa.log'"
check "run.json has the manifest" grep -q '"base_sha256"' "$D/run.json"
check "grpo-ctl status shows the run" bash -c "'$BIN/grpo-ctl' status '$RUN' --steps 4 | grep -q 'trainer  step 4/4'"
check "grpo-ctl plot draws the reward curve" bash -c "'$BIN/grpo-ctl' plot '$RUN' --out '$WORK/curve.svg' && grep -c '<polyline' '$WORK/curve.svg' | grep -q '^[23]'"
check "training moved the adapter" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$D/adapters/v00000000.h5" "$D/adapters/v00000004.h5" --differ
for w in wa wb; do wait "${PIDS[-1]}" 2>/dev/null; done

echo "no learning signal: every group's rewards equal (a named cmd reward that answers 1 to all)"
FR="file://$WORK/flat"
printf 'while IFS= read -r l; do echo 1; done\n' >"$WORK/one.sh"
"$BIN/grpo-train" "${COMMON[@]}" --run "$FR" --steps 0 --lora-rank 4 >/dev/null 2>&1 || bad "flat run v0"
"$BIN/grpo-rollout" "${COMMON[@]}" --run "$FR" --dataset "$WORK/train.jsonl" --worker-id wf --groups-per-shard 2 \
  --max-new-tokens 4 --batch-size 8 --max-shards 4 --max-ahead 0 --reward cmd:one --reward-cmd "one=sh $WORK/one.sh" \
  --temperature 0.01 >"$WORK/roll-flat.log" 2>&1 || bad "flat run shards"  # near greedy: no EOS in 4 tokens, all cut off
"$BIN/grpo-train" "${COMMON[@]}" --run "$FR" --steps 4 --groups-per-step 2 --max-staleness 100 --lr 5e-3 \
  --lora-rank 4 >"$WORK/flat.log" 2>&1 || bad "flat run trainer"
check "the trainer warns after 3 such steps, naming the fraction and the usual causes" \
  grep -q "step 3: no learning signal: 100% of the groups of the last 3 steps had equal rewards .*temperature.*same value.*too easy.*too hard" "$WORK/flat.log"
check "...once (not at every step)" test "$(grep -c 'no learning signal' "$WORK/flat.log")" = 1
check "...and its metric, frac_reward_zero_std, is 1" grep -q '"frac_reward_zero_std":1.0,' "$WORK/flat/metrics/step-00000004.json"
check "...and the named cmd reward its own metric, rewards/cmd:one/mean" grep -q '"rewards/cmd:one/mean":1.0' "$WORK/flat/metrics/step-00000004.json"
check "grpo-ctl status says so" bash -c "'$BIN/grpo-ctl' status '$FR' | grep -q '^WARNING: no learning signal: 100% of the groups of the last 4 steps'"
echo "truncation: every completion at --max-new-tokens 4 and no reward spread"
check "the trainer says NOTHING IS LEARNED at each step, naming the flag and its value" \
  test "$(grep -c 'NOTHING IS LEARNED: every completion of the step (8) hit the generation budget, --max-new-tokens 4, .*raise --max-new-tokens' "$WORK/flat.log")" = 4
check "...its metrics: completions/clipped_ratio 1, the lengths, the budget" bash -c "grep -q '\"completions/clipped_ratio\":1.0,' '$WORK/flat/metrics/step-00000004.json' && grep -q '\"completions/max_length\":4,' '$WORK/flat/metrics/step-00000004.json' && grep -q '\"max_new_tokens\":4,' '$WORK/flat/metrics/step-00000004.json'"
"$BIN/grpo-ctl" status "$FR" >"$WORK/status-flat.out" 2>&1
check "grpo-ctl status shows the lengths and the share cut off" grep -q '^         completions 4 tokens mean, 4 max; 100% hit the budget of 4 (clipped_ratio)' "$WORK/status-flat.out"
check "...and the louder warning" grep -q '^WARNING: NOTHING IS LEARNED: every completion of the step (8)' "$WORK/status-flat.out"
check "the run with reward spread has its clipped_ratio in [0, 1] and no louder warning" bash -c "grep -Eq '\"completions/clipped_ratio\":(0|1)\\.[0-9]+' '$D/metrics/step-00000004.json' && ! grep -q 'NOTHING IS LEARNED' '$WORK/train.log'"
check "...and not for the run with reward spread" bash -c "! '$BIN/grpo-ctl' status '$RUN' | grep -q 'no learning signal'"

echo "replay: two replays of the same shards give bit-identical adapters"
for r in r1 r2; do
  "$BIN/grpo-train" "${COMMON[@]}" --run "file://$WORK/$r" --replay "$RUN" --steps 3 --groups-per-step 2 \
    --lr 5e-3 --lora-rank 4 --metrics "" >"$WORK/$r.log" 2>&1
  check "replay $r" test -f "$WORK/$r/adapters/v00000003.h5"
done
check "replays are bit-identical" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$WORK/r1/adapters/v00000003.h5" "$WORK/r2/adapters/v00000003.h5"
check "replay changed the adapter" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$WORK/r1/adapters/v00000000.h5" "$WORK/r1/adapters/v00000003.h5" --differ

echo "resume after a kill between the state and the adapter write"
rm -f "$WORK/r1/adapters/v00000003.h5" "$WORK/r1/adapters/.pail-meta.v00000003.h5"
"$BIN/grpo-train" "${COMMON[@]}" --run "file://$WORK/r1" --replay "$RUN" --steps 3 --groups-per-step 2 \
  --lr 5e-3 --lora-rank 4 --metrics "" >"$WORK/resume.log" 2>&1
check "resume re-published the missed adapter" grep -q "published the missed adapter v00000003" "$WORK/resume.log"
check "...with the bytes of the first run's adapter" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$WORK/r1/adapters/v00000003.h5" "$WORK/r2/adapters/v00000003.h5"
"$BIN/grpo-train" "${COMMON[@]}" --run "file://$WORK/r1" --replay "$RUN" --steps 5 --groups-per-step 2 \
  --lr 5e-3 --lora-rank 4 --metrics "" >"$WORK/resume2.log" 2>&1
"$BIN/grpo-train" "${COMMON[@]}" --run "file://$WORK/r3" --replay "$RUN" --steps 5 --groups-per-step 2 \
  --lr 5e-3 --lora-rank 4 --metrics "" >"$WORK/straight.log" 2>&1
check "3 steps + resume + 2 steps = 5 steps straight (no group trained twice or skipped)" \
  "$PY" "$ROOT/validation/train/compare_adapters.py" "$WORK/r1/adapters/v00000005.h5" "$WORK/r3/adapters/v00000005.h5"

echo "--dynamic-sampling: groups without reward spread are consumed, not trained"
# A binary reward on a random model: many groups of 4 all-wrong or all-right.
# --max-ahead 1: the shards the trainer has taken while still short of a
# step's groups must not hold the worker in a pause (they did: a deadlock).
DS="file://$WORK/ds"
"$BIN/grpo-train" "${COMMON[@]}" --run "$DS" --steps 3 --groups-per-step 4 --lr 5e-3 --lora-rank 4 --dynamic-sampling \
  --metrics "$WORK/ds.jsonl" --rollout-timeout 120 >"$WORK/ds-train.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
"$BIN/grpo-rollout" "${COMMON[@]}" --run "$DS" --dataset "$WORK/train.jsonl" --worker-id wd --groups-per-shard 2 \
  --max-new-tokens 6 --batch-size 8 --max-ahead 1 --seed 11 --reward format --format-regex '[0-9]' \
  >"$WORK/roll-wd.log" 2>&1 &
WD=$!; PIDS+=($WD)
check "trainer finishes 3 steps, the worker never held in a pause" wait $TRAIN
kill $WD 2>/dev/null; wait $WD 2>/dev/null
cat >"$WORK/flat.py" <<'PYEOF'
import glob, json, sys
import h5py
import numpy as np
# flat groups in every shard of a run (the worker is stopped: the replay below reads the same
# shards); per-step metrics: each step 4 groups, all with spread
flat = total = 0
for f in sorted(glob.glob(sys.argv[1] + "/rollouts/*/*.h5")):
    with h5py.File(f) as h:
        r, v, g = h["rewards"][:], h["reward_valid"][:], h["group"][:]
    for p in np.unique(g):
        rv = r[(g == p) & (v == 1)]
        total += 1
        flat += len(rv) < 2 or rv.min() == rv.max()
rows = [json.loads(l) for l in open(sys.argv[2])]
assert all(x["groups"] == 4 and x["frac_reward_zero_std"] == 0 for x in rows), rows
print(flat, total, sum(x["groups_filtered"] for x in rows), rows[-1]["groups_filtered_total"])
PYEOF
read -r nflat ntotal sumf lastf < <("$PY" "$WORK/flat.py" "$WORK/ds" "$WORK/ds.jsonl" 2>"$WORK/flat.err") || true
check "every trained step had 4 groups with spread (metrics)" test -n "$nflat"
check "flat groups were dropped ($sumf of them; groups_filtered_total agrees)" test "${sumf:-0}" -gt 0 -a "$sumf" = "$lastf"
"$BIN/grpo-train" "${COMMON[@]}" --run "file://$WORK/ds-replay" --replay "$DS" --steps 1000 --groups-per-step 4 --lr 5e-3 \
  --lora-rank 4 --dynamic-sampling --metrics "" >"$WORK/ds-replay.log" 2>&1
check "a replay of every shard drops exactly the flat groups h5py finds ($nflat of $ntotal)" \
  grep -q "groups without reward spread dropped ${nflat:-x}\$" "$WORK/ds-replay.log"
check "...and trains the others" test -f "$WORK/ds-replay/adapters/v$(printf %08d $(( (ntotal - nflat) / 4 ))).h5"
"$BIN/grpo-train" "${COMMON[@]}" --run "file://$WORK/ds-rec" --replay "$DS" --replay-record --steps 3 --groups-per-step 4 \
  --lr 5e-3 --lora-rank 4 --metrics "" >"$WORK/ds-rec.log" 2>&1
check "replaying its record gives the live run's adapter, bit for bit" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$WORK/ds/adapters/v00000003.h5" "$WORK/ds-rec/adapters/v00000003.h5"

echo "a corrupt shard is rejected, recorded, and training goes on"
head -c 5000 /dev/urandom >"$WORK/junk.h5"
"$BIN/grpo-ctl" put --versioned "$RUN/rollouts/v00000004/aa-000001.h5" "$WORK/junk.h5" >/dev/null
"$BIN/grpo-rollout" "${COMMON[@]}" --run "$RUN" --dataset "$WORK/train.jsonl" --worker-id wc \
  --groups-per-shard 4 --max-new-tokens 6 --batch-size 8 --max-shards 2 --max-ahead 0 "${RW[@]}" \
  >"$WORK/roll-wc.log" 2>&1 &
PIDS+=($!)
"$BIN/grpo-train" "${COMMON[@]}" --run "$RUN" --steps 5 --groups-per-step 4 --lr 5e-3 --lora-rank 4 \
  --metrics "" --rollout-timeout 60 >"$WORK/train2.log" 2>&1
check "the trainer resumed and finished step 5" test -f "$D/adapters/v00000005.h5"
check "the junk shard is recorded under trainer/rejected/" test -f "$D/trainer/rejected/rollouts/v00000004/aa-000001.h5.json"
check "...with the reason" grep -q "not an HDF5 file" "$D/trainer/rejected/rollouts/v00000004/aa-000001.h5.json"
check "metrics count it" grep -q '"shards_rejected": *1' "$D/metrics/step-00000005.json"

echo "retention"
check "grpo-ctl gc --dry-run deletes nothing" bash -c "'$BIN/grpo-ctl' gc '$RUN' --keep-versions 2 --max-staleness 1 --dry-run > '$WORK/gc.out'"
check "...and says what it would delete" grep -q "would delete 4 adapters, 4 trainer states" "$WORK/gc.out"
check "grpo-ctl gc --keep-versions 2" "$BIN/grpo-ctl" gc "$RUN" --keep-versions 2 --max-staleness 1
check "old versions are gone" test ! -e "$D/adapters/v00000003.h5" -a ! -e "$D/trainer/state-v00000003.h5"
check "the newest two and the newest state stay" test -f "$D/adapters/v00000004.h5" -a -f "$D/trainer/state-v00000005.h5"
check "no rollout version below the cutoff" bash -c "! ls -d '$D'/rollouts/v0000000[0-3] 2>/dev/null"

echo "usage errors"
expect_fail "missing --run" 2 "required" "$BIN/grpo-train" --model "$M"
expect_fail "bad --loss" 2 "--loss" "$BIN/grpo-train" --model "$M" --run "$RUN" --loss ppo
expect_fail_last "another LoRA rank on the same run" 1 "lora" "$BIN/grpo-train" "${COMMON[@]}" --run "$RUN" --steps 6 --lora-rank 8
expect_fail_last "a model folder that does not exist" 1 "no-such-model" "$BIN/grpo-train" --model "$WORK/no-such-model" --run "$RUN"
expect_fail "rollout: missing dataset" 2 "required" "$BIN/grpo-rollout" --model "$M" --run "$RUN"
finish
