#!/usr/bin/env bash
# Peak memory of `grpo-ctl logprobs` with the base held as bf16 against f32
# (issue 14), at the qwen2.5-0.5b shape, where the weights dominate (494M
# parameters: 0.99 GB as bf16, 1.98 GB as f32): the same random model written
# as a bf16 and as an f32 checkpoint (grpo-ctl init-model, same seed), each
# loaded with --dtype auto, plus the f32 checkpoint loaded with --dtype bf16
# (held as bf16, read from a 2 GB file: it separates the held block from the
# file's mapping). Peak RSS of the child (getrusage, = VmHWM) and the peaks of
# its anonymous and file-backed parts (bench/peak_rss.py). Target: bf16 / f32
# peak <= 0.6x. The checkpoints (3 GB) are deleted at the end.
# Usage: bench/dtype_memory.sh   (BIN=bin; OMP_NUM_THREADS as set)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
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
measure() {  # label model dtype -> one line; sets kb_<label>
  local r
  r=$(python3 bench/peak_rss.py "$CTL" logprobs --model "$W/$2" --input "$W/ids.jsonl" --dtype "$3" \
        --token-budget 64)
  read -r _ hwm _ anon _ file _ wall <<<"$r"
  printf '  %-34s peak RSS %6.0f MB (anonymous %6.0f MB, file-backed %6.0f MB at their peaks), %s s\n' \
    "$1 checkpoint, --dtype $3:" "$((hwm / 1000))" "$((anon / 1000))" "$((file / 1000))" "$wall"
  eval "kb_${1}_$3=$hwm"
}
echo "  grpo-ctl logprobs, one line of 64 ids, --token-budget 64, ${OMP_NUM_THREADS:-all} threads:"
measure bf16 bf16 auto
measure f32 f32 auto
measure f32 f32 bf16
# shellcheck disable=SC2154  # set by measure's eval
awk -v b="$kb_bf16_auto" -v f="$kb_f32_auto" -v x="$kb_f32_bf16" 'BEGIN {
  printf "  peak RSS, bf16 checkpoint held as bf16 / f32 checkpoint held as f32: %.2fx (target <= 0.6x)\n", b / f
  printf "  f32 checkpoint held as bf16 / held as f32: %.2fx (the held block halves; the mapped file does not)\n", x / f }'
