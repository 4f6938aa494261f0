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
TRAIN_ARGS=(--run "$RUN" --groups-per-step 2 --max-staleness 1 --lr 5e-3 --lora-rank 4 --metrics "")
# v0 first: the workers then generate and pause (--max-ahead auto) until the trainer comes.
"$BIN/grpo-train" "${COMMON[@]}" "${TRAIN_ARGS[@]}" --steps 0 >"$WORK/train0.log" 2>&1 || bad "publishing v0"
heartbeat() { local i; for i in $(seq 1 600); do [ -f "$D/workers/$1.json" ] && return 0; sleep 0.1; done; return 1; }
WP=()
roll() {  # roll ID DATASET
  timeout 180 "$BIN/grpo-rollout" "${COMMON[@]}" "${ROLL[@]}" --dataset "$WORK/$2.jsonl" --worker-id "$1" \
    >"$WORK/roll-$1.log" 2>&1 &
  WP+=($!); PIDS+=($!)
}
roll w0 a; roll w1 a
heartbeat w0 && heartbeat w1 || bad "w0 and w1 heartbeats"
timeout 180 "$BIN/grpo-rollout" --eval "${COMMON[@]}" --run "$RUN" --eval-dataset "$WORK/a.jsonl" --worker-id ev \
  "${RW[@]}" --max-new-tokens 6 >"$WORK/ev.log" 2>&1 &
EV=$!; PIDS+=($EV)
roll w2 b  # fed another dataset: it warns at start, naming the others'
heartbeat w2 && heartbeat ev || bad "w2 and ev heartbeats"
"$BIN/grpo-train" "${COMMON[@]}" "${TRAIN_ARGS[@]}" --steps 3 --rollout-timeout 120 >"$WORK/train.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
check "the trainer finishes 3 steps" wait $TRAIN
check "progress.json says done, final version 3" grep -q '"final_version": 3' "$D/trainer/progress.json"
for i in 0 1 2; do
  check "worker w$i exits 0 by itself" wait "${WP[$i]}"
  check "...saying the run is done" grep -q "the run is done .*final adapter v00000003" "$WORK/roll-w$i.log"
done
check "the worker with another dataset warns at start, naming both" grep -Eq \
  "worker w[01] of this run uses dataset .*/a.jsonl \(sha256 [0-9a-f]{12}\.\.\) where this worker has .*/b.jsonl" "$WORK/roll-w2.log"
check "...and the others do not" bash -c "! grep -q 'of this run uses' '$WORK/roll-w0.log' '$WORK/roll-w1.log'"
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
assert "answer_field" not in w["rewards"], w["rewards"]  # no exact_answer: no answer field read
assert w["state"] == "finished"' "$D/workers/w2.json" "$D/workers/ev.json"

echo "grpo-ctl status"
"$BIN/grpo-ctl" status "$RUN" >"$WORK/status.out" 2>&1
check "status flags the worker with another dataset" \
  grep -Eq "^WARNING: worker w2 uses dataset .*b.jsonl \(64 rows, sha256 [0-9a-f]{12}\.\.\) while w0, w1 use .*a.jsonl" "$WORK/status.out"
check "...once (the eval worker's own dataset is not compared)" test "$(grep -c "^WARNING: worker" "$WORK/status.out")" = 1
check "...and shows the run done" grep -q "done: the trainer reached its --steps; final adapter v3" "$WORK/status.out"
check "...and finished workers are not LATE" bash -c "! grep -q LATE '$WORK/status.out'"
cp "$D/workers/w2.json" "$WORK/w2.json"
sed -i 's/"state": "finished"/"state": "failed"/' "$D/workers/w2.json"
"$BIN/grpo-ctl" status "$RUN" >"$WORK/status-failed.out" 2>&1
check "a failed worker (restarted since with other flags) is shown but no longer compared: no WARNING" \
  bash -c "grep -Eq '^worker +w2 .* failed' '$WORK/status-failed.out' && ! grep -q '^WARNING: worker' '$WORK/status-failed.out'"
