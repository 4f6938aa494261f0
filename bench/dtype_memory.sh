#!/usr/bin/env bash
# Peak memory of `grpo-ctl logprobs` with the base held as bf16 against f32
# (issue 14), at the qwen2.5-0.5b shape, where the weights dominate (494M
# parameters: 0.99 GB as bf16, 1.98 GB as f32): the same random model written
# as a bf16 and as an f32 checkpoint (grpo-ctl init-model, same seed), each
# loaded with --dtype auto, plus the f32 checkpoint loaded with --dtype bf16
# (held as bf16, read from a 2 GB file: it separates the held block from the
# file's mapping). Peak RSS of the child (getrusage, = VmHWM) and the peaks of
# its anonymous and file-backed parts (bench/peak_rss.py). Target: bf16 / f32
# peak <= 0.6x. Then Q4_K (issue 46): a folder holding the bf16 checkpoint's
# weights as Q4_K blocks (Q5_0 where rows of 896 are not whole 256-blocks:
# --quantize q4_k's rule), written by `bench_model_quant save-quantized`, as
# `grpo-ctl import-gguf` writes a quantized GGUF's folder, loaded as stored
# (--dtype auto); and the bf16 checkpoint loaded with --quantize q4_k (the
# blocks made at load: the bf16 file's mapping is in that peak). Target: the
# Q4_K folder's peak / the bf16 checkpoint's <= 0.4x. Without the quantizer
# the Q4_K lines say SKIP. The checkpoints (3.4 GB) are deleted at the end.
# Usage: bench/dtype_memory.sh   (BIN=bin, BUILD=build; OMP_NUM_THREADS as set)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
CTL="$BIN/grpo-ctl"
W=$(mktemp -d "${TMPDIR:-/tmp}/pail-dtype-mem.XXXXXX")
trap 'rm -rf "$W"' EXIT
for d in bf16 f32; do
  s=$(date +%s.%N)
  "$CTL" init-model --out "$W/$d" --shape qwen2.5-0.5b --dtype "$d" --tokenizer data/tokenizers/bytes \
    >"$W/init.log" 2>&1 || { cat "$W/init.log" >&2; exit 1; }
  printf '  init-model --shape qwen2.5-0.5b --dtype %s: %s s, model.safetensors %s\n' "$d" \
    "$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')" "$(du -h "$W/$d/model.safetensors" | cut -f1)"
done
python3 -c 'import json, random; r = random.Random(3); print(json.dumps({"ids": [r.randrange(151936) for _ in range(64)]}))' \
  >"$W/ids.jsonl"
measure() {  # key label model [grpo-ctl options] -> one line; sets kb_<key>
  local key=$1 label=$2 model=$3 r
  shift 3
  r=$(python3 bench/peak_rss.py "$CTL" logprobs --model "$W/$model" --input "$W/ids.jsonl" --token-budget 64 "$@")
  read -r _ hwm _ anon _ file _ wall <<<"$r"
  printf '  %-46s peak RSS %6.0f MB (anonymous %6.0f MB, file-backed %6.0f MB at their peaks), %s s\n' \
    "$label:" "$((hwm / 1000))" "$((anon / 1000))" "$((file / 1000))" "$wall"
  eval "kb_$key=$hwm"
}
echo "  grpo-ctl logprobs, one line of 64 ids, --token-budget 64, ${OMP_NUM_THREADS:-all} threads:"
measure bf16 "bf16 checkpoint, --dtype auto" bf16 --dtype auto
measure f32 "f32 checkpoint, --dtype auto" f32 --dtype auto
measure f32_bf16 "f32 checkpoint, --dtype bf16" f32 --dtype bf16
# shellcheck disable=SC2154  # set by measure's eval
awk -v b="$kb_bf16" -v f="$kb_f32" -v x="$kb_f32_bf16" 'BEGIN {
  printf "  peak RSS, bf16 checkpoint held as bf16 / f32 checkpoint held as f32: %.2fx (target <= 0.6x)\n", b / f
  printf "  f32 checkpoint held as bf16 / held as f32: %.2fx (the held block halves; the mapped file does not)\n", x / f }'

make -s "$BUILD/bench/bench_model_quant"
if ! "$BUILD/bench/bench_model_quant" save-quantized --model "$W/bf16" --out "$W/q4_k" --quantize q4_k \
  --tokenizer data/tokenizers/bytes >"$W/save.log" 2>&1; then
  echo "  q4_k: SKIP: cannot write a Q4_K folder ($(tail -1 "$W/save.log"))"
  exit 0
fi
sed 's/^bench_model_quant: /  /' "$W/save.log"
printf '  q4_k folder: model.safetensors %s\n' "$(du -h "$W/q4_k/model.safetensors" | cut -f1)"
rm -rf "$W/f32"  # 2 GB of disk back
measure q4_k "q4_k folder (blocks stored), --dtype auto" q4_k --dtype auto
measure bf16_q4_k "bf16 checkpoint, --quantize q4_k" bf16 --quantize q4_k
# shellcheck disable=SC2154  # set by measure's eval
awk -v b="$kb_bf16" -v q="$kb_q4_k" -v l="$kb_bf16_q4_k" 'BEGIN {
  printf "  peak RSS, q4_k folder held as its blocks / bf16 checkpoint held as bf16: %.2fx (target <= 0.4x)\n", q / b
  printf "  bf16 checkpoint quantized at load (--quantize q4_k) / held as bf16: %.2fx (the bf16 file mapped while its blocks are made)\n", l / b }'
