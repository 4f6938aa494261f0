#!/usr/bin/env bash
# pail inside a Hugging Face Job (the image's command): entrypoint.sh ROLE with
# ROLE relay | trainer | rollout | eval, passed explicitly by hf-jobs/submit.sh.
# Every setting comes from the Job's environment and secrets (doc/hf-jobs.md):
#   PAIL_RUN, PAIL_BUCKET [pail], PAIL_RELAY_PORT [9000]
#   PAIL_RELAY_HOST [${HF_NETWORK_GROUP_PREFIX}relay]  PAIL_ENDPOINT [https://HOST:PORT]
#   PAIL_CA_CERT (base64 PEM of the run's CA; env)     PAIL_CA_KEY (base64 PEM; relay's secret)
#   PAIL_TRAINER_KEY, PAIL_ROLLOUT_KEY, PAIL_OPERATOR_KEY ("ACCESS_KEY_ID SECRET"; secrets)
#   relay:   PAIL_UPSTREAM (s3://bucket/prefix, AWS_* secrets) or PAIL_RELAY_ROOT [/data/bucket],
#            PAIL_STOP_GRACE [120]: at most this long after control/stop the relay waits
#            for the workers' heartbeats to say stopped
#   trainer: PAIL_MODEL [/model], PAIL_STEPS [200], PAIL_GROUP_SIZE [8], PAIL_TRAIN_ARGS
#   rollout: PAIL_MODEL, PAIL_DATASET, PAIL_GROUP_SIZE, PAIL_WORKER_ID [hf-<host>], PAIL_TASK_ARGS,
#            PAIL_ROLLOUT_ARGS
#   eval:    PAIL_MODEL, PAIL_EVAL_DATASET, PAIL_TASK_ARGS, PAIL_EVAL_ARGS
#   PAIL_TASK_ARGS: the task's grpo-rollout flags (reward, --chat, --env...), rollout and eval alike;
#   every *_ARGS is split into words as the shell would ('...', "..." quoting), nothing expanded
#   PAIL_START_TIMEOUT [900]: seconds to wait for the relay; PAIL_BIN [/opt/pail/bin]; PAIL_TMP [/tmp/pail]
set -uo pipefail
ROLE=${1:-}
say() { printf '%s pail-%s: %s\n' "$(date -u +%H:%M:%S)" "${ROLE:-?}" "$*"; }
die() { say "error: $1" >&2; exit "${2:-1}"; }
case "$ROLE" in relay|trainer|rollout|eval) ;; *) die "usage: entrypoint.sh relay|trainer|rollout|eval (got '${ROLE}')" 2 ;; esac

