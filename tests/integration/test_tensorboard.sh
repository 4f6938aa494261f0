#!/usr/bin/env bash
# Operating a run: grpo-ctl tensorboard (event files read back with the
# tensorboard package's own reader, record CRCs checked with its crc32c; the
# samples/completions text tables against the shards, h5py and tokenizers),
# --watch following a run until control/stop, grpo-ctl stop (a real tiny
# trainer stops on it), grpo-ctl put in both argument orders, and the errors.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
G="$BIN/grpo-ctl"
R="$WORK/run" RUN="file://$WORK/run"

# A crafted run: 5 steps (adapter v = step, so step K started from v K-1), a
# null (not finite) loss at step 3, and evaluations of v0, v2 and v5.
echo '{"run_id":"crafted"}' >"$WORK/run.json"
"$G" put "$RUN/run.json" "$WORK/run.json"
for s in 1 2 3 4 5; do
  loss=$([ $s = 3 ] && echo null || echo "0.0$s")
  echo "{\"step\":$s,\"version\":$((s - 1)),\"reward\":0.$((s * 17)),\"loss\":$loss,\"kl\":1.5e-3,\"rewards/format/mean\":0.25,\"completions/mean_length\":$((s + 3)),\"time\":$((1700000000 + s))}" \
    >"$WORK/m.json"
  "$G" put "$WORK/m.json" "$(printf '%s/metrics/step-%08d.json' "$RUN" $s)"  # FILE URL, as aws s3 cp
done
for v in 0 2 5; do
  echo "{\"version\":$v,\"accuracy\":0.$((v + 1))25,\"reward_mean\":0.$v,\"components\":{\"exact_answer\":0.$((v + 1))},\"metric\":\"greedy\",\"prompts\":40,\"time\":$((1700000100 + v))}" \
    >"$WORK/e.json"
  "$G" put "$(printf '%s/eval/v%08d.json' "$RUN" $v)" "$WORK/e.json"  # URL FILE
done
check "grpo-ctl put FILE URL (aws s3 cp's order) and URL FILE" \
  test -f "$R/metrics/step-00000005.json" -a -f "$R/eval/v00000005.json"

cat >"$WORK/read.py" <<'PY'
# read.py DIR RUN_DIR [STEPS]: the event files in DIR against the run's JSON
# (its first STEPS steps; LIVE=1: the evaluations a live --watch has written).
import glob, json, math, os, struct, sys
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
d, run = sys.argv[1], sys.argv[2]
files = glob.glob(os.path.join(d, "events.out.tfevents*"))
assert len(files) == 1, files
data = open(files[0], "rb").read()
off = n = 0
while off < len(data):  # every record's two CRCs, independently of the reader
    (length,) = struct.unpack_from("<Q", data, off)
    (lc,) = struct.unpack_from("<I", data, off + 8)
    assert lc == masked_crc32c(data[off:off + 8]), f"record {n}: length crc"
    body = data[off + 12:off + 12 + length]
    (dc,) = struct.unpack_from("<I", data, off + 12 + length)
    assert dc == masked_crc32c(body), f"record {n}: data crc"
    off += 16 + length
    n += 1
ea = EventAccumulator(d)
ea.Reload()
tags = set(ea.Tags()["scalars"])
f32 = lambda x: float(np.float32(x))
metrics = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(run, "metrics", "step-*.json")))]
if len(sys.argv) > 3:
    metrics = metrics[:int(sys.argv[3])]
assert metrics
for name in metrics[0]:
    if name in ("step", "time"):
        continue
    want = [(m["step"], f32(m[name]), m["time"]) for m in metrics if m.get(name) is not None]
    got = [(s.step, s.value, s.wall_time) for s in ea.Scalars("train/" + name)]
    assert got == want, (name, got, want)
evals = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(run, "eval", "v*.json")))]
vstep = {0: 0}
for m in metrics:  # the adapter's step: one less than the first step started from it
    for v in range(m["version"] + 1):
        vstep.setdefault(v, m["step"] - 1)
if os.environ.get("LIVE"):  # --watch holds back the newest version's evaluation until a step started from it
    evals = [e for e in evals if e["version"] in vstep]
