#!/usr/bin/env bash
# The OpenMP wait policy of the computing tools (src/core/threads.h): with
# neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set each one starts itself again
# once with pail's GOMP_SPINCOUNT (libgomp prints its settings once per program
# image under OMP_DISPLAY_ENV), a user's setting wins and nothing is started
# again (OPENBLAS_CORETYPE set too: else a tool also starts again to replace
# OpenBLAS's fallback kernels on a CPU it does not know), and the start-up log
# says which is in effect.
source "$(dirname "$0")/lib.sh"
SPIN=$(sed -n 's/^#define THREADS_SPINCOUNT "\([0-9]*\)"$/\1/p' "$ROOT/src/core/threads.h")
[ -n "$SPIN" ] || { bad "THREADS_SPINCOUNT not found in src/core/threads.h"; finish; exit 1; }
clean=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u PAIL_THREADS_REEXEC OMP_DISPLAY_ENV=verbose)
# images OUT: how many times libgomp was loaded; spin OUT: the last GOMP_SPINCOUNT it reported
images() { grep -c "OPENMP DISPLAY ENVIRONMENT BEGIN" "$1"; }
spin() { grep -o "GOMP_SPINCOUNT = '[0-9]*'" "$1" | tail -1 | tr -dc 0-9; }
for t in grpo-train grpo-rollout grpo-ctl; do
  "${clean[@]}" "$BIN/$t" --help >/dev/null 2>"$WORK/$t.err"
  n=$(images "$WORK/$t.err"); s=$(spin "$WORK/$t.err")
  if [ "$n" = 2 ] && [ "$s" = "$SPIN" ]; then ok "$t starts once more, with GOMP_SPINCOUNT=$SPIN"
  else bad "$t: libgomp loaded $n times, spin count $s (want 2, $SPIN)"; fi
  "${clean[@]}" OMP_WAIT_POLICY=passive OPENBLAS_CORETYPE=Haswell "$BIN/$t" --help >/dev/null 2>"$WORK/$t.err"
  n=$(images "$WORK/$t.err"); s=$(spin "$WORK/$t.err")
  if [ "$n" = 1 ] && [ "$s" = 0 ]; then ok "$t with OMP_WAIT_POLICY=passive: the user's, not started again"
  else bad "$t with OMP_WAIT_POLICY=passive: libgomp loaded $n times, spin count $s (want 1, 0)"; fi
done
M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
printf '{"ids": [1, 5, 9, 33, 7]}\n' >"$WORK/ids.jsonl"
LP=("$BIN/grpo-ctl" logprobs --model "$M" --input "$WORK/ids.jsonl")
check "grpo-ctl logprobs logs pail's wait policy" bash -c "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT PAIL_LOG=info \
  ${LP[*]} 2>&1 >/dev/null | grep -q \"OpenMP waits: GOMP_SPINCOUNT=$SPIN (pail's choice\""
check "...and the user's" bash -c "OMP_WAIT_POLICY=passive OPENBLAS_CORETYPE=Haswell PAIL_LOG=info ${LP[*]} 2>&1 >/dev/null | \
  grep -q 'OpenMP waits: OMP_WAIT_POLICY=passive (set by the environment)'"
check "...with the same log-probs either way" bash -c "cmp <(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT ${LP[*]}) \
  <(OMP_WAIT_POLICY=passive ${LP[*]})"
finish
