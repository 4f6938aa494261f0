#!/usr/bin/env bash
# The async loop with multi-turn episodes (grpo-rollout --env, doc/environments.md),
# a tiny random model and tests/integration/env_modes.py (3 turns an episode,
# tool results between them, reward: a digit in the last turn): one trainer and
# one worker on a file:// bucket, then the same through grpo-relay (TLS, per-role
# keys). The trainer trains on the episodes' rows: its metrics show their turns
# and that only the model's tokens are trained; the adapter moves; a replay of
# the stored episode shards gives the same adapter.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"
PY=$(venv)/bin/python
M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
cp "$ROOT/data/calc/chat_template.jinja" "$M/chat_template.jinja"
head -32 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
export OMP_NUM_THREADS=1
COMMON=(--model "$M" --group-size 4)
TRAIN_FLAGS=(--steps 3 --groups-per-step 2 --lr 5e-3 --lora-rank 4 --rollout-timeout 120)
ROLL_FLAGS=(--dataset "$WORK/train.jsonl" --groups-per-shard 2 --batch-size 8 --max-shards 3 --seed 7
  --max-new-tokens 5 --max-turns 3 --max-episode-tokens 48 --env-timeout 10)

# loop NAME URL [store flags...]: trainer + one --env worker; ok when the trainer finishes 3 steps.
loop() {
  local name=$1 url=$2; shift 2
  mkdir -p "$WORK/st-$name"
  "$BIN/grpo-train" "${COMMON[@]}" --run "$url" "$@" "${TRAIN_FLAGS[@]}" --metrics "$WORK/$name-metrics.jsonl" \
    >"$WORK/$name-train.log" 2>&1 &
  local train=$!; PIDS+=($train)
  "$BIN/grpo-rollout" "${COMMON[@]}" --run "$url" "$@" "${ROLL_FLAGS[@]}" --worker-id "w-$name" \
    --env "python3 $ROOT/tests/integration/env_modes.py ok $WORK/st-$name" >"$WORK/$name-roll.log" 2>&1 &
  PIDS+=($!)
  check "$name: the trainer finishes 3 steps on episode shards" wait $train
  wait "${PIDS[-1]}" 2>/dev/null
}
metrics_ok() {  # FILE: every step trained multi-turn rows, on fewer tokens than they hold
  "$PY" - "$1" <<'PYEOF'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
assert len(steps) == 3, len(steps)
for s in steps:
    assert s["completions/mean_turns"] > 2.5, s["completions/mean_turns"]
    assert 0 < s["completions/mean_trained_tokens"] < s["completions/mean_length"], s
PYEOF
}

echo "file://"
loop file "file://$WORK/run"
check "...its metrics: 3 turns an episode, only the model's tokens trained" metrics_ok "$WORK/file-metrics.jsonl"
check "...the worker's shards are episode shards (mask 0 tokens, 3 turns)" "$PY" -c '
import glob, sys, h5py
fs = sorted(glob.glob(sys.argv[1] + "/rollouts/*/w-file-*.h5"))
assert fs
for f in fs:
    h = h5py.File(f, "r")
    assert h.attrs["format_version"] == 2 and h.attrs["max_new_tokens"] == 48
    m = h["completion_mask"][:]
    assert 0 < m.sum() < len(m) and (h["logprobs"][:][m == 0] == 0).all()
    assert (h["turns"][:] == 3).all()' "$WORK/run"
check "...training moved the adapter" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$WORK/run/adapters/v00000000.h5" "$WORK/run/adapters/v00000003.h5" --differ
"$BIN/grpo-train" "${COMMON[@]}" --run "file://$WORK/replay" --replay "file://$WORK/run" --replay-record \
  "${TRAIN_FLAGS[@]}" --metrics "" >"$WORK/replay.log" 2>&1
check "...a replay of its episode shards gives the same adapter" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$WORK/run/adapters/v00000003.h5" "$WORK/replay/adapters/v00000003.h5"

