#!/usr/bin/env bash
# The trainer under the faults a probe found (issue "Fix what a fault probe
# found"), on a file:// bucket with a tiny random model, replaying stored
# shards so every run is deterministic:
#   - a shard with an extreme log-prob is rejected; one whose values are in
#     bounds but overflow the importance ratio is skipped as a non-finite step,
#     and no non-finite adapter is ever published;
#   - a corrupt or deleted newest trainer state, or a state that disagrees with
#     its adapter, is refused naming the keys; --resume-from continues without
#     rewriting anything published; a newest adapter damaged while the trainer
#     was down is published again from the state;
#   - metrics belong to committed steps: a kill right after a commit loses none,
#     and kill -9 at random points gives the straight run's metrics, each step
#     once, in the bucket and in the local file;
#   - a newest adapter corrupted in the bucket is published again by the
#     waiting trainer (with --max-staleness 0 workers have nothing else);
#   - reward component names in metrics, a deleted run.json, stale temp files,
#     and grpo-ctl status on an unreadable progress.json.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
M="$WORK/model" SRC="file://$WORK/src"
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -64 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
RW=(--reward format --format-regex '[0-9]' --reward length:0.5 --length-target 3)
COMMON=(--model "$M" --group-size 4)
TR=(--groups-per-step 2 --lr 5e-3 --lora-rank 4)
export OMP_NUM_THREADS=1

# Shards to replay: one trainer and one worker.
"$BIN/grpo-train" "${COMMON[@]}" "${TR[@]}" --run "$SRC" --steps 3 --metrics "" --rollout-timeout 120 \
  >"$WORK/src-train.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
"$BIN/grpo-rollout" "${COMMON[@]}" --run "$SRC" --dataset "$WORK/train.jsonl" --worker-id wa \
  --groups-per-shard 2 --max-new-tokens 6 --batch-size 8 --max-shards 21 --max-ahead 0 --seed 3 "${RW[@]}" \
  >"$WORK/src-roll.log" 2>&1 &
ROLL=$!; PIDS+=($ROLL)
check "source run: trainer" wait $TRAIN
check "source run: worker wrote 21 shards" wait $ROLL
D="$WORK/src"
check "metrics name the reward components (not rewards/(null)/mean)" \
  bash -c "grep -q '\"rewards/format/mean\"' '$D/metrics/step-00000001.json' && ! grep -q '(null)' '$D/metrics/step-00000001.json'"

replay() {  # replay NAME SOURCE_DIR STEPS [flags]: a replay run under $WORK/NAME, its log in $WORK/NAME.log
  local name=$1 src=$2 steps=$3; shift 3
  "$BIN/grpo-train" "${COMMON[@]}" "${TR[@]}" --run "file://$WORK/$name" --replay "file://$src" --steps "$steps" \
    "$@" 2>"$WORK/$name.log"
  local rc=$?
  cat "$WORK/$name.log" >&2
  return $rc
}
finite_adapters() {  # every adapter of a run loads and is finite
  "$PY" - "$1" <<'EOF'
import glob, sys
import h5py, numpy as np
files = sorted(glob.glob(sys.argv[1] + "/adapters/v*.h5"))
assert files, "no adapters"
for f in files:
    with h5py.File(f, "r") as h:
        names = []
        h.visit(lambda n: names.append(n) if isinstance(h[n], h5py.Dataset) else None)
        for n in names:
            assert np.isfinite(h[n][:]).all(), f"{f}: {n} is not finite"
print(len(files), "adapters finite")
EOF
}

