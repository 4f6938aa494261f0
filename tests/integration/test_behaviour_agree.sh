#!/usr/bin/env bash
# behaviour/* metrics on file:// buckets with a tiny random f32 checkpoint: the
# trainer's log-probs of the sampled tokens against the workers' behaviour
# log-probs on the tokens the weights it held generated (staleness 0). Each run:
# v0, a worker's shard of v0, step 1 on it (LoRA B = 0), a worker's two shards
# of v1, step 2 on one (staleness 0, LoRA moved), step 3 on the other
# (staleness 1: null); then a replay (another run's versions: null),
# --publish-every 2 (weights moved since the version: null) and grpo-ctl status. f32 worker + f32 trainer agree to float rounding, a bf16
# worker against an f32 trainer by bf16's (doc/formats.md has the figures), and so does an f32
# worker whose KV cache is bf16 or f16 (--kv-dtype; auto: f16 for the bf16 worker, f32 for the f32 one).
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
M="$WORK/model"
export OMP_NUM_THREADS=1
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -16 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
COMMON=(--model "$M" --group-size 4)
RW=(--reward format --format-regex '[0-9]' --reward length:0.5 --length-target 3)

# run WORKER_DTYPE TRAINER_DTYPE [KV_DTYPE]: the three steps above into $WORK/WD-TD[-kvKV]/
run() {
  local R="$WORK/${PFX:-}$1-$2${3:+-kv$3}" rc=0
  local T=("$BIN/grpo-train" "${COMMON[@]}" --run "file://$R/r" --groups-per-step 4 --lora-rank 4 --lr 2e-2
           --train-zero-advantage --max-staleness 1 --dtype "$2" --metrics "$R/metrics.jsonl")
  local W=("$BIN/grpo-rollout" "${COMMON[@]}" --run "file://$R/r" --dataset "$WORK/train.jsonl" --groups-per-shard 4
           --max-new-tokens 12 --batch-size 16 --max-ahead 0 --seed 3 "${RW[@]}" --dtype "$1" --kv-dtype "${3:-auto}")
  mkdir -p "$R"
  "${T[@]}" --steps 0 >"$R/t0.log" 2>&1 || rc=1
  "${W[@]}" --worker-id a --max-shards 1 >"$R/w0.log" 2>&1 || rc=1
  "${T[@]}" --steps 1 >"$R/t1.log" 2>&1 || rc=1
  "${W[@]}" --worker-id b --max-shards 2 >"$R/w1.log" 2>&1 || rc=1
  "${T[@]}" --steps 3 >"$R/t3.log" 2>&1 || rc=1
  return $rc
}
for c in f32:f32 bf16:f32 bf16:bf16; do
  check "worker --dtype ${c%%:*}, trainer --dtype ${c##*:}: v0, 3 steps" run "${c%%:*}" "${c##*:}"
done
for kv in bf16 f16; do
  check "worker --dtype f32 --kv-dtype $kv, trainer --dtype f32: v0, 3 steps" run f32 f32 "$kv"
done
# A mixture of experts (tiny qwen3_moe: 4 experts, 2 a token): the worker routes its tokens in decode
# steps, the trainer in packed rows; with f32 on both sides they agree as the dense model does, and a
# bf16 worker's rounding may also move a token to other experts (no routing replay yet)
"$BIN/grpo-ctl" init-model --out "$WORK/moe" --shape tiny --model-type qwen3_moe --vocab 257 \
  --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 >/dev/null 2>&1 || bad "init-model qwen3_moe"
COMMON=(--model "$WORK/moe" --group-size 4) PFX=moe-
for c in f32:f32 bf16:f32; do
  check "qwen3_moe: worker --dtype ${c%%:*}, trainer --dtype ${c##*:}: v0, 3 steps" run "${c%%:*}" "${c##*:}"
done
COMMON=(--model "$M" --group-size 4) PFX=

cat >"$WORK/agree.py" <<'PYEOF'
import json, math, sys
# agree.py METRICS.jsonl LO HI: steps 1 and 2 (staleness 0) carry finite figures,
# max in (LO, HI) (LO -1: 0 allowed, the same bits), mean <= max, 0 <= k3 and tokens > 0; step 3 (staleness 1)
# null with tokens 0. Prints steps 1 and 2's max, mean, k3.
rows = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
lo, hi = float(sys.argv[2]), float(sys.argv[3])
assert sorted(rows) == [1, 2, 3], sorted(rows)
out = []
for s in (1, 2):
    r = rows[s]
    assert r["staleness_max"] == 0, (s, r["staleness_max"])
    mx, mean, k3, n = (r["behaviour/" + k] for k in ("logp_diff_max", "logp_diff_mean", "k3", "tokens"))
    assert n > 0 and all(isinstance(x, float) and math.isfinite(x) for x in (mx, mean, k3)), r
    assert lo < mx < hi and 0 <= mean <= mx and 0 <= k3, (s, mx, mean, k3)
    out += ["%.2e" % mx, "%.2e" % mean, "%.2e" % k3]