for name in ("accuracy", "reward_mean", "prompts") if evals else ():
    want = [(vstep.get(e["version"], metrics[-1]["step"]), f32(e[name]), e["time"]) for e in evals]
    got = [(s.step, s.value, s.wall_time) for s in ea.Scalars("eval/" + name)]
    assert got == want, (name, got, want)
if evals:
    got = [s.value for s in ea.Scalars("eval/components/exact_answer")]
    assert got == [f32(e["components"]["exact_answer"]) for e in evals], got
assert "eval/metric" not in tags and "train/step" not in tags, tags
if not os.environ.get("TABLES"):  # a run without shards (or --samples 0) has no text tables
    ea2 = EventAccumulator(d, size_guidance={"tensors": 0})
    ea2.Reload()
    assert "samples/completions" not in ea2.Tags()["tensors"], ea2.Tags()
print(f"{n} records, {len(metrics)} steps, {len(evals)} evaluations, {len(tags)} tags")
PY

echo "tensorboard: once"
check "writes an event file" "$G" tensorboard "$RUN" --out "$WORK/tb"
check "the tensorboard reader reads back every metric, step, wall time and evaluation (CRCs valid)" \
  "$PY" "$WORK/read.py" "$WORK/tb" "$R"
check "the null loss of step 3 is left out" bash -c "'$PY' -c \"
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator as E
e=E('$WORK/tb'); e.Reload(); assert [s.step for s in e.Scalars('train/loss')]==[1,2,4,5]\""
check "eval of v2 at step 2, of the newest v5 at the last step" bash -c "'$PY' -c \"
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator as E
e=E('$WORK/tb'); e.Reload(); assert [s.step for s in e.Scalars('eval/accuracy')]==[0,2,5]\""
sleep 1.1
check "a rerun into the same --out replaces the earlier file" \
  bash -c "'$G' tensorboard '$RUN' --out '$WORK/tb' 2>&1 | grep -q 'removed the earlier'"
check "...so no step shows twice" "$PY" "$WORK/read.py" "$WORK/tb" "$R"

cat >"$WORK/tables.py" <<'PY'
# tables.py DIR RUN_DIR MODEL K: samples/completions at every metrics step, K
# rows of one shard of a version the step may have drawn from, put by its
# commit time, each cell what h5py + tokenizers make of the shard.
import glob, json, os, re, sys
import h5py, numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.text.text_plugin import text_array_to_html
from tensorboard.util import tensor_util
from tokenizers import Tokenizer
d, run, model, K = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
vis = lambda s: "".join("\\x%02x" % ord(c) if (ord(c) < 32 and c not in "\n\t") or ord(c) == 127 else c for c in s)
ea = EventAccumulator(d, size_guidance={"tensors": 0})
ea.Reload()
assert ea.PluginTagToContent("text") == {"samples/completions": b""}, ea.PluginTagToContent("text")
tables = {t.step: tensor_util.make_ndarray(t.tensor_proto) for t in ea.Tensors("samples/completions")}
metrics = {m["step"]: m for m in (json.load(open(p)) for p in glob.glob(os.path.join(run, "metrics", "step-*.json")))}
assert sorted(tables) == sorted(metrics), (sorted(tables), sorted(metrics))
for step, a in tables.items():
    m = metrics[step]
    head = [c.decode() for c in a[0]]
    assert head[:3] == ["prompt", "completion", "reward"] and head[-2:] == ["advantage", "shard"], head
    key = a[1][-1].decode().split(" ")[0]
    p = os.path.join(run, key)
    v = int(key.split("/")[1][1:])
    assert m["version"] - int(np.ceil(m["staleness_max"])) <= v <= m["version"], (step, key, m["version"])
    assert os.stat(p).st_mtime <= m["time"] + 1, (step, key)
    h = h5py.File(p)
    names = [n.decode() for n in h["reward_components"].attrs["names"]]
    assert head[3:-2] == ["rewards/" + n for n in names], head
    r = h["rewards"][:]
    assert a.shape == (1 + min(K, len(r)), 5 + len(names)), a.shape
    po, co, G = h["prompt_offsets"][:], h["completion_offsets"][:], len(r) // (len(h["prompt_offsets"]) - 1)
    for i, row in enumerate(a[1:]):
        row = [c.decode() for c in row]
        g = int(h["group"][i])
        assert row[0] == vis(tok.decode(h["prompt_ids"][po[g]:po[g + 1]].tolist(), skip_special_tokens=False)), row
        assert row[1] == vis(tok.decode(h["completion_ids"][co[i]:co[i + 1]].tolist(), skip_special_tokens=False)), row
        assert float(row[2]) == float("%.4g" % r[i]), (row[2], r[i])
        assert [float(x) for x in row[3:-2]] == [float("%.4g" % x) for x in h["reward_components"][i]], row
        grp = r[g * G:(g + 1) * G].astype(np.float64)
        adv = 0.0 if grp.std(ddof=1) == 0 else (r[i] - grp.mean()) / (grp.std(ddof=1) + 1e-4)
        assert abs(float(row[-2]) - adv) < 1e-4, (row[-2], adv)
        assert row[-1] == "%s (v%d, %s)" % (key, v, h.attrs["worker_id"].decode()), row
    html = text_array_to_html(a, True)  # what the text plugin shows: a table, one row per sample and the header
    assert html.count("<tr>") == a.shape[0], html[:300]
