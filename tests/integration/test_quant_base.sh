#!/usr/bin/env bash
# One quantized base for every role (issue 46, doc/models.md "Quantized weights"), on
# file:// buckets and tiny models:
# - --quantize q8_0 on the trainer and the worker of an f32 checkpoint: a GRPO run whose
#   staleness-0 steps' log-probs agree between the roles (behaviour/* metrics) to well
#   below a bf16 worker's distance from an f32 trainer; a worker without --quantize, and
#   one with --quantize q4_k (q5_0 on these rows), refused by name against that run;
#   the memory plan's bytes the quantized ones;
# - a GGUF with Q4_K matrices (gguf-py writes it) imported with its blocks kept: grpo-ctl
#   logprobs on it equal to the --dequantize f32 import's to 1e-4; a run on the kept
#   folder refuses a worker on the dequantized one (another base); grpo-ctl eval and
#   grpo-rollout --env-free decoding run on it; export --merge says it dequantizes and
#   writes bf16.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
CTL="$BIN/grpo-ctl"
V="$ROOT/validation/model/gguf_files.py"
export OMP_NUM_THREADS=1
M="$WORK/model"
"$CTL" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 \
  >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -16 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
RW=(--reward format --format-regex '[0-9]' --reward length:0.5 --length-target 3)

# run DIR TRAINER_FLAGS... -- WORKER_FLAGS...: v0, a shard, step 1, two shards, steps 2-3 (as test_behaviour_agree)
run() {
  local R=$1 rc=0; shift
  local tf=() wf=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do tf+=("$1"); shift; done
  shift
  wf=("$@")
  local T=("$BIN/grpo-train" --model "$M" --group-size 4 --run "file://$R/r" --groups-per-step 4 --lora-rank 4
           --lr 2e-2 --train-zero-advantage --max-staleness 1 --metrics "$R/metrics.jsonl" "${tf[@]}")
  local W=("$BIN/grpo-rollout" --model "$M" --group-size 4 --run "file://$R/r" --dataset "$WORK/train.jsonl"
           --groups-per-shard 4 --max-new-tokens 12 --batch-size 16 --max-ahead 0 --seed 3 "${RW[@]}" "${wf[@]}")
  mkdir -p "$R"
  "${T[@]}" --steps 0 >"$R/t0.log" 2>&1 || rc=1
  "${W[@]}" --worker-id a --max-shards 1 >"$R/w0.log" 2>&1 || rc=1
  "${T[@]}" --steps 1 >"$R/t1.log" 2>&1 || rc=1
  "${W[@]}" --worker-id b --max-shards 2 >"$R/w1.log" 2>&1 || rc=1
  "${T[@]}" --steps 3 >"$R/t3.log" 2>&1 || rc=1
  return $rc
}
# The workers' KV caches in f32 (--kv-dtype; auto would be f16 for both): the figures are
# the bases' (a 16-bit cache's own distance: test_behaviour_agree, doc/model.md)
check "--quantize q8_0 on the trainer and the worker: v0, 3 steps" run "$WORK/q8" --quantize q8_0 -- --quantize q8_0 \
  --kv-dtype f32
check "bf16 worker, f32 trainer (today's distance): v0, 3 steps" run "$WORK/bf" --dtype f32 -- --dtype bf16 --kv-dtype f32
check "the trainer holds q8_0 blocks and says so" grep -q "weights: q8_0" "$WORK/q8/t0.log"
cat >"$WORK/dist.py" <<'PYEOF'
import json, math, sys
# dist.py METRICS.jsonl: the largest behaviour/logp_diff_max and mean over the staleness-0 steps
rows = [r for r in map(json.loads, open(sys.argv[1])) if r["behaviour/tokens"] > 0]
assert rows, "no staleness-0 step"
mx = max(r["behaviour/logp_diff_max"] for r in rows)
mean = max(r["behaviour/logp_diff_mean"] for r in rows)
assert math.isfinite(mx) and math.isfinite(mean)
print("%.3g %.3g" % (mx, mean))
PYEOF
if q=$("$PY" "$WORK/dist.py" "$WORK/q8/metrics.jsonl") && b=$("$PY" "$WORK/dist.py" "$WORK/bf/metrics.jsonl") &&
   "$PY" -c 'import sys; q, b = map(float, sys.argv[1:3]); assert q < 1e-3 and q < b / 10, (q, b)' ${q% *} ${b% *}; then
  ok "trainer vs worker at staleness 0 on one q8_0 base: max |diff| ${q% *} (mean ${q#* }), below a bf16 worker's from an f32 trainer: ${b% *} (mean ${b#* })"
else bad "q8_0 trainer/worker distance: q8_0 '$q', bf16/f32 '$b'"; fi
WQ=("$BIN/grpo-rollout" --model "$M" --group-size 4 --run "file://$WORK/q8/r" --dataset "$WORK/train.jsonl"
    --groups-per-shard 4 --max-new-tokens 4 --batch-size 16 "${RW[@]}" --worker-id x --max-shards 1)
expect_fail_last "a worker without --quantize against a q8_0 trainer: refused by name" 1 \
  "the trainer's base is held as q8_0, this worker's as f32: every role computes on the same quantized base" "${WQ[@]}"
