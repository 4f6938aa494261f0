#!/usr/bin/env bash
# The policy figures side by side with their reference: bench_model (pail, the
# base held as f32 and as bf16), then transformers + PEFT doing the same step
# in fp32 at the same shape and thread count (validation/bench/torch_policy.py),
# then the ratios (target >= 1.5x for each).
# Usage: bench/bench_model.sh [bench_model sections/options...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
make -s "$BUILD/bench/bench_model"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$BUILD/bench/bench_model" "$@" | tee "$out"
pail=$(awk '/^pail_policy_tok_s/ {print $2}' "$out")
pail_bf16=$(awk '/^pail_policy_bf16_tok_s/ {print $2}' "$out")
[ -n "$pail" ] || exit 0  # policy section not run
py="$(bash mk/venv.sh)/bin/python"
echo
echo "reference: transformers + PEFT, same step (validation/bench/torch_policy.py)"
"$py" validation/bench/torch_policy.py --threads "$OMP_NUM_THREADS" | tee "$out"
torch=$(awk '/^torch_policy_tok_s/ {print $2}' "$out")
awk -v p="$pail" -v t="$torch" 'BEGIN { printf "policy fwd+bwd to LoRA: pail %.0f tok/s, torch %.0f tok/s: %.2fx (target >= 1.5x)\n", p, t, p / t }'
awk -v p="$pail_bf16" -v t="$torch" 'BEGIN { printf "policy fwd+bwd to LoRA, bf16 base: pail %.0f tok/s, torch (fp32) %.0f tok/s: %.2fx (target >= 1.5x)\n", p, t, p / t }'
