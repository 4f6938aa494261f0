#!/usr/bin/env bash
# --device sim, the stand-in device (doc/kernels.md): a trainer on it with two
# workers (one on sim, one on the CPU) and an eval worker on sim through
# grpo-relay for 20 steps gives, bit for bit, the adapters and metrics a CPU
# trainer replaying the same shards gives; so do an SFT run and grpo-ctl
# logprobs; a worker generating on sim writes the CPU worker's shards, and
# grpo-ctl eval (sampled, and --env episodes) prints the CPU's figures. A memory plan past --max-memory, a device too small for it, and a
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
same_metrics() {  # A.jsonl B.jsonl: the same lines but for the clocks (and behaviour/*: a replay
  # trains on another run's versions, so it has no staleness-0 token to compare, by design)
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
clock = {"step_seconds", "time", "tokens_per_second", "wait_seconds", "seconds"}
a, b = ([{k: v for k, v in json.loads(l).items() if k not in clock and not k.startswith("behaviour/")}
         for l in open(f)] for f in sys.argv[1:])
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for x, y in zip(a, b):
    assert x == y, {k: (x.get(k), y.get(k)) for k in set(x) | set(y) if x.get(k) != y.get(k)}
PYEOF
}

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
ROLL=(--dataset "$WORK/train.jsonl" --groups-per-shard 2 --max-new-tokens 6 --batch-size 8 --seed 7
  --reward format --format-regex '[0-9]' --reward length:0.5 --length-target 3)
for w in wa:sim wb:cpu; do
  AWS_ACCESS_KEY_ID=$RO_AK AWS_SECRET_ACCESS_KEY=$RO_SK "$BIN/grpo-rollout" "${COMMON[@]}" "${RELAY[@]}" "${ROLL[@]}" \
    --worker-id ${w%:*} --device ${w#*:} >"$WORK/roll-${w%:*}.log" 2>&1 &
  PIDS+=($!)
done
AWS_ACCESS_KEY_ID=$RO_AK AWS_SECRET_ACCESS_KEY=$RO_SK "$BIN/grpo-rollout" --eval "${COMMON[@]}" "${RELAY[@]}" \
  --eval-dataset "$WORK/train.jsonl" --reward format --format-regex '[0-9]' --max-new-tokens 6 --device sim \
  >"$WORK/eval.log" 2>&1 &
PIDS+=($!)
check "the sim trainer finishes 20 steps" wait $TR
kill "${PIDS[-1]}" "${PIDS[-2]}" "${PIDS[-3]}" 2>/dev/null
SRC="$WORK/root/runs/r1"
check "...on shards of both workers" bash -c "ls '$SRC'/rollouts/*/wa-*.h5 && ls '$SRC'/rollouts/*/wb-*.h5"
"$BIN/grpo-train" "${COMMON[@]}" "${TRAIN[@]}" --run "file://$WORK/cpu" --replay "file://$SRC" --replay-record \
  --steps 20 --device cpu --metrics "$WORK/cpu.jsonl" >"$WORK/cpu.log" 2>&1
check "a CPU trainer replays the same groups" test -f "$WORK/cpu/adapters/v00000020.h5"
check "every version's adapter is bit-identical to the sim trainer's" same_adapters "$SRC/adapters" "$WORK/cpu/adapters" 0 20
check "...and every step's metrics (but the clocks)" same_metrics "$WORK/live.jsonl" "$WORK/cpu.jsonl"
check "the steps moved the adapter" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$SRC/adapters/v00000000.h5" "$SRC/adapters/v00000020.h5" --differ
check "the sim eval worker scored versions" bash -c "ls '$SRC'/eval/*.json"

echo "generation on sim: the CPU's shards, samples and episodes"
# Two copies of the finished run: a worker on each, same id and seed, writes
# its shards from the newest adapter; only the clocks may differ.
for d in cpu sim; do
  cp -a "$SRC" "$WORK/gen-$d"  # (-a: the objects' metadata travel as extended attributes)
  rm -f "$WORK/gen-$d"/control/stop
  timeout 120 "$BIN/grpo-rollout" "${COMMON[@]}" "${ROLL[@]}" --run "file://$WORK/gen-$d" --worker-id wz --max-shards 2 \
    --max-ahead 0 --temperature 0.9 --top-k 50 --min-p 0.02 --device $d >"$WORK/gen-$d.log" 2>&1
done
same_shards() {
  "$PY" - "$WORK/gen-cpu" "$WORK/gen-sim" <<'PYEOF'
import glob, os, sys, h5py, numpy as np
a, b = (sorted(glob.glob(os.path.join(d, "rollouts", "*", "wz-*.h5"))) for d in sys.argv[1:])
assert len(a) == 2 and [os.path.relpath(x, sys.argv[1]) for x in a] == [os.path.relpath(x, sys.argv[2]) for x in b], (a, b)
for x, y in zip(a, b):
    with h5py.File(x) as f, h5py.File(y) as g:
        names = []
        f.visit(lambda n: names.append(n) if isinstance(f[n], h5py.Dataset) else None)
        assert names and "completion_ids" in " ".join(names), names
        assert f.attrs["top_k"] == 50 and f.attrs["min_p"] == 0.02, dict(f.attrs)
        for n in names:
            assert np.array_equal(f[n][()], g[n][()]), (x, n)
PYEOF
}
check "a worker generating on sim (top-k 50, min-p 0.02, temperature 0.9) writes the CPU worker's shards" same_shards
for d in cpu sim; do
  "$BIN/grpo-ctl" eval --model "$M" --adapter "$SRC/adapters/v00000020.h5" --dataset "$WORK/train.jsonl" \
    --reward format --format-regex '[0-9]' --samples 4 --temperature 1 --max-new-tokens 6 --batch-size 8 \
    --device $d >"$WORK/ev-$d.json" 2>"$WORK/ev-$d.err"
  "$BIN/grpo-ctl" eval --model "$M" --dataset "$WORK/train.jsonl" --env "python3 $ROOT/tests/integration/env_modes.py ok" \
    --chat-template "$ROOT/data/calc/chat_template.jinja" --max-turns 3 --max-new-tokens 5 \
    --max-episode-tokens 60 --batch-size 8 --temperature 1 --samples 2 --device $d >"$WORK/env-$d.json" 2>"$WORK/env-$d.err"
done
same_figures() {  # A.json B.json: the same but for the clocks
  "$PY" -c 'import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
for x in (a, b): x.pop("seconds"); x.pop("time")
assert a == b and a["prompts"] > 0, (a, b)' "$1" "$2"
}
# --serve: the same ad-hoc request (seeded, sampled) to a worker on each device.
for d in cpu sim; do
  port=$(free_port)
  "$BIN/grpo-rollout" "${COMMON[@]}" --run "file://$WORK/gen-$d" --dataset "$WORK/train.jsonl" --worker-id sv-$d \
    --chat-template "$ROOT/data/calc/chat_template.jinja" --serve "127.0.0.1:$port" --served-model-name tiny \
    --max-new-tokens 8 --max-episode-tokens 256 --max-ahead 0 --device $d >"$WORK/serve-$d.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" 2>/dev/null | grep -q adapter_version && break; sleep 0.1; done
  curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model": "tiny", "messages": [{"role": "user", "content": "12+30"}], "temperature": 1.0, "seed": 5,
         "max_tokens": 8}' >"$WORK/serve-$d.json"
  kill "${PIDS[-1]}" 2>/dev/null
