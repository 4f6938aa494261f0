#!/usr/bin/env bash
# Runs each Check suite binary given on the command line; prints one summary
# line "unit: N passed, N failed" and exits non-zero when any suite failed.
set -u
pass=0; fail=0; failed=()
for t in "$@"; do
  name=$(basename "$t")
  log="${t}.log"
  start=$(date +%s%N)
  if CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120} "$t" >"$log" 2>&1; then
    pass=$((pass + 1)); status=ok
  else
    fail=$((fail + 1)); status=FAIL; failed+=("$name")
  fi
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  summary=$(grep -E '^[0-9]+%: Checks' "$log" | tail -1)
  printf '%-32s %-4s %5d.%01ds  %s\n' "$name" "$status" $((ms / 1000)) $((ms % 1000 / 100)) "$summary"
  if [ $status = FAIL ]; then sed 's/^/    /' "$log" | tail -40; fi
done
echo "unit: $pass passed, $fail failed"
[ $fail -eq 0 ]
