#!/usr/bin/env bash
# grpo-relay in front of an upstream S3 bucket (moto, a third-party S3 server
# from PyPI, on loopback): --upstream s3://upbucket/team/pail. Keys map below
# the prefix; clients (AWS CLI, grpo-ctl) hold only relay keys, the relay's own
# AWS_* environment holds the upstream's; many GETs of a versioned object cost
# the upstream one GET; a version another writer puts straight into the
# upstream wakes a relay long-poll through the periodic re-list.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"
start_moto || exit 1
UP=(env AWS_ACCESS_KEY_ID=upstream-key AWS_SECRET_ACCESS_KEY=upstream-secret AWS_DEFAULT_REGION=us-east-1
    AWS_CONFIG_FILE=/dev/null AWS_CA_BUNDLE= aws --endpoint-url "$MOTO_URL")
check "upstream bucket created" "${UP[@]}" s3 mb s3://upbucket
export AWS_ACCESS_KEY_ID=upstream-key AWS_SECRET_ACCESS_KEY=upstream-secret AWS_REGION=us-east-1
RELAY_BACKEND="--upstream s3://upbucket/team/pail --endpoint $MOTO_URL --poll-interval 0.5"
start_relay || exit 1
relay_aws_env "$OP_AK" "$OP_SK"
echo "hello upstream" >"$WORK/a.txt"
check "aws cp through the relay" aws s3 cp "$WORK/a.txt" s3://pail/runs/r1/trainer/a.txt
check "... lands under the upstream prefix" bash -c "$(printf '%q ' "${UP[@]}") s3 ls s3://upbucket/team/pail/runs/r1/trainer/ | grep -q a.txt"
check "aws cp back through the relay" bash -c "aws s3 cp s3://pail/runs/r1/trainer/a.txt - | cmp - '$WORK/a.txt'"
check "aws ls through the relay" bash -c "aws s3 ls s3://pail/runs/r1/trainer/ | grep -q a.txt"
head -c $((20 << 20)) /dev/urandom >"$WORK/big.bin"
# Published like pail does (x-amz-meta-pail-sha256): only such objects are cached.
check "20 MiB multipart through the relay to the upstream" aws s3 cp "$WORK/big.bin" s3://pail/runs/r1/adapters/v00000001.h5 \
  --metadata "pail-sha256=$(sha256sum "$WORK/big.bin" | cut -c1-64)"
check "... intact in the upstream" bash -c "$(printf '%q ' "${UP[@]}") s3 cp s3://upbucket/team/pail/runs/r1/adapters/v00000001.h5 - | cmp - '$WORK/big.bin'"
export AWS_ACCESS_KEY_ID=$RO_AK AWS_SECRET_ACCESS_KEY=$RO_SK
G=(--endpoint "$RELAY_URL" --ca-bundle "$RELAY_CA")
before=$(grep -c "GET /upbucket/team/pail/runs/r1/adapters/v00000001.h5" "$WORK/moto.log")
for i in 1 2 3 4 5 6; do "$BIN/grpo-ctl" get "${G[@]}" s3://pail/runs/r1/adapters/v00000001.h5 "$WORK/g.$i" 2>/dev/null & done
wait_all_ok=1
for j in $(jobs -p); do [ "$j" = "$RELAY_PID" ] || [ "$j" = "${PIDS[0]}" ] || wait "$j" || wait_all_ok=0; done
check "6 parallel downloads through the relay intact" bash -c "for i in 1 2 3 4 5 6; do cmp '$WORK/big.bin' '$WORK/g.'\$i || exit 1; done"
after=$(grep -c "GET /upbucket/team/pail/runs/r1/adapters/v00000001.h5" "$WORK/moto.log")
check "... cost the upstream one GET ($((after - before)))" test $((after - before)) = 1
# Another writer publishes v2 straight into the upstream; a relay long-poll sees it.
python3 "$ROOT/tests/integration/relay_sign.py" GET \
  "$RELAY_URL/pail?list-type=2&prefix=runs/r1/adapters/&start-after=runs/r1/adapters/v00000001.h5&x-pail-wait=15" \
  "$RD_AK" "$RD_SK" --ca "$RELAY_CA" --print-body >"$WORK/lp.out" 2>&1 &
lp=$!
sleep 1
t0=$(date +%s%N)
"${UP[@]}" s3 cp "$WORK/a.txt" s3://upbucket/team/pail/runs/r1/adapters/v00000002.h5 >/dev/null
wait $lp
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "a write that bypasses the relay wakes its long-poll (${ms} ms, re-list every 0.5 s)" \
  bash -c "grep -q v00000002.h5 '$WORK/lp.out' && [ $ms -lt 3000 ]"
check "the upstream credentials are refused by the relay" bash -c "
  AWS_ACCESS_KEY_ID=upstream-key AWS_SECRET_ACCESS_KEY=upstream-secret aws s3 ls s3://pail/runs/r1/ 2>&1 | grep -q InvalidAccessKeyId"
# S3 semantics against the reference: the same boto3 calls to the relay and to moto.
"$(venv)/bin/python" "$ROOT/validation/relay/s3_parity.py" "$RELAY_URL" "$RELAY_CA" "$OP_AK" "$OP_SK" "$MOTO_URL" \
  >"$WORK/parity.out" 2>&1
rc=$?
sed 's/^/  /' "$WORK/parity.out" | grep -E "DIFF|relay:|moto:|differ|Error|error" | head -20
check "relay and moto agree on listing, ranges, conditionals, errors ($(tail -1 "$WORK/parity.out"))" test $rc = 0
finish
