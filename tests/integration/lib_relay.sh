# Shared helpers for the grpo-relay integration tests and the relay bench
# (sourced after lib.sh). TLS material is a throwaway CA and a server
# certificate for 127.0.0.1 / localhost, made with the openssl CLI in $WORK.
#   relay_tls DIR          -> DIR/ca.pem, DIR/server.pem, DIR/server.key
#   relay_keys FILE        -> a key file with one key per role (names below)
#   start_relay [flags]    -> starts bin/grpo-relay on a free port (or on
#                             RELAY_REUSE_PORT when set: a restart) over TLS with
#                             --root $WORK/root (or the flags in RELAY_BACKEND, e.g.
#                             "--upstream s3://b/p --endpoint URL"); sets RELAY_PORT
#                             RELAY_URL RELAY_PID
#   relay_aws_env          -> AWS CLI / boto3 environment for the operator key
#   relay_sign.py          -> an independent SigV4 signer (tests/integration/relay_sign.py)

OP_AK=pail-operator;  OP_SK=operator-secret-0123456789abcdef
TR_AK=pail-trainer;   TR_SK=trainer-secret-0123456789abcdef
RO_AK=pail-rollout;   RO_SK=rollout-secret-0123456789abcdef
RD_AK=pail-reader;    RD_SK=reader-secret-0123456789abcdef

relay_tls() {
  local d=$1
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$d/ca.key" -out "$d/ca.pem" -subj /CN=pail-test-ca >/dev/null 2>&1 || return 1
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$d/server.key" -out "$d/server.csr" -subj /CN=localhost >/dev/null 2>&1 || return 1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:pail.localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$d/ext.cnf"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
    -out "$d/server.pem" -days 2 -extfile "$d/ext.cnf" >/dev/null 2>&1
}

relay_keys() {
  cat >"$1" <<KEYS
# ACCESS_KEY_ID SECRET ROLE [PREFIX]
$OP_AK $OP_SK operator
$TR_AK $TR_SK trainer runs/r1
$RO_AK $RO_SK rollout runs/r1
$RD_AK $RD_SK reader runs/r1
KEYS
}

start_relay() {
  mkdir -p "$WORK/root" "$WORK/tls"
  [ -f "$WORK/tls/ca.pem" ] || relay_tls "$WORK/tls" || { echo "openssl failed"; return 1; }
  [ -f "$WORK/keys" ] || relay_keys "$WORK/keys"
  RELAY_PORT=${RELAY_REUSE_PORT:-$(free_port)}
  RELAY_URL="https://127.0.0.1:$RELAY_PORT"
  RELAY_CA="$WORK/tls/ca.pem"
  local backend; read -r -a backend <<<"${RELAY_BACKEND:---root $WORK/root}"
  "$BIN/grpo-relay" --listen "127.0.0.1:$RELAY_PORT" "${backend[@]}" --keys "$WORK/keys" \
    --cert "$WORK/tls/server.pem" --key "$WORK/tls/server.key" "$@" \
    >>"$WORK/access.log" 2>>"$WORK/relay.log" &
  RELAY_PID=$!
  PIDS+=($RELAY_PID)
  local i
  for i in $(seq 1 100); do
    curl -sf --cacert "$RELAY_CA" "$RELAY_URL/-/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "grpo-relay did not start:"; cat "$WORK/relay.log"; return 1
}

relay_aws_env() {  # relay_aws_env AK SK
  export AWS_ACCESS_KEY_ID=$1 AWS_SECRET_ACCESS_KEY=$2 AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
  export AWS_CA_BUNDLE=$RELAY_CA AWS_ENDPOINT_URL=$RELAY_URL
  export AWS_CONFIG_FILE="$WORK/aws.cfg" AWS_SHARED_CREDENTIALS_FILE=/dev/null
  printf '[default]\ns3 =\n    addressing_style = path\n' >"$AWS_CONFIG_FILE"
  unset AWS_SESSION_TOKEN AWS_PROFILE
}