echo "after --steps, a worker in the middle of a batch"
# The worker's second batch waits on an environment that never answers its steps (--env-timeout
# 300); only then does a trainer take the first shard and reach --steps 1. The worker used to
# finish the whole batch (48 s with a 1.5 s environment; here 300 s) before it looked at the run;
# it now sees the run done within seconds, sends "cancel" for the open episodes and exits 0.
mkdir -p "$WORK/st-steps"
STEPS_TR=("$BIN/grpo-train" "${COMMON[@]}" --run "file://$WORK/steps" --groups-per-step 2 --lora-rank 4 --metrics "")
"${STEPS_TR[@]}" --steps 0 >"$WORK/steps-train0.log" 2>&1 || bad "trainer --steps 0"
"$BIN/grpo-rollout" "${COMMON[@]}" --run "file://$WORK/steps" "${ROLL_FLAGS[@]}" --env-timeout 300 --worker-id w-steps \
  --env "python3 $ROOT/tests/integration/env_modes.py stall $WORK/st-steps" >"$WORK/steps-roll.log" 2>&1 &
ROLL=$!; PIDS+=($ROLL)
for _ in $(seq 600); do grep -q 'w-steps/1\.' "$WORK/st-steps/requests.jsonl" 2>/dev/null && break; sleep 0.1; done
check "the worker's second batch is under way" grep -q 'w-steps/1\.' "$WORK/st-steps/requests.jsonl"
check "a trainer then takes its first shard and reaches --steps 1" "${STEPS_TR[@]}" --steps 1 --rollout-timeout 120
for _ in $(seq 60); do kill -0 $ROLL 2>/dev/null || break; sleep 0.5; done
if kill -0 $ROLL 2>/dev/null; then bad "...the worker still runs 30 s after the trainer finished"; kill $ROLL
else
  wait $ROLL; rc=$?
  check "...the worker exits 0 within 30 s" test $rc -eq 0
fi
check "...saying it cancelled its batch" grep -q "the run is done: the open episodes of this batch are cancelled" "$WORK/steps-roll.log"
check "...and the program got a cancel for each open episode of it" "$PY" -c '
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
started = {r["id"] for r in reqs if r["type"] == "start" and "/1." in r["id"]}
cancelled = {r["id"] for r in reqs if r["type"] == "cancel"}
assert started and started <= cancelled, (sorted(started), sorted(cancelled))' "$WORK/st-steps/requests.jsonl"

echo "through grpo-relay"
start_relay || { bad "relay"; finish; exit 1; }
export AWS_CA_BUNDLE=$RELAY_CA AWS_REGION=us-east-1
AWS_ACCESS_KEY_ID=$TR_AK AWS_SECRET_ACCESS_KEY=$TR_SK \
  "$BIN/grpo-train" "${COMMON[@]}" --run s3://pail/runs/r1 --endpoint "$RELAY_URL" "${TRAIN_FLAGS[@]}" \
  --metrics "$WORK/relay-metrics.jsonl" >"$WORK/relay-train.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
mkdir -p "$WORK/st-relay"
AWS_ACCESS_KEY_ID=$RO_AK AWS_SECRET_ACCESS_KEY=$RO_SK \
  "$BIN/grpo-rollout" "${COMMON[@]}" --run s3://pail/runs/r1 --endpoint "$RELAY_URL" "${ROLL_FLAGS[@]}" \
  --worker-id w-relay --env "python3 $ROOT/tests/integration/env_modes.py ok $WORK/st-relay" \
  >"$WORK/relay-roll.log" 2>&1 &
PIDS+=($!)
check "relay: the trainer finishes 3 steps on episode shards" wait $TRAIN
check "...its metrics: 3 turns an episode, only the model's tokens trained" metrics_ok "$WORK/relay-metrics.jsonl"
check "...the shards went through the relay into its root" \
  bash -c "ls '$WORK'/root/runs/r1/rollouts/*/w-relay-*.h5 >/dev/null"
finish