BIN=${PAIL_BIN:-/opt/pail/bin}
TMP=${PAIL_TMP:-/tmp/pail}
RUN=${PAIL_RUN:-}
BUCKET=${PAIL_BUCKET:-pail}
PORT=${PAIL_RELAY_PORT:-9000}
HOST=${PAIL_RELAY_HOST:-${HF_NETWORK_GROUP_PREFIX:-}relay}
case "$HOST" in *:*) EP_HOST="[$HOST]" ;; *) EP_HOST=$HOST ;; esac
ENDPOINT=${PAIL_ENDPOINT:-https://$EP_HOST:$PORT}
START_TIMEOUT=${PAIL_START_TIMEOUT:-900}
GROUP=${PAIL_GROUP_SIZE:-8}
MODEL=${PAIL_MODEL:-/model}
[[ "$RUN" =~ ^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$ ]] || die "PAIL_RUN '$RUN': set it, with [A-Za-z0-9_.-] and /" 2
for v in PORT START_TIMEOUT GROUP; do [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v='${!v}' is not a whole number" 2; done
URL=s3://$BUCKET/$RUN
export AWS_REGION=${AWS_REGION:-us-east-1}
mkdir -p "$TMP" && chmod 700 "$TMP" || die "PAIL_TMP $TMP: cannot create"
[ -n "${PAIL_CA_CERT:-}" ] || die "PAIL_CA_CERT is not set: the run's CA certificate (base64 PEM)" 2
base64 -d <<<"$PAIL_CA_CERT" >"$TMP/ca.pem" 2>/dev/null && grep -q 'BEGIN CERTIFICATE' "$TMP/ca.pem" \
  || die "PAIL_CA_CERT: not a base64-encoded PEM certificate" 2
CA=$TMP/ca.pem
key_of() {  # key_of NAME -> "ID SECRET" from the secret NAME, checked
  local v=${!1:-}; read -r id sk rest <<<"$v"
  [ -n "${id:-}" ] && [ -n "${sk:-}" ] && [ -z "${rest:-}" ] || die "secret $1 must hold 'ACCESS_KEY_ID SECRET'" 2
  echo "$id $sk"
}
# split_args ARRAY VAR: $VAR's words into ARRAY, quoted as in the shell but nothing
# expanded (xargs's rules), so --reward-cmd 'python3 r.py' stays one word.
split_args() {
  local -n _to=$1; local v=${!2:-}; _to=()
  [ -n "$v" ] || return 0
  xargs printf '' <<<"$v" 2>/dev/null || die "$2: unmatched quote in: $v" 2
  mapfile -d '' _to < <(xargs -r printf '%s\0' <<<"$v")
}
extra=(); task=()  # filled by split_args
CHILD=
trap '[ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null' TERM INT
ctl() {  # ctl ARGS...: grpo-ctl as the operator against ENDPOINT
  local id sk; read -r id sk <<<"$(key_of PAIL_OPERATOR_KEY)"
  AWS_ACCESS_KEY_ID=$id AWS_SECRET_ACCESS_KEY=$sk "$BIN/grpo-ctl" "$@" --endpoint "${CTL_ENDPOINT:-$ENDPOINT}" --ca-bundle "$CA"
}
wait_relay() {  # until the relay answers a signed LIST with the given key
  local id sk deadline=$(( $(date +%s) + START_TIMEOUT ))
  read -r id sk <<<"$(key_of "$1")"
  until AWS_ACCESS_KEY_ID=$id AWS_SECRET_ACCESS_KEY=$sk "$BIN/grpo-ctl" ls "$URL/adapters/" --endpoint "$ENDPOINT" \
      --ca-bundle "$CA" --max-outage 2 >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "the relay at $ENDPOINT did not answer within ${START_TIMEOUT}s"
    sleep 3
  done
  say "relay $ENDPOINT answers"
}
run_child() { "$@" & CHILD=$!; while :; do wait "$CHILD"; local rc=$?; kill -0 "$CHILD" 2>/dev/null || { wait "$CHILD"; return; }; done; }

case "$ROLE" in
relay)
  for n in PAIL_TRAINER_KEY PAIL_ROLLOUT_KEY PAIL_OPERATOR_KEY; do key_of "$n" >/dev/null; done
  [ -n "${PAIL_CA_KEY:-}" ] || die "PAIL_CA_KEY is not set: the relay signs its certificate with the run's CA key" 2
  ( umask 077; base64 -d <<<"$PAIL_CA_KEY" >"$TMP/ca.key" ) 2>/dev/null && grep -q 'PRIVATE KEY' "$TMP/ca.key" \
    || die "PAIL_CA_KEY: not a base64-encoded PEM private key" 2
  # The certificate names every address the other Jobs may use.
  san="DNS:$HOST,DNS:$(hostname),DNS:localhost,IP:127.0.0.1"
  [[ "$HOST" =~ ^[0-9.]+$ ]] && san="IP:$HOST,DNS:$(hostname),DNS:localhost,IP:127.0.0.1"
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' "$san" >"$TMP/ext.cnf"
  ( umask 077
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$TMP/relay.key" \
      -out "$TMP/relay.csr" -subj "/CN=$HOST" >/dev/null 2>&1 \
    && openssl x509 -req -in "$TMP/relay.csr" -CA "$CA" -CAkey "$TMP/ca.key" -CAcreateserial -days 30 \
      -out "$TMP/relay.pem" -extfile "$TMP/ext.cnf" >/dev/null 2>&1 ) || die "openssl could not sign the relay certificate"
  rm -f "$TMP/ca.key"
  { echo "# ACCESS_KEY_ID SECRET ROLE PREFIX"
    for r in trainer rollout operator; do
      n=PAIL_$(tr a-z A-Z <<<"$r")_KEY; echo "$(key_of "$n") $r $RUN"; done
  } >"$TMP/keys.txt" || exit 1
  chmod 600 "$TMP/keys.txt"
  if [ -n "${PAIL_UPSTREAM:-}" ]; then backing=(--upstream "$PAIL_UPSTREAM")
  else mkdir -p "${PAIL_RELAY_ROOT:-/data/bucket}"; backing=(--root "${PAIL_RELAY_ROOT:-/data/bucket}"); fi
  split_args extra PAIL_RELAY_ARGS
  say "relay for $URL on port $PORT as $HOST (backing: ${backing[*]})"
  "$BIN/grpo-relay" --listen "0.0.0.0:$PORT" "${backing[@]}" --bucket "$BUCKET" --keys "$TMP/keys.txt" \
    --cert "$TMP/relay.pem" --key "$TMP/relay.key" --access-log "${PAIL_ACCESS_LOG:-/dev/null}" "${extra[@]}" &
  CHILD=$!
  # Stay up until the trainer wrote control/stop and every worker has seen it:
  # its heartbeat (workers/<id>.json) says stopped, finished or failed, or is a minute old.
  grace=${PAIL_STOP_GRACE:-120}
  [[ "$grace" =~ ^[0-9]+$ ]] || die "PAIL_STOP_GRACE='$grace' is not a whole number" 2
  CTL_ENDPOINT=https://127.0.0.1:$PORT
  workers_live() {
    local n=0 u j st t now; now=$(date +%s)
    while read -r _ _ u; do
      case $u in *.json) ;; *) continue ;; esac
      j=$(ctl get "$u" - --max-outage 2 2>/dev/null) || continue
      st=$(sed -n 's/.*"state": *"\([a-z]*\)".*/\1/p' <<<"$j"); t=$(sed -n 's/.*"time": *\([0-9]*\).*/\1/p' <<<"$j")
      case $st in stopped|finished|failed) continue ;; esac
      [ $(( now - ${t:-0} )) -lt 60 ] && n=$((n + 1))
    done < <(ctl ls "$URL/workers/" --max-outage 2 2>/dev/null)
    echo "$n"
  }
  while kill -0 "$CHILD" 2>/dev/null; do
    if ctl stat "$URL/control/stop" --max-outage 2 >/dev/null 2>&1; then
      say "control/stop found: waiting (${grace}s at most) for the workers to stop"
      end=$(( $(date +%s) + grace ))
      while [ "$(date +%s)" -lt "$end" ] && [ "$(workers_live)" != 0 ]; do sleep 3; done
      say "stopping the relay"; kill -TERM "$CHILD"; break
    fi
    sleep 5
  done
  wait "$CHILD"; rc=$?
  exit "$rc" ;;