expect_fail_last "a worker on another quantization (q4_k: q5_0 on rows of 64): refused by name" 1 \
  "the trainer's base is held as q8_0, this worker's as q5_0" "${WQ[@]}" --quantize q4_k
expect_fail "--quantize with a float --dtype: one or the other" 2 "--quantize q8_0 and --dtype bf16: give one" \
  "${WQ[@]}" --quantize q8_0 --dtype bf16
expect_fail "--quantize q4_k_m: not a --quantize value" 2 "--quantize 'q4_k_m': use q8_0, q4_k or none" \
  "${WQ[@]}" --quantize q4_k_m
"$CTL" plan --model "$M" >"$WORK/plan-f32.txt" 2>&1
check "the memory plan of an f32 folder (the probe)" grep -q "weights .* f32" "$WORK/plan-f32.txt"

# A GGUF's Q4_K blocks kept as stored.
check "gguf-py writes a llama file with Q4_K matrices" "$PY" "$V" model "$WORK/k.gguf" --arch llama --qtype Q4_K
check "import-gguf keeps the blocks (the F32 embedding as f32)" "$CTL" import-gguf "$WORK/k.gguf" --out "$WORK/k" --dtype f32
check "...and --dequantize --dtype f32 the values" "$CTL" import-gguf "$WORK/k.gguf" --out "$WORK/kf" --dequantize --dtype f32
check "the kept folder is stored q4_k+q8_0+f32" bash -c "'$CTL' model-info --model '$WORK/k' | grep -q '^stored: q4_k+q8_0+f32 '"
"$PY" -c "
import random
random.seed(5)
for n in (1, 2, 9, 40, 130): print('{\"ids\": %s}' % [random.randrange(300) for _ in range(n)])" >"$WORK/ids.jsonl"
"$CTL" logprobs --model "$WORK/k" --input "$WORK/ids.jsonl" >"$WORK/lp-k.jsonl" 2>"$WORK/lp-k.err"
"$CTL" logprobs --model "$WORK/kf" --input "$WORK/ids.jsonl" >"$WORK/lp-kf.jsonl" 2>"$WORK/lp-kf.err"
check "grpo-ctl logprobs on the blocks = on the dequantized f32 weights (1e-4)" "$PY" -c '
import json, sys
a, b = ([json.loads(l)["logprobs"] for l in open(f)] for f in sys.argv[1:3])
assert len(a) == len(b) == 5 and all(len(x) == len(y) for x, y in zip(a, b))
d = max(abs(p - q) for x, y in zip(a, b) for p, q in zip(x, y))
assert d <= 1e-4, d
print(d)' "$WORK/lp-k.jsonl" "$WORK/lp-kf.jsonl"
"$CTL" logprobs --model "$WORK/k" --input "$WORK/ids.jsonl" --device sim >"$WORK/lp-sim.jsonl" 2>"$WORK/lp-sim.err"
check "...and on the stand-in device (--device sim: the blocks uploaded as bytes, every op behind the table) the same bits" \
  cmp "$WORK/lp-k.jsonl" "$WORK/lp-sim.jsonl"
"$BIN/grpo-train" --model "$WORK/k" --run "file://$WORK/kr" --group-size 4 --groups-per-step 4 --lora-rank 4 \
  --steps 0 >"$WORK/kt.log" 2>&1
check "a trainer on the kept blocks creates its run" test -f "$WORK/kr/run.json"
expect_fail_last "a worker on the dequantized import against it: another base, named" 1 \
  "base_sha256 .* \(held as q4_k\+q8_0\+f32\) is not this --model's .*another quantization of it" \
  "$BIN/grpo-rollout" --model "$WORK/kf" --group-size 4 --run "file://$WORK/kr" --dataset "$WORK/train.jsonl" \
  --groups-per-shard 4 --max-new-tokens 4 "${RW[@]}" --worker-id y --max-shards 1
check "a worker on the kept blocks generates a shard for it (prefill, decode, batched decode)" \
  "$BIN/grpo-rollout" --model "$WORK/k" --group-size 4 --run "file://$WORK/kr" --dataset "$WORK/train.jsonl" \
  --groups-per-shard 4 --max-new-tokens 8 --batch-size 16 "${RW[@]}" --worker-id z --max-shards 1
check "grpo-ctl eval on the kept blocks (prefill, batched decode)" "$CTL" eval --model "$WORK/k" \
  --dataset "$WORK/train.jsonl" --max-new-tokens 4 --batch-size 8 --out "$WORK/ev.json"
check "...its result: 16 prompts, 16 completions" grep -q '"completions": 16' "$WORK/ev.json"
"$CTL" export --adapter "$WORK/kr/adapters/v00000000.h5" --out "$WORK/merged" --merge --model "$WORK/k" \
  >"$WORK/merge.out" 2>"$WORK/merge.err"
check "export --merge into the quantized base says it dequantizes" grep -q "is quantized (q4_k+q8_0+f32): merging dequantizes it; the merged checkpoint is bf16" "$WORK/merge.err"
check "...and writes bf16" bash -c "'$CTL' model-info --model '$WORK/merged' | grep -q '^stored: bf16 '"
finish
