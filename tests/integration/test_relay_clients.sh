#!/usr/bin/env bash
# grpo-relay against independent S3 clients over HTTPS with SigV4 (loopback):
# the AWS CLI (cp, ls, rm, a 100 MiB multipart upload, conditional get,
# create-only put), s3cmd, boto3 (path and virtual-host style) and pail's own
# store client (grpo-ctl). Then SIGHUP key reload and a graceful SIGTERM.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"
start_relay || exit 1
relay_aws_env "$OP_AK" "$OP_SK"
R=$WORK/root
echo "relay on $RELAY_URL"

# ---- AWS CLI ----
echo "small object $(date)" >"$WORK/small.txt"
check "aws s3 cp (put)" aws s3 cp "$WORK/small.txt" s3://pail/runs/r1/trainer/small.txt
check "aws put landed in --root" cmp "$WORK/small.txt" "$R/runs/r1/trainer/small.txt"
check "aws s3 ls shows it" bash -c "aws s3 ls s3://pail/runs/r1/trainer/ | grep -q small.txt"
check "aws s3 ls --recursive" bash -c "aws s3 ls --recursive s3://pail/runs/ | grep -q runs/r1/trainer/small.txt"
check "aws s3 cp (get)" aws s3 cp s3://pail/runs/r1/trainer/small.txt "$WORK/small.back"
check "aws get is identical" cmp "$WORK/small.txt" "$WORK/small.back"
head -c $((100 << 20)) /dev/urandom >"$WORK/big.bin"
start=$(date +%s.%N)
check "aws s3 cp 100 MiB (multipart)" aws s3 cp "$WORK/big.bin" s3://pail/runs/r1/adapters/v00000001.h5
echo "        100 MiB upload: $(echo "$(date +%s.%N) - $start" | bc | cut -c1-5) s"
check "the 100 MiB upload went multipart" grep -q "MPCOMPLETE runs/r1/adapters/v00000001.h5 200" "$WORK/access.log"
check "100 MiB object intact in --root" cmp "$WORK/big.bin" "$R/runs/r1/adapters/v00000001.h5"
check "aws s3 cp 100 MiB back" aws s3 cp s3://pail/runs/r1/adapters/v00000001.h5 "$WORK/big.back"
check "100 MiB download identical" cmp "$WORK/big.bin" "$WORK/big.back"
etag=$(aws s3api head-object --bucket pail --key runs/r1/trainer/small.txt --query ETag --output text)
check "head-object gives an ETag" test -n "$etag"
aws s3api get-object --bucket pail --key runs/r1/trainer/small.txt --if-none-match "$etag" "$WORK/cond.out" \
  >"$WORK/cond.log" 2>&1
check "conditional get with the current ETag -> 304" grep -q "304" "$WORK/cond.log"
check "conditional get with another ETag -> 200" aws s3api get-object --bucket pail --key runs/r1/trainer/small.txt \
  --if-none-match '"0000"' "$WORK/cond2.out"
check "aws s3api get-object --range" bash -c "aws s3api get-object --bucket pail --key runs/r1/trainer/small.txt \
  --range bytes=0-4 '$WORK/range.out' >/dev/null && [ \"\$(cat '$WORK/range.out')\" = small ]"
check "put-object --if-none-match '*' (new key)" aws s3api put-object --bucket pail --key runs/r1/trainer/once.txt \
  --body "$WORK/small.txt" --if-none-match '*'
aws s3api put-object --bucket pail --key runs/r1/trainer/once.txt --body "$WORK/range.out" --if-none-match '*' \
  >"$WORK/pre.log" 2>&1
check "put-object --if-none-match '*' on an existing key -> PreconditionFailed" grep -q PreconditionFailed "$WORK/pre.log"
check "... and the object is unchanged" cmp "$WORK/small.txt" "$R/runs/r1/trainer/once.txt"
check "aws s3 rm" aws s3 rm s3://pail/runs/r1/trainer/once.txt
check "rm removed it from --root" test ! -e "$R/runs/r1/trainer/once.txt"
check "x-amz-meta metadata round trip" bash -c "aws s3api put-object --bucket pail --key runs/r1/trainer/m.txt \
  --body '$WORK/small.txt' --metadata pail-sha256=abc123 >/dev/null &&
  aws s3api head-object --bucket pail --key runs/r1/trainer/m.txt --query Metadata --output text | grep -q abc123"

