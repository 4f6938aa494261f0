#!/usr/bin/env bash
# Runs every tests/integration/test_*.sh (each starts the real servers it needs
# on loopback and stops them). Prints "integration: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
export BIN=${BIN:-bin}
pass=0; fail=0; failed=()
for t in tests/integration/test_*.sh; do
  name=$(basename "$t" .sh)
  start=$(date +%s)
  if bash "$t"; then pass=$((pass + 1)); status=ok
  else fail=$((fail + 1)); status=FAIL; failed+=("$name"); fi
  echo "== $name: $status ($(( $(date +%s) - start ))s)"
done
[ $fail -eq 0 ] || echo "failed: ${failed[*]}"
echo "integration: $pass passed, $fail failed"
[ $fail -eq 0 ]
