#!/usr/bin/env bash
# The policy figure side by side with its reference: bench_model (pail), then
# transformers + PEFT doing the same step at the same shape and thread count
# (validation/bench/torch_policy.py), then the ratio (target >= 1.5x).
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
[ -n "$pail" ] || exit 0  # policy section not run
py="$(bash mk/venv.sh)/bin/python"
echo
echo "reference: transformers + PEFT, same step (validation/bench/torch_policy.py)"
"$py" validation/bench/torch_policy.py --threads "$OMP_NUM_THREADS" | tee "$out"
torch=$(awk '/^torch_policy_tok_s/ {print $2}' "$out")
awk -v p="$pail" -v t="$torch" 'BEGIN { printf "policy fwd+bwd to LoRA: pail %.0f tok/s, torch %.0f tok/s: %.2fx (target >= 1.5x)\n", p, t, p / t }'
