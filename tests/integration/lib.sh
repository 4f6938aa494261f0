# Shared helpers for integration tests (sourced). Each test counts its checks
# and ends with `finish`, which prints "NAME: N passed, N failed" and sets the
# exit status. Servers are started on 127.0.0.1 and stopped by pid on exit.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${BIN:-bin}
case "$BIN" in /*) ;; *) BIN="$ROOT/$BIN" ;; esac
TEST_NAME=$(basename "$0" .sh)
PASS=0; FAIL=0
WORK=$(mktemp -d /tmp/pail-it-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

ok()   { PASS=$((PASS + 1)); echo "  ok    $*"; }
bad()  { FAIL=$((FAIL + 1)); echo "  FAIL  $*"; }
# check "description" command...: passes when the command exits 0.
check() { local d=$1; shift; if "$@" >"$WORK/last.out" 2>"$WORK/last.err"; then ok "$d"; else bad "$d"; sed 's/^/        /' "$WORK/last.err" | tail -5; fi; }
# expect_fail "description" STATUS PATTERN command...: passes when the command
# exits with STATUS and its stderr is one line matching PATTERN (grep -E).
expect_fail() {
  local d=$1 want=$2 pat=$3; shift 3
  "$@" >"$WORK/last.out" 2>"$WORK/last.err"; local rc=$?
  local lines; lines=$(grep -c . "$WORK/last.err")
  if [ "$rc" = "$want" ] && grep -Eq -- "$pat" "$WORK/last.err" && [ "$lines" -le 2 ]; then
    ok "$d (exit $rc: $(head -1 "$WORK/last.err" | cut -c1-150))"
  else
    bad "$d: exit $rc (want $want), stderr:"; sed 's/^/        /' "$WORK/last.err" | head -5
  fi
}
# expect_fail_last "description" STATUS PATTERN command...: for long-running
# tools that log their configuration first: the LAST stderr line must match.
expect_fail_last() {
  local d=$1 want=$2 pat=$3; shift 3
  "$@" >"$WORK/last.out" 2>"$WORK/last.err"; local rc=$?
  local last; last=$(grep . "$WORK/last.err" | tail -1)
  if [ "$rc" = "$want" ] && grep -Eq -- "$pat" <<<"$last"; then ok "$d (exit $rc: $(cut -c1-150 <<<"$last"))"
  else bad "$d: exit $rc (want $want), last line: $last"; fi
}
# run_oracle LOG CMD...: runs a validation script that prints "PASS ..." / "FAIL ..."
# lines; each counts as one check here, other lines are shown indented (those
# starting with SUMMARY_PREFIX, if set, are not), and a non-zero exit with no
# FAIL line is a failure of its own.
run_oracle() {
  local log=$1 line rc; shift
  "$@" >"$log" 2>&1; rc=$?
  while IFS= read -r line; do
    case "$line" in
      "PASS "*) ok "${line#PASS }" ;;
      "FAIL "*) bad "${line#FAIL }" ;;
      *) [ -n "${SUMMARY_PREFIX:-}" ] && [[ $line == "$SUMMARY_PREFIX"* ]] || echo "    $line" ;;
    esac
  done <"$log"
  [ "$rc" -eq 0 ] || grep -q "^FAIL" "$log" || bad "$(basename -- "${2:-$1}") exited $rc"
}
finish() { echo "$TEST_NAME: $PASS passed, $FAIL failed"; [ "$FAIL" -eq 0 ]; }

venv() { bash "$ROOT/mk/venv.sh"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {  # wait_port PORT SECONDS
  local i; for i in $(seq 1 $(( $2 * 10 ))); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1
}

# start_moto [no-auth-count]: a real moto S3 server on a free loopback port.
# Sets MOTO_PORT, MOTO_URL. With auth on, run moto_setup to get keys.
start_moto() {
  local py; py=$(venv)/bin
  MOTO_PORT=$(free_port)
  MOTO_URL="http://127.0.0.1:$MOTO_PORT"
  INITIAL_NO_AUTH_ACTION_COUNT=${1:-1000000000} "$py/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" \
    >"$WORK/moto.log" 2>&1 &
  PIDS+=($!)
  wait_port "$MOTO_PORT" 30 || { echo "moto did not start:"; cat "$WORK/moto.log"; return 1; }
}