cp "$WORK/w2.json" "$D/workers/w2.json"
cp "$D/workers/ev.json" "$WORK/ev.json"
sed -i 's/"state": "finished"/"state": "evaluating"/; s/"time": [0-9]*/"time": 1000/' "$D/workers/ev.json"
"$BIN/grpo-ctl" status "$RUN" >"$WORK/status2.out" 2>&1
check "a busy eval worker is 'evaluating vN', not LATE" \
  bash -c "grep -E '^eval +ev .*evaluating v3 .*since [0-9]+s ago' '$WORK/status2.out' && ! grep -q LATE '$WORK/status2.out'"
now=$(date +%s)
sed -i "s/\"time\": 1000/\"time\": $((now - 2)), \"busy_since\": $((now - 100))/" "$D/workers/ev.json"
"$BIN/grpo-ctl" status "$RUN" >"$WORK/status3.out" 2>&1
check "an evaluation under way 100 s, heartbeat fresh: 'evaluating v3 since 100s', not LATE" \
  bash -c "grep -E '^eval +ev .*evaluating v3 .* since 10[0-9]s ago' '$WORK/status3.out' && ! grep -q LATE '$WORK/status3.out'"
sed -i "s/\"time\": $((now - 2))/\"time\": $((now - 40))/" "$D/workers/ev.json"
"$BIN/grpo-ctl" status "$RUN" >"$WORK/status4.out" 2>&1
check "...its heartbeat 40 s old: LATE, saying how old" \
  bash -c "grep -E '^eval +ev .*evaluating v3 .* LATE since 10[0-9]s ago' '$WORK/status4.out' && grep -q 'its heartbeat is 4[0-9]s old' '$WORK/status4.out'"
cp "$WORK/ev.json" "$D/workers/ev.json"
expect_fail "status on a file:// folder that does not exist" 1 "file://$WORK/nope: no such run folder" \
  "$BIN/grpo-ctl" status "file://$WORK/nope"
check "...creates nothing" test ! -e "$WORK/nope"
expect_fail "stop on a file:// folder that does not exist" 1 "file://$WORK/nope has no run.json: not a run \(no such folder; nothing written\)" \
  "$BIN/grpo-ctl" stop "file://$WORK/nope"
check "...creates nothing" test ! -e "$WORK/nope"
PORT=$(free_port)
expect_fail "status on an endpoint that does not answer" 1 "cannot reach s3://pail-bucket/run: " \
  env AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=y "$BIN/grpo-ctl" status s3://pail-bucket/run \
  --endpoint "http://127.0.0.1:$PORT" --max-outage 1

echo "a worker started on a run already done works on (a trainer may continue the run)"
timeout 60 "$BIN/grpo-rollout" "${COMMON[@]}" "${ROLL[@]}" --dataset "$WORK/a.jsonl" --worker-id w4 --max-shards 1 \
  --max-ahead 0 >"$WORK/roll-w4.log" 2>&1
check "it writes its shard and exits 0" bash -c "[ $? = 0 ] && ls '$D'/rollouts/*/w4-*.h5"
check "...having said the run is done" grep -q "the run is done (final adapter v00000003) as this worker starts: working on, for a trainer started again with more --steps" "$WORK/roll-w4.log"
timeout 60 "$BIN/grpo-rollout" "${COMMON[@]}" "${ROLL[@]}" --dataset "$WORK/a.jsonl" --worker-id w5 >"$WORK/roll-w5.log" 2>&1
check "with --max-ahead auto it exits 0 once its shards would wait unused" bash -c "[ $? = 0 ] && grep -q 'the run is done and [0-9]* of its shards wait unused' '$WORK/roll-w5.log'"

echo "a trainer restarted over control/stop"
"$BIN/grpo-ctl" stop "$RUN" --reason "end of test" >/dev/null
timeout 120 "$BIN/grpo-train" "${COMMON[@]}" "${TRAIN_ARGS[@]}" --steps 4 >"$WORK/restart.log" 2>&1
check "exits 1 without training" bash -c "[ $? = 1 ] && grep -q '\"step\": 3' '$D/trainer/progress.json'"
check "...naming control/stop, its reason and how to remove it" \
  grep -q "control/stop is there (reason: end of test; .*remove it with \`grpo-ctl rm $RUN/control/stop\`, or start grpo-train with --clear-stop" "$WORK/restart.log"