# ---- s3cmd ----
cat >"$WORK/s3cmd.cfg" <<CFG
[default]
access_key = $OP_AK
secret_key = $OP_SK
host_base = 127.0.0.1:$RELAY_PORT
host_bucket = 127.0.0.1:$RELAY_PORT
use_https = True
ca_certs_file = $RELAY_CA
check_ssl_certificate = True
signature_v2 = False
bucket_location = us-east-1
CFG
S3CMD=(s3cmd -c "$WORK/s3cmd.cfg" --no-progress)
check "s3cmd put" "${S3CMD[@]}" put "$WORK/small.txt" s3://pail/runs/r1/workers/s3cmd.txt
check "s3cmd ls" bash -c "$(printf '%q ' "${S3CMD[@]}") ls s3://pail/runs/r1/workers/ | grep -q s3cmd.txt"
check "s3cmd get" "${S3CMD[@]}" get --force s3://pail/runs/r1/workers/s3cmd.txt "$WORK/s3cmd.back"
check "s3cmd get is identical" cmp "$WORK/small.txt" "$WORK/s3cmd.back"
check "s3cmd del" "${S3CMD[@]}" del s3://pail/runs/r1/workers/s3cmd.txt
check "s3cmd del removed it" test ! -e "$R/runs/r1/workers/s3cmd.txt"

# ---- boto3 (PyPI, project venv) ----
PY=$(venv)/bin/python
cat >"$WORK/boto.py" <<'PYEOF'
import os, socket, sys
import boto3, botocore
from botocore.config import Config
url, ca = sys.argv[1], sys.argv[2]
real = socket.getaddrinfo
def fake(host, *a, **k):  # virtual-host style needs pail.localhost -> 127.0.0.1
    return real("127.0.0.1" if host == "pail.localhost" else host, *a, **k)
socket.getaddrinfo = fake
for style, endpoint in (("path", url), ("virtual", url.replace("127.0.0.1", "localhost"))):
    s3 = boto3.client("s3", endpoint_url=endpoint, verify=ca, region_name="us-east-1",
                      config=Config(signature_version="s3v4", s3={"addressing_style": style}))
    k = f"runs/r1/metrics/boto-{style}.json"
    s3.put_object(Bucket="pail", Key=k, Body=b'{"x": 1}', Metadata={"pail-sha256": "feed"})
    o = s3.get_object(Bucket="pail", Key=k)
    assert o["Body"].read() == b'{"x": 1}', "get body"
    assert o["Metadata"]["pail-sha256"] == "feed", o["Metadata"]
    assert o["ResponseMetadata"]["HTTPHeaders"]["x-pail-relay"] == "1"
    h = s3.head_object(Bucket="pail", Key=k)
    assert h["ContentLength"] == 8
    keys = [c["Key"] for c in s3.list_objects_v2(Bucket="pail", Prefix="runs/r1/metrics/")["Contents"]]
    assert k in keys, keys
    try:
        s3.put_object(Bucket="pail", Key=k, Body=b"other", IfNoneMatch="*")
        raise SystemExit("IfNoneMatch='*' on an existing key was accepted")
    except botocore.exceptions.ClientError as e:
        assert e.response["Error"]["Code"] == "PreconditionFailed", e.response
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    s3.put_object(Bucket="pail", Key=k + ".new", Body=b"n", IfNoneMatch="*")
    try:
        s3.get_object(Bucket="pail", Key=k, IfNoneMatch=o["ETag"])
        raise SystemExit("IfNoneMatch with the current etag returned a body")
    except botocore.exceptions.ClientError as e:
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 304, e.response
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket="pail", Prefix="runs/r1/", PaginationConfig={"PageSize": 2})
    n = sum(len(p.get("Contents", [])) for p in pages)
    assert n >= 4, n
    print(style, "ok")