print(len(tables), "tables")
PY

echo "tensorboard: bad input"
mkdir -p "$WORK/empty"; echo '{}' >"$WORK/empty/run.json"
expect_fail "a run with no metrics -> exit 1, nothing written" 1 "no metrics/step-\*.json or eval/v\*.json yet" \
  "$G" tensorboard "file://$WORK/empty" --out "$WORK/tb-empty"
check "...and no folder made" test ! -e "$WORK/tb-empty"
expect_fail "a URL with no run -> exit 1 naming it" 1 "file://$WORK/nope: no run.json.*not a run" \
  "$G" tensorboard "file://$WORK/nope" --out "$WORK/tb2"
expect_fail "a bad URL -> exit 1 naming it" 1 "ftp://x" "$G" tensorboard ftp://x/run --out "$WORK/tb2"
expect_fail "missing --out -> exit 2" 2 "expected RUN_URL and --out DIR" "$G" tensorboard "$RUN"
expect_fail "an --out that cannot be made -> exit 1" 1 "--out /proc/x" "$G" tensorboard "$RUN" --out /proc/x
expect_fail "a --tokenizer that cannot be read -> exit 1 naming it" 1 "tokenizer $WORK/none.json" \
  "$G" tensorboard "$RUN" --out "$WORK/tb3" --tokenizer "$WORK/none.json"
check "...nothing written" test ! -e "$WORK/tb3"

echo "tensorboard --watch: follows the run, stops on control/stop"
W="$WORK/wrun"; WURL="file://$W"
mkdir -p "$W/metrics" "$W/eval"; cp "$WORK/run.json" "$W/"
cp "$R"/metrics/step-0000000[12].json "$W/metrics/"
"$G" tensorboard "$WURL" --out "$WORK/tbw" --watch --interval 0.2 >"$WORK/watch.log" 2>&1 &
WATCH=$!; PIDS+=($WATCH)
for i in $(seq 50); do grep -q "wrote" "$WORK/watch.log" && break; sleep 0.1; done
check "the first two steps are written at once" "$PY" "$WORK/read.py" "$WORK/tbw" "$W"
cp "$R"/metrics/step-0000000[345].json "$W/metrics/"; cp "$R"/eval/v*.json "$W/eval/"
for i in $(seq 50); do grep -q "+3 steps" "$WORK/watch.log" && break; sleep 0.1; done
check "new steps and evaluations are appended (flushed, read while it runs)" env LIVE=1 "$PY" "$WORK/read.py" "$WORK/tbw" "$W"
check "grpo-ctl stop writes control/stop" "$G" stop "$WURL" --reason "test done"
check "--watch exits 0 on control/stop" timeout 10 bash -c "wait $WATCH 2>/dev/null; while kill -0 $WATCH 2>/dev/null; do sleep 0.1; done"
wait $WATCH; rc=$?
check "...with status 0 and saying why" bash -c "[ $rc = 0 ] && grep -q 'control/stop found' '$WORK/watch.log'"
check "...after writing the newest version's held-back evaluation" "$PY" "$WORK/read.py" "$WORK/tbw" "$W"
check "control/stop holds the reason, time, host and user" "$PY" -c "
import json; j=json.load(open('$W/control/stop'))
assert j['reason']=='test done' and j['time']>1.7e9 and j['host'] and 'user' in j, j"
"$G" rm "$WURL/control/stop"
"$G" tensorboard "$WURL" --out "$WORK/tbs" --watch --interval 0.2 >"$WORK/watch2.log" 2>&1 &
WATCH=$!; PIDS+=($WATCH)
sleep 0.5; kill -TERM $WATCH; wait $WATCH; rc=$?
check "--watch exits 0 on SIGTERM, the file complete" bash -c "[ $rc = 0 ] && '$PY' '$WORK/read.py' '$WORK/tbs' '$W' >/dev/null"

