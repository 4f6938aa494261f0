#!/usr/bin/env bash
# --device sim, the stand-in device (doc/kernels.md): a trainer on it with two
# workers (on the CPU: generation is not on the backend yet) through
# grpo-relay for 20 steps gives, bit for bit, the adapters and metrics a CPU
# trainer replaying the same shards gives; so do an SFT run and grpo-ctl
# logprobs. A memory plan past --max-memory, a device too small for it, and a
# device failing mid-run each end the trainer with one line and exit 1,
# leaving nothing half-written, and a restart resumes as after a kill.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"
PY=$(venv)/bin/python
M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -64 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
head -200 "$ROOT/data/addition/sft.jsonl" >"$WORK/sft.jsonl"
export OMP_NUM_THREADS=1
COMMON=(--model "$M" --group-size 4)
TRAIN=(--groups-per-step 2 --lr 5e-3 --lora-rank 4)
same_adapters() {  # DIR_A DIR_B FIRST LAST: adapters vFIRST..vLAST bit-identical
  local v
  for v in $(seq "$3" "$4"); do
    v=$(printf %08d "$v")
    "$PY" "$ROOT/validation/train/compare_adapters.py" "$1/v$v.h5" "$2/v$v.h5" >/dev/null || { echo "v$v differs"; return 1; }
  done
}
same_metrics() {  # A.jsonl B.jsonl: the same lines but for the clocks
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
clock = {"step_seconds", "time", "tokens_per_second", "wait_seconds", "seconds"}
a, b = ([{k: v for k, v in json.loads(l).items() if k not in clock} for l in open(f)] for f in sys.argv[1:])
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for x, y in zip(a, b):
    assert x == y, {k: (x.get(k), y.get(k)) for k in set(x) | set(y) if x.get(k) != y.get(k)}
PYEOF
}

echo "generation refuses sim in this release"
expect_fail "grpo-rollout --device sim" 1 "generation is not on the backend yet in this release: use --device cpu" \
  "$BIN/grpo-rollout" "${COMMON[@]}" --run "file://$WORK/x" --dataset "$WORK/train.jsonl" --device sim
expect_fail "grpo-ctl eval --device sim" 1 "generation is not on the backend yet" \
  "$BIN/grpo-ctl" eval --model "$M" --dataset "$WORK/train.jsonl" --device sim
check "...and nothing was written" test ! -e "$WORK/x"

echo "SFT and logprobs: sim gives the CPU's bits"
for d in cpu sim; do
  check "sft LoRA --device $d" "$BIN/grpo-train" --sft "$WORK/sft.jsonl" --model "$M" --out "$WORK/sft-$d.h5" \
    --steps 8 --groups-per-step 8 --lr 3e-3 --lora-rank 4 --log-every 2 --metrics "$WORK/sft-$d.jsonl" --device $d
done
check "the SFT adapters are bit-identical" "$PY" "$ROOT/validation/train/compare_adapters.py" "$WORK/sft-cpu.h5" "$WORK/sft-sim.h5"
check "...and so are the losses and gradient norms" same_metrics "$WORK/sft-cpu.jsonl" "$WORK/sft-sim.jsonl"
expect_fail_last "sft --full refuses sim (the base weights are trained in host memory)" 1 "--device sim is for LoRA" \
  "$BIN/grpo-train" --sft "$WORK/sft.jsonl" --full --model "$M" --out "$WORK/full" --steps 1 --device sim
printf '{"ids": [1, 5, 9, 33, 7]}\n{"ids": [4, 4, 200, 18]}\n{"ids": [3]}\n' >"$WORK/ids.jsonl"
for d in cpu sim; do
  "$BIN/grpo-ctl" logprobs --model "$M" --input "$WORK/ids.jsonl" --device $d >"$WORK/lp-$d.out" 2>"$WORK/lp-$d.err"
  "$BIN/grpo-ctl" logprobs --model "$M" --adapter "$WORK/sft-cpu.h5" --input "$WORK/ids.jsonl" --token-budget 6 \
    --device $d >"$WORK/lpa-$d.out" 2>>"$WORK/lp-$d.err"
done
check "grpo-ctl logprobs: sim prints the CPU's numbers" cmp "$WORK/lp-cpu.out" "$WORK/lp-sim.out"
check "...with an adapter, over several packed rows" cmp "$WORK/lpa-cpu.out" "$WORK/lpa-sim.out"
check "...which differ from the base model's" bash -c "! cmp -s '$WORK/lp-cpu.out' '$WORK/lpa-cpu.out'"