done
same_reply() {
  "$PY" -c 'import json, sys
a, b = ([(c["message"], c["finish_reason"]) for c in json.load(open(f))["choices"]] for f in sys.argv[1:])
assert a == b and a[0][0]["content"], (a, b)' "$WORK/serve-cpu.json" "$WORK/serve-sim.json"
}
check "a --serve request on sim gets the CPU's answer" same_reply
check "grpo-ctl eval pass@4 on sim prints the CPU's figures" same_figures "$WORK/ev-cpu.json" "$WORK/ev-sim.json"
check "...and so do --env episodes, sampled (a KV cache kept across turns)" \
  same_figures "$WORK/env-cpu.json" "$WORK/env-sim.json"

echo "bad input: out of memory, a device failing mid-run"
REPLAY=(--replay "file://$SRC" --replay-record --steps 20 --metrics "")
expect_fail_last "a memory plan past --max-memory" 1 "memory plan needs .* on sim .* but --max-memory is 1.0 MiB \(weights" \
  "$BIN/grpo-train" "${COMMON[@]}" "${TRAIN[@]}" "${REPLAY[@]}" --run "file://$WORK/oom1" --device sim --max-memory 1M
check "...wrote nothing" test -z "$(find "$WORK/oom1" -type f 2>/dev/null)"
expect_fail_last "a device smaller than the plan" 1 \
  "cannot allocate .*; the memory plan needs .* on sim .*\(weights .*, adapter .*, activations .*\): .*--max-memory" \
  env PAIL_SIM_MEMORY=2000000 "$BIN/grpo-train" "${COMMON[@]}" "${TRAIN[@]}" "${REPLAY[@]}" --run "file://$WORK/oom2" --device sim
check "...wrote nothing" test -z "$(find "$WORK/oom2" -type f 2>/dev/null)"
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
cp -a "$SRC" "$WORK/wfail"
WF=("${COMMON[@]}" "${ROLL[@]}" --run "file://$WORK/wfail" --worker-id wf --max-shards 1 --max-ahead 0 --device sim)
expect_fail_last "a worker whose device fails mid-run: exit 1, one line" 1 "sim: op 300 \(.*\) failed: injected" \
  env PAIL_SIM_FAIL_AFTER=300 timeout 120 "$BIN/grpo-rollout" "${WF[@]}"
check "...no shard of it" bash -c "! ls '$WORK'/wfail/rollouts/*/wf-*.h5 2>/dev/null"
check "...restarted, it writes its shard" timeout 120 "$BIN/grpo-rollout" "${WF[@]}"
check "...one" test "$(ls "$WORK"/wfail/rollouts/*/wf-*.h5 | wc -l)" -eq 1
expect_fail_last "a worker on a device smaller than its plan: the plan's sizes and the flags" 1 \
  "cannot allocate .*; the memory plan needs .* on sim .*KV cache .*\): lower --batch-size, --max-new-tokens.*--max-memory" \
  env PAIL_SIM_MEMORY=8000000 timeout 120 "$BIN/grpo-rollout" "${WF[@]}"
finish
