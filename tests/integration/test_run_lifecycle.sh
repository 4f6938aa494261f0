#!/usr/bin/env bash
# A run that ends cleanly and says what feeds it: a trainer reaching --steps
# marks progress.json done and every worker exits 0 on its own (paused ones
# under --max-ahead auto, and the eval worker after the final version); the
# eval worker is not counted as a generating worker by pacing; heartbeats
# record each worker's dataset, rewards and chat template and grpo-ctl status
# flags the one that differs; a trainer restarted over control/stop says how to
# remove it and --clear-stop does; status on a missing folder or a closed port;
# gc removes the probe objects grpo-ctl doctor could not delete.
source "$(dirname "$0")/lib.sh"
M="$WORK/model" RUN="file://$WORK/run" D="$WORK/run"
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -64 "$ROOT/data/addition/train.jsonl" >"$WORK/a.jsonl"
tail -64 "$ROOT/data/addition/train.jsonl" >"$WORK/b.jsonl"
RW=(--reward format --format-regex '[0-9]' --reward length:0.5 --length-target 3)
COMMON=(--model "$M" --group-size 4)
ROLL=(--run "$RUN" --groups-per-shard 2 --max-new-tokens 6 --batch-size 8 --seed 7 "${RW[@]}")
export OMP_NUM_THREADS=1

echo "a run to --steps: every worker exits 0 on its own"
"$BIN/grpo-train" "${COMMON[@]}" --run "$RUN" --steps 3 --groups-per-step 2 --max-staleness 1 --lr 5e-3 \
  --lora-rank 4 --metrics "" --rollout-timeout 120 >"$WORK/train.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
# The eval worker first, so its heartbeat is there while the others pace.
timeout 180 "$BIN/grpo-rollout" --eval "${COMMON[@]}" --run "$RUN" --eval-dataset "$WORK/a.jsonl" --worker-id ev \
  "${RW[@]}" --max-new-tokens 6 >"$WORK/ev.log" 2>&1 &
EV=$!; PIDS+=($EV)
WP=()
for w in w0:a w1:a w2:b; do
  timeout 180 "$BIN/grpo-rollout" "${COMMON[@]}" "${ROLL[@]}" --dataset "$WORK/${w#*:}.jsonl" --worker-id "${w%:*}" \
    >"$WORK/roll-${w%:*}.log" 2>&1 &
  WP+=($!); PIDS+=($!)
done
check "the trainer finishes 3 steps" wait $TRAIN
check "progress.json says done, final version 3" grep -q '"final_version": 3' "$D/trainer/progress.json"
for i in 0 1 2; do
  check "worker w$i exits 0 by itself" wait "${WP[$i]}"
  check "...saying the run is done" grep -q "the run is done .*final adapter v00000003" "$WORK/roll-w$i.log"
done
check "the eval worker exits 0 by itself" wait $EV
check "...after scoring the final version" test -f "$D/eval/v00000003.json"
check "some worker paused on the way (--max-ahead auto)" bash -c "grep -h 'pausing:' '$WORK'/roll-w*.log | grep -q ."
check "pacing counts 2 other generating workers, never the eval worker" \
  bash -c "grep -h 'pausing:' '$WORK'/roll-w*.log | grep -q '2 other workers' && ! grep -h 'pausing:' '$WORK'/roll-w*.log | grep -q '3 other workers'"
check "heartbeats record role, dataset, rewards, chat template" "$(bash "$ROOT/mk/venv.sh")/bin/python" -c '
import json, sys
w = json.load(open(sys.argv[1])); e = json.load(open(sys.argv[2]))
assert w["role"] == "generating" and e["role"] == "eval", (w["role"], e["role"])
assert w["dataset"]["rows"] == 64 and len(w["dataset"]["sha256"]) == 64 and w["dataset"]["path"].endswith("b.jsonl")
assert w["rewards"]["specs"] == ["format", "length:0.5"] and w["rewards"]["format_regex"] == "[0-9]"
assert w["state"] == "finished"' "$D/workers/w2.json" "$D/workers/ev.json"