r = rows[3]
assert r["staleness_max"] == 1 and r["behaviour/tokens"] == 0, r
assert all(r["behaviour/" + k] is None for k in ("logp_diff_max", "logp_diff_mean", "k3")), r
print(" ".join(out))
PYEOF
for c in "f32-f32 -1 1e-3" "bf16-f32 1e-4 5e-2" "bf16-bf16 -1 5e-2" "f32-f32-kvbf16 1e-6 5e-2" "f32-f32-kvf16 1e-7 5e-2" \
  "moe-f32-f32 -1 1e-3" "moe-bf16-f32 1e-4 5e-2"; do
  read -r name lo hi <<<"$c"
  if fig=$("$PY" "$WORK/agree.py" "$WORK/$name/metrics.jsonl" "$lo" "$hi" 2>"$WORK/agree.err"); then
    ok "$name: staleness-0 steps: max $([ "$lo" = -1 ] || echo "> $lo, ")< $hi, finite; the stale step null (max mean k3, steps 1 and 2: $fig)"
  else
    bad "$name: behaviour/* metrics"; tail -3 "$WORK/agree.err" | sed 's/^/        /'
  fi
done
check "step 1 moved the adapter (step 2 is on a LoRA with B != 0)" "$PY" "$ROOT/validation/train/compare_adapters.py" \
  "$WORK/f32-f32/r/adapters/v00000000.h5" "$WORK/f32-f32/r/adapters/v00000001.h5" --differ
check "a bf16 worker is further from an f32 trainer than an f32 worker is (mean |diff|, step 2)" "$PY" -c '
import json, sys
m = [[json.loads(l) for l in open(f)][1]["behaviour/logp_diff_mean"] for f in sys.argv[1:]]
assert m[1] > 10 * m[0], m' "$WORK/f32-f32/metrics.jsonl" "$WORK/bf16-f32/metrics.jsonl"
check "the console line of a staleness-0 step says it" grep -Eq '^step 2 v1 .*\| lp diff [0-9.]+e[-+][0-9]+' "$WORK/f32-f32/t3.log"
check "...and the stale step's does not" bash -c "grep -E '^step 3 v2 ' '$WORK/f32-f32/t3.log' | grep -vq 'lp diff'"
check "grpo-ctl status: the latest step had no staleness-0 token" bash -c \
  "'$BIN/grpo-ctl' status 'file://$WORK/bf16-f32/r' | grep -q '^ *log-probs vs workers: no staleness-0 token in step 3\$'"
"$BIN/grpo-train" "${COMMON[@]}" --run "file://$WORK/bf16-f32/r" --groups-per-step 4 --lora-rank 4 --max-staleness 1 \
  --steps 4 --dtype f32 --train-zero-advantage >"$WORK/t4.log" 2>&1 &
T4=$!; PIDS+=($T4)
"$BIN/grpo-rollout" "${COMMON[@]}" --run "file://$WORK/bf16-f32/r" --dataset "$WORK/train.jsonl" --groups-per-shard 4 \
  --max-new-tokens 12 --batch-size 16 --max-ahead 0 --seed 5 "${RW[@]}" --dtype bf16 --worker-id c --max-shards 1 \
  >"$WORK/w4.log" 2>&1
check "a fourth step on a bf16 worker's shard of v3" wait $T4
check "grpo-ctl status shows its figures" bash -c "'$BIN/grpo-ctl' status 'file://$WORK/bf16-f32/r' | grep -Eq \
  '^ +log-probs vs workers \(staleness 0, [0-9]+ tokens\): \|diff\| max [0-9.]+e-0[2-5] mean [0-9.]+e-0[3-7], k3 [0-9.]+e-[0-9]+\$'"
"$BIN/grpo-train" "${COMMON[@]}" --run "file://$WORK/replay" --replay "file://$WORK/f32-f32/r" --groups-per-step 4 \
  --lora-rank 4 --steps 1 --train-zero-advantage --metrics "$WORK/replay.jsonl" >"$WORK/replay.log" 2>&1
check "a replay (another run's versions) covers no token" "$PY" -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert r["behaviour/tokens"] == 0 and r["behaviour/logp_diff_max"] is None, r' "$WORK/replay.jsonl"
P="$WORK/publish2"
"$BIN/grpo-train" "${COMMON[@]}" --run "file://$P" --lora-rank 4 --steps 0 >/dev/null 2>&1
"$BIN/grpo-rollout" "${COMMON[@]}" --run "file://$P" --dataset "$WORK/train.jsonl" --groups-per-shard 4 \
  --max-new-tokens 12 --batch-size 16 --max-ahead 0 --seed 3 "${RW[@]}" --worker-id a --max-shards 2 >"$WORK/wp.log" 2>&1
"$BIN/grpo-train" "${COMMON[@]}" --run "file://$P" --groups-per-step 4 --lora-rank 4 --lr 2e-2 --train-zero-advantage \
  --publish-every 2 --steps 2 --metrics "$WORK/p2.jsonl" >"$WORK/p2.log" 2>&1
check "--publish-every 2: the step after a publish is covered, the next (v0's shard, weights moved since) is not" \
  "$PY" -c '
import json, sys
a, b = map(json.loads, open(sys.argv[1]))
assert a["staleness_max"] == b["staleness_max"] == 0 and a["version"] == b["version"] == 0, (a, b)
assert a["behaviour/tokens"] > 0 and a["behaviour/logp_diff_max"] < 1e-3, a
assert b["behaviour/tokens"] == 0 and b["behaviour/logp_diff_max"] is None, b' "$WORK/p2.jsonl"
finish