trainer)
  key_of PAIL_TRAINER_KEY >/dev/null; key_of PAIL_OPERATOR_KEY >/dev/null   # (die here, not in $(...))
  read -r id sk <<<"$(key_of PAIL_TRAINER_KEY)"
  [ -f "$MODEL/config.json" ] || die "PAIL_MODEL $MODEL: no config.json (mount the model with -v hf://ORG/NAME:/model)" 2
  wait_relay PAIL_TRAINER_KEY
  ctl rm "$URL/control/stop" >/dev/null 2>&1 || true   # a resubmitted run continues
  split_args extra PAIL_TRAIN_ARGS
  run_child env AWS_ACCESS_KEY_ID="$id" AWS_SECRET_ACCESS_KEY="$sk" "$BIN/grpo-train" --model "$MODEL" --run "$URL" \
    --endpoint "$ENDPOINT" --ca-bundle "$CA" --steps "${PAIL_STEPS:-200}" --group-size "$GROUP" \
    --metrics "$TMP/metrics.jsonl" "${extra[@]}"
  rc=$?
  say "trainer exited with status $rc: writing control/stop"
  : >"$TMP/empty"; ctl put "$URL/control/stop" "$TMP/empty" >/dev/null || say "could not write control/stop"
  exit "$rc" ;;
rollout|eval)
  key_of PAIL_ROLLOUT_KEY >/dev/null
  read -r id sk <<<"$(key_of PAIL_ROLLOUT_KEY)"
  [ -f "$MODEL/config.json" ] || die "PAIL_MODEL $MODEL: no config.json (mount the model with -v hf://ORG/NAME:/model)" 2
  wid=${PAIL_WORKER_ID:-hf-$(hostname | tr -c 'A-Za-z0-9_.\n-' _ | cut -c1-40)}
  if [ "$ROLE" = rollout ]; then
    [ -n "${PAIL_DATASET:-}" ] || die "PAIL_DATASET is not set: the training prompts" 2
    split_args extra PAIL_ROLLOUT_ARGS
    args=(--dataset "$PAIL_DATASET" --group-size "$GROUP")
  else
    [ -n "${PAIL_EVAL_DATASET:-}" ] || die "PAIL_EVAL_DATASET is not set: the held-out prompts" 2
    split_args extra PAIL_EVAL_ARGS
    args=(--eval --eval-dataset "$PAIL_EVAL_DATASET")
  fi
  split_args task PAIL_TASK_ARGS
  wait_relay PAIL_ROLLOUT_KEY
  run_child env AWS_ACCESS_KEY_ID="$id" AWS_SECRET_ACCESS_KEY="$sk" "$BIN/grpo-rollout" --model "$MODEL" --run "$URL" \
    --endpoint "$ENDPOINT" --ca-bundle "$CA" --worker-id "$wid" "${args[@]}" "${task[@]}" "${extra[@]}"
  exit $? ;;
esac