check "...and leaves it" test -f "$D/control/stop"
"$BIN/grpo-train" "${COMMON[@]}" "${TRAIN_ARGS[@]}" --steps 4 --clear-stop --rollout-timeout 120 >"$WORK/clear.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
for i in $(seq 1 600); do [ -e "$D/control/stop" ] || break; sleep 0.1; done
timeout 180 "$BIN/grpo-rollout" "${COMMON[@]}" "${ROLL[@]}" --dataset "$WORK/a.jsonl" --worker-id w3 >"$WORK/roll-w3.log" 2>&1 &
W3=$!; PIDS+=($W3)
check "--clear-stop: the trainer continues the run to step 4" wait $TRAIN
check "...having removed control/stop and said so" bash -c "grep -q -- '--clear-stop: removed .*control/stop' '$WORK/clear.log' && test ! -e '$D/control/stop'"
check "the worker that fed it exits 0 at the new end" wait $W3
check "...saying so" grep -q "the run is done .*final adapter v00000004" "$WORK/roll-w3.log"

echo "grpo-ctl stop while the trainer holds shards for more steps: it stops after the current step"
R2="file://$WORK/run2" D2="$WORK/run2"
T2=(--run "$R2" --groups-per-step 2 --max-staleness 100 --lr 5e-3 --lora-rank 4)  # no --metrics: no local file
mkdir -p "$WORK/cwd" && cd "$WORK/cwd"
"$BIN/grpo-train" "${COMMON[@]}" "${T2[@]}" --steps 0 >"$WORK/s0.log" 2>&1 || bad "publishing v0 of run2"
timeout 120 "$BIN/grpo-rollout" "${COMMON[@]}" "${ROLL[@]/$RUN/$R2}" --dataset "$WORK/a.jsonl" --worker-id s0 \
  --max-shards 8 --max-ahead 0 >"$WORK/roll-s0.log" 2>&1 || bad "8 shards for run2"
"$BIN/grpo-train" "${COMMON[@]}" "${T2[@]}" --steps 20 >"$WORK/s1.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
for i in $(seq 1 600); do [ -e "$D2/metrics/step-00000001.json" ] && break; sleep 0.05; done
kill -STOP $TRAIN  # held between two steps' checks: the stop lands while shards for 7 more steps wait
at=$(ls "$D2"/metrics/step-*.json | wc -l)
"$BIN/grpo-ctl" stop "$R2" --reason "stop now" >/dev/null
kill -CONT $TRAIN
check "the trainer exits 0" wait $TRAIN
end=$(ls "$D2"/metrics/step-*.json | wc -l)
check "...after the step it was in (steps: $at when stopped, $end at exit, of 8 held)" test "$end" -le $((at + 1))
check "...saying so" grep -q "control/stop found after step $end: stopping" "$WORK/s1.log"
check "without --metrics the trainer writes no metrics.jsonl where it was started" test ! -e "$WORK/cwd/metrics.jsonl"
cd "$ROOT"

echo "doctor and gc leave no probe objects"
check "doctor on the run" "$BIN/grpo-ctl" doctor --run "$RUN"
"$BIN/grpo-ctl" put "$RUN/adapters/doctor-probe-0123456789ab" "$WORK/a.jsonl" >/dev/null  # as a trainer key leaves it
"$BIN/grpo-ctl" put "$RUN/rollouts/doctor-create-only-0123456789ab" "$WORK/a.jsonl" >/dev/null
check "gc removes doctor's leftover probes" bash -c "'$BIN/grpo-ctl' gc '$RUN' --keep-versions 10 | grep -q 'deleted 2 probe object'"
check "...and none is left" bash -c "! find '$D' -name 'doctor-*' | grep -q ."
finish