echo "grpo-ctl status"
"$BIN/grpo-ctl" status "$RUN" >"$WORK/status.out" 2>&1
check "status flags the worker with another dataset" \
  grep -Eq "^WARNING: worker w2 uses dataset .*b.jsonl \(64 rows, sha256 [0-9a-f]{12}\.\.\) while w0, w1 use .*a.jsonl" "$WORK/status.out"
check "...once (the eval worker's own dataset is not compared)" test "$(grep -c WARNING "$WORK/status.out")" = 1
check "...and shows the run done" grep -q "done: the trainer reached its --steps; final adapter v3" "$WORK/status.out"
check "...and finished workers are not LATE" bash -c "! grep -q LATE '$WORK/status.out'"
cp "$D/workers/ev.json" "$WORK/ev.json"
sed -i 's/"state": "finished"/"state": "evaluating"/; s/"time": [0-9]*/"time": 1000/' "$D/workers/ev.json"
"$BIN/grpo-ctl" status "$RUN" >"$WORK/status2.out" 2>&1
check "a busy eval worker is 'evaluating vN', not LATE" \
  bash -c "grep -E '^eval +ev .*evaluating v3 .*since [0-9]+s ago' '$WORK/status2.out' && ! grep -q LATE '$WORK/status2.out'"
cp "$WORK/ev.json" "$D/workers/ev.json"
expect_fail "status on a file:// folder that does not exist" 1 "file://$WORK/nope: no such run folder" \
  "$BIN/grpo-ctl" status "file://$WORK/nope"
check "...creates nothing" test ! -e "$WORK/nope"
PORT=$(free_port)
expect_fail "status on an endpoint that does not answer" 1 "cannot reach s3://pail-bucket/run: " \
  env AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=y "$BIN/grpo-ctl" status s3://pail-bucket/run \
  --endpoint "http://127.0.0.1:$PORT" --max-outage 1

echo "a trainer restarted over control/stop"
"$BIN/grpo-ctl" stop "$RUN" --reason "end of test" >/dev/null
timeout 120 "$BIN/grpo-train" "${COMMON[@]}" --run "$RUN" --steps 3 --groups-per-step 2 --max-staleness 1 \
  --lora-rank 4 --metrics "" >"$WORK/restart.log" 2>&1
check "exits 0 without training" test $? = 0
check "...naming control/stop, its reason and how to remove it" \
  grep -q "control/stop is there (reason: end of test; .*remove it with \`grpo-ctl rm $RUN/control/stop\`, or start grpo-train with --clear-stop" "$WORK/restart.log"
check "...and leaves it" test -f "$D/control/stop"
timeout 120 "$BIN/grpo-train" "${COMMON[@]}" --run "$RUN" --steps 3 --groups-per-step 2 --max-staleness 1 \
  --lora-rank 4 --metrics "" --clear-stop >"$WORK/clear.log" 2>&1
check "--clear-stop starts" test $? = 0
check "...removing it and saying so" bash -c "grep -q -- '--clear-stop: removed .*control/stop' '$WORK/clear.log' && test ! -e '$D/control/stop'"

echo "doctor and gc leave no probe objects"
check "doctor on the run" "$BIN/grpo-ctl" doctor --run "$RUN"
"$BIN/grpo-ctl" put "$RUN/adapters/doctor-probe-0123456789ab" "$WORK/a.jsonl" >/dev/null  # as a trainer key leaves it
"$BIN/grpo-ctl" put "$RUN/rollouts/doctor-create-only-0123456789ab" "$WORK/a.jsonl" >/dev/null
check "gc removes doctor's leftover probes" bash -c "'$BIN/grpo-ctl' gc '$RUN' --keep-versions 10 | grep -q 'deleted 2 probe object'"
check "...and none is left" bash -c "! find '$D' -name 'doctor-*' | grep -q ."
finish