echo "the loop: a sim trainer and two workers through grpo-relay, 20 steps"
start_relay || { bad "relay"; finish; exit 1; }
export AWS_CA_BUNDLE=$RELAY_CA AWS_REGION=us-east-1
RELAY=(--run s3://pail/runs/r1 --endpoint "$RELAY_URL")
AWS_ACCESS_KEY_ID=$TR_AK AWS_SECRET_ACCESS_KEY=$TR_SK "$BIN/grpo-train" "${COMMON[@]}" "${RELAY[@]}" "${TRAIN[@]}" \
  --steps 20 --device sim --metrics "$WORK/live.jsonl" --rollout-timeout 120 >"$WORK/live.log" 2>&1 &
TR=$!; PIDS+=($TR)
for w in wa wb; do
  AWS_ACCESS_KEY_ID=$RO_AK AWS_SECRET_ACCESS_KEY=$RO_SK "$BIN/grpo-rollout" "${COMMON[@]}" "${RELAY[@]}" \
    --dataset "$WORK/train.jsonl" --worker-id $w --groups-per-shard 2 --max-new-tokens 6 --batch-size 8 --seed 7 \
    --reward format --format-regex '[0-9]' --reward length:0.5 --length-target 3 --device cpu \
    >"$WORK/roll-$w.log" 2>&1 &
  PIDS+=($!)
done
check "the sim trainer finishes 20 steps" wait $TR
kill "${PIDS[-1]}" "${PIDS[-2]}" 2>/dev/null
SRC="$WORK/root/runs/r1"
check "...on shards of both workers" bash -c "ls '$SRC'/rollouts/*/wa-*.h5 && ls '$SRC'/rollouts/*/wb-*.h5"
"$BIN/grpo-train" "${COMMON[@]}" "${TRAIN[@]}" --run "file://$WORK/cpu" --replay "file://$SRC" --replay-record \
  --steps 20 --device cpu --metrics "$WORK/cpu.jsonl" >"$WORK/cpu.log" 2>&1
check "a CPU trainer replays the same groups" test -f "$WORK/cpu/adapters/v00000020.h5"
check "every version's adapter is bit-identical to the sim trainer's" same_adapters "$SRC/adapters" "$WORK/cpu/adapters" 0 20
check "...and every step's metrics (but the clocks)" same_metrics "$WORK/live.jsonl" "$WORK/cpu.jsonl"
check "the steps moved the adapter" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$SRC/adapters/v00000000.h5" "$SRC/adapters/v00000020.h5" --differ

echo "bad input: out of memory, a device failing mid-run"
REPLAY=(--replay "file://$SRC" --replay-record --steps 20 --metrics "")
expect_fail_last "a memory plan past --max-memory" 1 "memory plan needs .* on sim .* but --max-memory is 1.0 MiB \(weights" \
  "$BIN/grpo-train" "${COMMON[@]}" "${TRAIN[@]}" "${REPLAY[@]}" --run "file://$WORK/oom1" --device sim --max-memory 1M
check "...wrote nothing" test ! -e "$WORK/oom1"
expect_fail_last "a device smaller than the plan" 1 \
  "cannot allocate .*; the memory plan needs .* on sim .*\(weights .*, adapter .*, activations .*\): .*--max-memory" \
  env PAIL_SIM_MEMORY=2000000 "$BIN/grpo-train" "${COMMON[@]}" "${TRAIN[@]}" "${REPLAY[@]}" --run "file://$WORK/oom2" --device sim
check "...wrote nothing" test ! -e "$WORK/oom2"
expect_fail_last "the device fails mid-run: exit 1, one line" 1 \
  "sim: op 700 \(.*\) failed: injected by PAIL_SIM_FAIL_AFTER=700" \
  env PAIL_SIM_FAIL_AFTER=700 "$BIN/grpo-train" "${COMMON[@]}" "${TRAIN[@]}" "${REPLAY[@]}" --run "file://$WORK/fail" --device sim
n=$(ls "$WORK/fail/adapters" | grep -c '^v.*\.h5$')
check "...after some versions, not all ($n of 21)" test "$n" -gt 1 -a "$n" -lt 21
whole() {  # every adapter the failed run published has its state and the CPU run's bits
  local f v
  for f in "$WORK"/fail/adapters/v*.h5; do
    v=$(basename "$f" .h5)
    test -f "$WORK/fail/trainer/state-$v.h5" || { echo "no state for $v"; return 1; }
    "$PY" "$ROOT/validation/train/compare_adapters.py" "$f" "$WORK/cpu/adapters/$v.h5" >/dev/null || return 1
  done
}
check "...each one whole: its state, and the CPU run's bits" whole
"$BIN/grpo-train" "${COMMON[@]}" "${TRAIN[@]}" "${REPLAY[@]}" --run "file://$WORK/fail" --device sim >"$WORK/restart.log" 2>&1
check "a restart resumes from the bucket" grep -q "resumed from trainer/state-v$(printf %08d $((n - 1))): step $((n - 1))," \
  "$WORK/restart.log"
# The reference: a CPU trainer stopped after the same version, then resumed
# (a resumed --replay-record takes the rest of the record in another order
# than one uninterrupted replay, so the uninterrupted run is not it).
"$BIN/grpo-train" "${COMMON[@]}" "${TRAIN[@]}" "${REPLAY[@]}" --run "file://$WORK/cpu-k" --device cpu --steps $((n - 1)) \
  >"$WORK/cpu-k.log" 2>&1
"$BIN/grpo-train" "${COMMON[@]}" "${TRAIN[@]}" "${REPLAY[@]}" --run "file://$WORK/cpu-k" --device cpu >>"$WORK/cpu-k.log" 2>&1
check "...and ends where a CPU trainer stopped and resumed there does, bit for bit" \
  same_adapters "$WORK/fail/adapters" "$WORK/cpu-k/adapters" $((n - 1)) 20
finish