echo "grpo-ctl stop and put: bad input"
expect_fail "stop on a URL without run.json -> exit 1 naming it" 1 "file://$WORK/nope has no run.json" \
  "$G" stop "file://$WORK/nope"
check "...and writes nothing" test ! -e "$WORK/nope/control/stop"
expect_fail "stop without a URL -> exit 2" 2 "expected one RUN_URL" "$G" stop
expect_fail "put FILE URL with a missing FILE explains" 2 "FILE '$WORK/missing' does not exist.*put URL FILE, or FILE URL" \
  "$G" put "$WORK/missing" "$RUN/x"
expect_fail "put with two paths explains the order" 2 "neither .* is a file:///abs/dir/key or s3://bucket/key URL" \
  "$G" put "$WORK/run.json" "$WORK/y"
expect_fail "put with two URLs explains" 2 "both URLs" "$G" put "$RUN/a" "$RUN/b"

echo "grpo-ctl stop: a running tiny trainer stops on it"
M="$WORK/model" TRUN="file://$WORK/trun"
export OMP_NUM_THREADS=1
if "$G" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 \
  >/dev/null 2>&1; then
  head -64 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
  COMMON=(--model "$M" --group-size 4)
  PAIL_LOG=info "$BIN/grpo-train" "${COMMON[@]}" --run "$TRUN" --steps 1000 --groups-per-step 2 --lr 5e-3 \
    --lora-rank 4 --metrics "" --rollout-timeout 120 >"$WORK/train.log" 2>&1 &
  TRAIN=$!; PIDS+=($TRAIN)
  "$BIN/grpo-rollout" "${COMMON[@]}" --run "$TRUN" --dataset "$WORK/train.jsonl" --worker-id wa \
    --groups-per-shard 2 --max-new-tokens 6 --batch-size 8 --max-shards 2 --seed 7 --reward format \
    --format-regex '[0-9]' >"$WORK/roll.log" 2>&1 &
  ROLL=$!; PIDS+=($ROLL)
  for i in $(seq 600); do [ -f "$WORK/trun/metrics/step-00000001.json" ] && break; sleep 0.1; done
  check "the trainer committed a step" test -f "$WORK/trun/metrics/step-00000001.json"
  check "grpo-ctl stop on the live run" "$G" stop "$TRUN" --reason "enough"
  check "the trainer stops within 30 s" timeout 30 bash -c "while kill -0 $TRAIN 2>/dev/null; do sleep 0.2; done"
  wait $TRAIN; rc=$?
  check "...exit 0, logging control/stop found" bash -c "[ $rc = 0 ] && grep -q 'control/stop found' '$WORK/train.log'"
  check "tensorboard on the real run matches its metrics" bash -c \
    "'$G' tensorboard '$TRUN' --out '$WORK/tbt' && TABLES=1 '$PY' '$WORK/read.py' '$WORK/tbt' '$WORK/trun'"
  check "...a samples/completions table per step: the decoded completions, rewards, advantages of its shard" \
    "$PY" "$WORK/tables.py" "$WORK/tbt" "$WORK/trun" "$M" 4
  check "--samples 2 --tokenizer FILE: two rows each" bash -c "'$G' tensorboard '$TRUN' --out '$WORK/tbt2' \
    --samples 2 --tokenizer '$M/tokenizer.json' && '$PY' '$WORK/tables.py' '$WORK/tbt2' '$WORK/trun' '$M' 2"
  check "--samples 0: no tables" bash -c "'$G' tensorboard '$TRUN' --out '$WORK/tbt0' --samples 0 && \
    '$PY' '$WORK/read.py' '$WORK/tbt0' '$WORK/trun'"
  kill "$ROLL" 2>/dev/null; wait "$ROLL" 2>/dev/null
else
  bad "init-model"
fi
finish
