#!/usr/bin/env bash
# A short fault campaign (tests/chaos/, doc/reliability.md): two seeded rounds,
# one on a file:// bucket (on a small tmpfs as root, for the full-disk fault)
# and one through grpo-relay in front of moto with a fault proxy per role, each
# under 5 to 9 faults, then every invariant: versions once each, everything
# verifies and decodes, the state chain, no group consumed twice, no shard lost,
# the final adapter equal to an offline replay of the trainer's record, no
# credential in a log, refusals one line, the relay's memory bounded.
# Part of `make test`; `make chaos-short` runs it alone, `make chaos ROUNDS=N` long campaigns.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
SEED=${CHAOS_SEED:-7}
BIN="$BIN" nice -n 19 "$PY" "$ROOT/tests/chaos/chaos.py" --rounds 2 --seed "$SEED" --work "$WORK/chaos" \
  --round-limit 300 >"$WORK/chaos.out" 2>&1
rc=$?
grep -E "^round|FAIL|summary|faults:|recovery|RSS" "$WORK/chaos.out" | sed 's/^/        /' | cut -c1-400
check "2 chaos rounds (seed $SEED): every invariant held" test $rc = 0
check "...the schedule is printed, so a failing round replays" grep -q "^round 1 seed [0-9]* backend s3: " "$WORK/chaos.out"
check "...and the summary counts checks" grep -Eq "[0-9]+/[0-9]+ invariant checks passed, 0 rounds failed" "$WORK/chaos.out"
finish