echo "extreme values: the probe's shard is rejected, an overflowing one is a skipped step"
cp -a "$D" "$WORK/src2"
first=$(ls "$D"/rollouts/v00000000/*.h5 | head -1)
"$PY" - "$first" "$WORK" <<'EOF'
import shutil, sys
import h5py, numpy as np
src, work = sys.argv[1], sys.argv[2]
for name, value in (("aaa", -1.34e38), ("aab", -1000.0)):
    dst = f"{work}/{name}.h5"
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as h:
        lp = h["logprobs"][:]
        if name == "aaa":
            lp[0] = value          # the probe's value: finite, <= 0, absurd
        else:
            lp[:] = value          # in bounds, but exp(new - old) overflows
        h["logprobs"][:] = lp
        h.attrs["worker_id"] = name
EOF
"$BIN/grpo-ctl" put --versioned "file://$WORK/src2/rollouts/v00000000/aaa-000001.h5" "$WORK/aaa.h5" >/dev/null
"$BIN/grpo-ctl" put --versioned "file://$WORK/src2/rollouts/v00000000/aab-000001.h5" "$WORK/aab.h5" >/dev/null
# --train-zero-advantage: the overflowing shard's groups may have no reward
# spread, and the trainer would then leave them out of the forward (their
# gradient is 0) and never meet the overflow this checks.
check "replay over the bad shards finishes 4 steps" replay p1 "$WORK/src2" 4 --metrics "$WORK/p1.jsonl" \
  --train-zero-advantage
check "the -1.34e38 shard is rejected with the reason" grep -q \
  "rejected rollouts/v00000000/aaa-000001.h5: .*logprobs\[0\] = -1.34e+38 is outside \[-1000, 0\]" "$WORK/p1.log"
check "...recorded under trainer/rejected/" grep -q "outside" \
  "$WORK/p1/trainer/rejected/rollouts/v00000000/aaa-000001.h5.json"
check "the overflowing step is skipped, naming its shard" grep -q \
  "step 1 skipped (1 so far): non-finite gradients .* of rollouts/v00000000/aab-000001.h5" "$WORK/p1.log"
check "every published adapter is finite" finite_adapters "$WORK/p1"
check "v4 is the 4th trained step" test -f "$WORK/p1/adapters/v00000004.h5"
check "metrics count the skipped step" grep -q '"steps_skipped": *1' "$WORK/p1/metrics/step-00000004.json"
check "...and the rejected shard" grep -q '"shards_rejected": *1' "$WORK/p1/metrics/step-00000004.json"
check "local metrics: steps 1..4 once each" "$PY" -c "
import json, sys
steps = [json.loads(l)['step'] for l in open('$WORK/p1.jsonl')]
sys.exit(0 if steps == [1, 2, 3, 4] else print(steps) or 1)"

echo "resume: a corrupt or deleted newest state is refused, --resume-from continues"
replay r "$D" 3 --metrics "" 2>/dev/null
check "run r has state v3" test -f "$WORK/r/trainer/state-v00000003.h5"
R="$WORK/r/trainer/state-v00000003.h5"
cp -a "$R" "$WORK/state3.bak"
printf 'garbage' | dd of="$R" bs=1 seek=4000 conv=notrunc 2>/dev/null
expect_fail_last "a corrupt newest state is refused with what to do" 1 \
  "trainer/state-v00000003.h5.*sha256.*nothing was changed: to continue from the previous state pass --resume-from 2" \
  replay r "$D" 5 --metrics ""
check "...and nothing was published" test ! -e "$WORK/r/adapters/v00000004.h5"
rm -f "$R" "$WORK/r/trainer/.pail-meta.state-v00000003.h5"
sha_v3=$(sha256sum <"$WORK/r/adapters/v00000003.h5")
expect_fail_last "a deleted newest state is refused (no fork)" 1 \
  "adapters/v00000003 is newer than the newest trainer state trainer/state-v00000002.h5.*--resume-from 2" \
  replay r "$D" 5 --metrics ""
check "...the state is not rewritten" test ! -e "$R"
check "--resume-from 2 continues" replay r "$D" 5 --metrics "" --resume-from 2
check "...saying what it keeps" grep -q "versions v00000003..v00000003 stay as published, the next is v00000004" "$WORK/r.log"
check "...adapters/v3 is untouched" test "$(sha256sum <"$WORK/r/adapters/v00000003.h5")" = "$sha_v3"
check "...v5 published with its state" test -f "$WORK/r/adapters/v00000005.h5" -a -f "$WORK/r/trainer/state-v00000005.h5"
check "a plain restart then resumes from state v5" bash -c "'$BIN/grpo-train' ${COMMON[*]} ${TR[*]} --run 'file://$WORK/r' --replay 'file://$D' --steps 5 --metrics '' 2>&1 | grep -q 'resumed from trainer/state-v00000005: step 5'"
# A state that disagrees with its adapter (written by another trainer).
replay ra "$D" 3 --metrics "" 2>/dev/null
replay rb "$D" 3 --metrics "" --lr 1e-3 2>/dev/null
rm -f "$WORK/ra/trainer/state-v00000003.h5" "$WORK/ra/trainer/.pail-meta.state-v00000003.h5"
"$BIN/grpo-ctl" put --versioned "file://$WORK/ra/trainer/state-v00000003.h5" "$WORK/rb/trainer/state-v00000003.h5" >/dev/null
expect_fail_last "a state that disagrees with its adapter is refused naming both" 1 \
  "trainer/state-v00000003.h5 and adapters/v00000003.h5 disagree.*--resume-from 2" replay ra "$D" 5 --metrics ""

# The newest adapter damaged in the bucket while the trainer was down: the
# state holds the adapter's exact bytes, so the restart resumes and publishes
# the same weights again as the next version (as a live trainer does).
replay rc "$D" 3 --metrics "" 2>/dev/null
printf 'garbage' | dd of="$WORK/rc/adapters/v00000003.h5" bs=1 seek=3000 conv=notrunc 2>/dev/null
check "a restart after the newest adapter was damaged goes on" replay rc "$D" 5 --metrics ""
check "...saying it publishes v3's weights again as v4" grep -q \
  "adapters/v00000003.h5 does not verify .*publishing its weights again as v00000004" "$WORK/rc.log"
check "...v4 holds v3's weights (the state's copy), v5 is trained" "$PY" - "$WORK/rc" <<'EOF2'
import io, sys
import h5py, numpy as np
d = sys.argv[1]
s3 = h5py.File(io.BytesIO(bytes(h5py.File(d + "/trainer/state-v00000003.h5", "r")["adapter_image"][:])), "r")
a4 = h5py.File(d + "/adapters/v00000004.h5", "r")
names = []
a4.visit(lambda n: names.append(n) if isinstance(a4[n], h5py.Dataset) else None)
assert names and all(np.array_equal(s3[n][:], a4[n][:]) for n in names)
assert a4.attrs["step"] == 3, a4.attrs["step"]
assert h5py.File(d + "/adapters/v00000006.h5", "r").attrs["step"] == 5
EOF2

echo "metrics belong to committed steps"
replay m1 "$D" 3 --metrics "$WORK/m1.jsonl" 2>/dev/null
rm -f "$WORK/m1/metrics/step-00000003.json" "$WORK/m1/metrics/.pail-meta.step-00000003.json"
sed -i '$d' "$WORK/m1.jsonl"
printf '{"step": 3, "rew' >>"$WORK/m1.jsonl"   # killed mid-line
check "a restart after a kill right after the commit" replay m1 "$D" 3 --metrics "$WORK/m1.jsonl"
check "...writes the lost step's metrics from the state" grep -q "wrote the metrics of 1 committed step" "$WORK/m1.log"
check "...into the bucket" test -f "$WORK/m1/metrics/step-00000003.json"
check "...and the local file: steps 1..3 once, every line JSON" "$PY" -c "
import json, sys
steps = [json.loads(l)['step'] for l in open('$WORK/m1.jsonl')]
sys.exit(0 if steps == [1, 2, 3] else print(steps) or 1)"

# kill -9 at the commit's windows and at random times; the killed run must end
# with the straight run's metrics.
N=20
replay straight "$D" $N --metrics "$WORK/straight.jsonl" 2>/dev/null
"$PY" "$ROOT/tests/integration/kill_trainer.py" "$WORK/killed" 12 "$RANDOM" -- \
  "$BIN/grpo-train" "${COMMON[@]}" "${TR[@]}" --run "file://$WORK/killed" --replay "file://$D" --steps $N \
  --metrics "$WORK/killed.jsonl" >"$WORK/kills.out" 2>&1
echo "  $(cat "$WORK/kills.out")"
check "the killed run finished" test -f "$WORK/killed/adapters/v000000$N.h5"
check "...with the straight run's adapter" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$WORK/killed/adapters/v000000$N.h5" "$WORK/straight/adapters/v000000$N.h5"
check "...and its metrics, each step once (bucket and local file)" "$PY" - "$WORK" $N <<'EOF'
import glob, json, sys
w, n = sys.argv[1], int(sys.argv[2])
keys = ("step", "version", "reward", "loss", "kl", "grad_norm", "shards_consumed")
def load(lines):
    return [{k: d[k] for k in keys} for d in map(json.loads, lines)]
straight = load(open(f"{w}/straight.jsonl"))
local = load(open(f"{w}/killed.jsonl"))
bucket = load(open(f).read() for f in sorted(glob.glob(f"{w}/killed/metrics/step-*.json")))
assert [d["step"] for d in straight] == list(range(1, n + 1)), straight
assert local == straight, ("local", local, straight)
assert bucket == straight, ("bucket", bucket, straight)
EOF

echo "a newest adapter corrupted in the bucket: the waiting trainer publishes it again"
L="$WORK/live"
"$BIN/grpo-train" "${COMMON[@]}" "${TR[@]}" --run "file://$L" --steps 1 --max-staleness 0 --metrics "" \
  --rollout-timeout 120 >"$WORK/live-train.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
for i in $(seq 1 100); do [ -f "$L/adapters/v00000000.h5" ] && break; sleep 0.1; done
printf 'garbage' | dd of="$L/adapters/v00000000.h5" bs=1 seek=2000 conv=notrunc 2>/dev/null
"$BIN/grpo-rollout" "${COMMON[@]}" --run "file://$L" --dataset "$WORK/train.jsonl" --worker-id wl \
  --groups-per-shard 2 --max-new-tokens 6 --batch-size 8 --max-shards 1 --max-ahead 0 "${RW[@]}" \
  >"$WORK/live-roll.log" 2>&1 &
ROLL=$!; PIDS+=($ROLL)
check "the trainer finishes its step" wait $TRAIN
check "...after publishing v0's weights again as v1" grep -q \
  "adapters/v00000000.h5 does not verify .*publishing its weights again as v00000001" "$WORK/live-train.log"
check "the worker refused v0, waited, and generated with v1" bash -c "wait $ROLL; grep -q 'v00000000.h5.*adapter refused' '$WORK/live-roll.log' && ls '$L'/rollouts/v00000001/wl-*.h5"
check "v1 holds v0's weights (its state's copy)" "$PY" - "$L" <<'EOF'
import io, sys
import h5py, numpy as np
d = sys.argv[1]
s0 = h5py.File(io.BytesIO(bytes(h5py.File(d + "/trainer/state-v00000000.h5", "r")["adapter_image"][:])), "r")
a1 = h5py.File(d + "/adapters/v00000001.h5", "r")
names = []
a1.visit(lambda n: names.append(n) if isinstance(a1[n], h5py.Dataset) else None)
assert names and all(np.array_equal(s0[n][:], a1[n][:]) for n in names)
EOF
check "v2 is the trained step" test -f "$L/adapters/v00000002.h5"

echo "run.json, temp files, grpo-ctl status"
S="$WORK/straight"
mv "$S/run.json" "$WORK/run.json.bak"
expect_fail_last "a deleted run.json on a run with versions is refused" 1 \
  "run.json is missing but the run has versions \(adapters up to v00000020" replay straight "$D" 21 --metrics ""
check "...and not recreated" test ! -e "$S/run.json"
mv "$WORK/run.json.bak" "$S/run.json"
touch -d '2 hours ago' "$S/adapters/.pail-tmp.v00000021.h5.999.1"
touch "$S/adapters/.pail-tmp.v00000021.h5.998.1"
check "a restart" replay straight "$D" 20 --metrics ""
check "...removes the stale temp file" test ! -e "$S/adapters/.pail-tmp.v00000021.h5.999.1"
check "...says so" grep -q "removed 1 temp file" "$WORK/straight.log"
check "...keeps a live writer's" test -e "$S/adapters/.pail-tmp.v00000021.h5.998.1"
echo "not json" >"$S/trainer/progress.json"
"$BIN/grpo-ctl" status "file://$S" >"$WORK/status.out" 2>"$WORK/status.err"
check "status warns about an unreadable progress.json" grep -q "warning: trainer/progress.json: not valid JSON" "$WORK/status.err"
check "...and shows the step and version from the bucket" grep -q "trainer  step 20  v20" "$WORK/status.out"
finish