PYEOF
check "boto3: put/get/head/list, metadata, IfNoneMatch (path + virtual-host)" "$PY" "$WORK/boto.py" "$RELAY_URL" "$RELAY_CA"

# ---- S3 semantics against a reference (moto): validation/relay/s3_parity.py ----
if start_moto; then
  "$PY" "$ROOT/validation/relay/s3_parity.py" "$RELAY_URL" "$RELAY_CA" "$OP_AK" "$OP_SK" "$MOTO_URL" \
    >"$WORK/parity.out" 2>&1
  rc=$?
  grep -E -A2 "DIFF|Error" "$WORK/parity.out" | head -20
  check "file-backed relay and moto agree ($(tail -1 "$WORK/parity.out"))" test $rc = 0
else
  bad "moto did not start (validation/relay/s3_parity.py not run)"
fi

# ---- pail's store client ----
G=(--endpoint "$RELAY_URL" --ca-bundle "$RELAY_CA")
export AWS_ACCESS_KEY_ID=$TR_AK AWS_SECRET_ACCESS_KEY=$TR_SK
check "grpo-ctl put --versioned (trainer key)" "$BIN/grpo-ctl" put "${G[@]}" --versioned s3://pail/runs/r1/adapters/v00000002.h5 "$WORK/small.txt"
check "grpo-ctl put --versioned again (same bytes: success)" "$BIN/grpo-ctl" put "${G[@]}" --versioned s3://pail/runs/r1/adapters/v00000002.h5 "$WORK/small.txt"
expect_fail "grpo-ctl put --versioned other bytes -> conflict" 1 "different content" \
  "$BIN/grpo-ctl" put "${G[@]}" --versioned s3://pail/runs/r1/adapters/v00000002.h5 "$WORK/range.out"
check "grpo-ctl stat shows pail-sha256" bash -c "'$BIN/grpo-ctl' stat $(printf '%q ' "${G[@]}") s3://pail/runs/r1/adapters/v00000002.h5 | grep -q pail-sha256"
export AWS_ACCESS_KEY_ID=$RO_AK AWS_SECRET_ACCESS_KEY=$RO_SK
check "grpo-ctl get (rollout key)" "$BIN/grpo-ctl" get "${G[@]}" s3://pail/runs/r1/adapters/v00000001.h5 "$WORK/g.back"
check "grpo-ctl get identical" cmp "$WORK/big.bin" "$WORK/g.back"
check "grpo-ctl ls" bash -c "'$BIN/grpo-ctl' ls $(printf '%q ' "${G[@]}") s3://pail/runs/r1/adapters/ | grep -q v00000002.h5"
expect_fail "grpo-ctl put adapter with the rollout key -> AccessDenied" 1 "AccessDenied" \
  "$BIN/grpo-ctl" put "${G[@]}" s3://pail/runs/r1/adapters/v00000003.h5 "$WORK/small.txt"
check "... nothing written" test ! -e "$R/runs/r1/adapters/v00000003.h5"

# ---- key reload (SIGHUP) and graceful stop (SIGTERM) ----
echo "pail-late late-secret-0123456789abcdef reader runs/r1" >>"$WORK/keys"
kill -HUP "$RELAY_PID"; sleep 0.5
export AWS_ACCESS_KEY_ID=pail-late AWS_SECRET_ACCESS_KEY=late-secret-0123456789abcdef
check "a key added to --keys works after SIGHUP" "$BIN/grpo-ctl" stat "${G[@]}" s3://pail/runs/r1/trainer/small.txt
check "access log: one line per request with role, method, key, status, bytes, ms" \
  grep -Eq '^[0-9T:.-]+Z rollout GET GET runs/r1/adapters/v00000001.h5 200 104857600 [0-9.]+$' "$WORK/access.log"
check "secrets never appear in the logs" bash -c "! grep -q -e '$OP_SK' -e '$TR_SK' -e '$RO_SK' '$WORK/access.log' '$WORK/relay.log'"
kill -TERM "$RELAY_PID"
wait "$RELAY_PID"; rc=$?
check "SIGTERM: the relay exits 0" test "$rc" = 0
finish
