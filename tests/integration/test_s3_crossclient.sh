#!/usr/bin/env bash
# grpo-ctl against a real third-party S3 server (moto, with authentication on):
# byte-identical round trips with the AWS CLI and boto3 both ways, including a
# 100 MiB object (multipart both ways), metadata, create-only, versioned
# publish, and the bad-input errors (missing bucket, unknown key, wrong secret,
# unreachable endpoint, '..' keys, usage errors).
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
start_moto 4 || { bad "moto server"; finish; exit 1; }
read -r KEY SECRET < <("$PY" "$ROOT/validation/s3/moto_setup.py" "$MOTO_URL" pail-test) \
  || { bad "moto setup"; finish; exit 1; }
export AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_ENDPOINT_URL=$MOTO_URL AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
unset AWS_SESSION_TOKEN AWS_PROFILE
CTL="$BIN/grpo-ctl"
AWS=(aws --endpoint-url "$MOTO_URL")
B=s3://pail-test

head -c 1000 /dev/urandom >"$WORK/small.bin"
: >"$WORK/empty.bin"
head -c $((100 * 1024 * 1024)) /dev/urandom >"$WORK/big.bin"

echo "grpo-ctl -> AWS CLI / boto3"
for f in small empty big; do
  check "grpo-ctl put $f" "$CTL" put "$B/ctl/$f.bin" "$WORK/$f.bin"
  check "aws s3 cp reads $f" "${AWS[@]}" s3 cp --only-show-errors "$B/ctl/$f.bin" "$WORK/$f.aws"
  check "aws bytes identical ($f)" cmp "$WORK/$f.bin" "$WORK/$f.aws"
  check "boto3 reads $f" "$PY" "$ROOT/validation/s3/boto_io.py" get pail-test "ctl/$f.bin" "$WORK/$f.boto"
  check "boto3 bytes identical ($f)" cmp "$WORK/$f.bin" "$WORK/$f.boto"
done
"$PY" "$ROOT/validation/s3/boto_io.py" head pail-test ctl/big.bin >"$WORK/head.json"
check "grpo-ctl uploaded 100 MiB as multipart (etag -N)" grep -Eq '"ETag": "\\"[0-9a-f]+-[0-9]+\\""' "$WORK/head.json"

echo "AWS CLI / boto3 -> grpo-ctl"
check "aws s3 cp writes big (multipart)" "${AWS[@]}" s3 cp --only-show-errors "$WORK/big.bin" "$B/aws/big.bin"
check "grpo-ctl get aws big" "$CTL" get "$B/aws/big.bin" "$WORK/big.ctl1"
check "bytes identical (aws -> ctl)" cmp "$WORK/big.bin" "$WORK/big.ctl1"
check "boto3 writes small" "$PY" "$ROOT/validation/s3/boto_io.py" put pail-test boto/small.bin "$WORK/small.bin"
check "grpo-ctl get boto small to stdout" bash -c "'$CTL' get '$B/boto/small.bin' - > '$WORK/small.ctl'"
check "bytes identical (boto3 -> ctl)" cmp "$WORK/small.bin" "$WORK/small.ctl"
check "grpo-ctl get --range" bash -c "'$CTL' get --range 10-19 '$B/boto/small.bin' > '$WORK/range.ctl'"
check "range bytes identical" cmp "$WORK/range.ctl" <(tail -c +11 "$WORK/small.bin" | head -c 10)

echo "metadata, listing, create-only, versioned, delete"
check "put with metadata" "$CTL" put --meta color=blue --meta pail-sha256=abc "$B/meta/x" "$WORK/small.bin"
"$PY" "$ROOT/validation/s3/boto_io.py" head pail-test meta/x >"$WORK/meta.json"
check "boto3 sees x-amz-meta-*" grep -q '"color": "blue"' "$WORK/meta.json"
"$CTL" stat "$B/meta/x" >"$WORK/stat.json" 2>&1
check "grpo-ctl stat shows metadata" grep -q '"color": "blue"' "$WORK/stat.json"
"$CTL" ls --recursive "$B/" >"$WORK/ls.txt" 2>&1
check "grpo-ctl ls lists aws-written key" grep -q "s3://pail-test/aws/big.bin" "$WORK/ls.txt"
"${AWS[@]}" s3 ls --recursive "$B/" >"$WORK/awsls.txt" 2>&1
check "aws ls lists grpo-ctl-written key" grep -q "ctl/small.bin" "$WORK/awsls.txt"
"$CTL" ls "$B/" >"$WORK/ls2.txt" 2>&1
check "grpo-ctl ls groups folders" grep -q "PRE.*s3://pail-test/ctl/" "$WORK/ls2.txt"
check "create-only put of a new key" "$CTL" put --create-only "$B/co/x" "$WORK/small.bin"
expect_fail "create-only put of an existing key" 1 "exists" "$CTL" put --create-only "$B/co/x" "$WORK/small.bin"
check "versioned publish" "$CTL" put --versioned "$B/run/adapters/v00000001.h5" "$WORK/small.bin"
check "versioned re-publish of the same bytes" "$CTL" put --versioned "$B/run/adapters/v00000001.h5" "$WORK/small.bin"
expect_fail "versioned publish of other bytes" 1 "different content" \
  "$CTL" put --versioned "$B/run/adapters/v00000001.h5" "$WORK/empty.bin"
check "verified get" "$CTL" get --verify "$B/run/adapters/v00000001.h5" "$WORK/v1"
check "rm" "$CTL" rm "$B/co/x"
expect_fail "get after rm" 1 "not found" "$CTL" get "$B/co/x" "$WORK/x"
expect_fail "rm of a missing key" 1 "not found" "$CTL" rm "$B/co/x"

echo "grpo-ctl doctor"
check "doctor on moto: ready" bash -c "'$CTL' doctor --run '$B/doctor-run' > '$WORK/doc-ok.out'"
check "...create-only honoured" grep -q "create-only puts are honoured" "$WORK/doc-ok.out"
check "...probe keys cleaned up" bash -c "! '$CTL' ls --recursive '$B/doctor-run/' | grep -q doctor-probe"
env AWS_SECRET_ACCESS_KEY=wrong-secret-value "$CTL" doctor --run "$B/doctor-run" --max-outage 1 >"$WORK/doc.out" 2>&1
rc=$?
check "doctor with a wrong secret: NOT READY, exit 1" bash -c "[ $rc = 1 ] && grep -q 'NOT READY' '$WORK/doc.out' && grep -q SignatureDoesNotMatch '$WORK/doc.out'"

echo "bad input"
expect_fail "missing bucket" 1 "no-such-bucket" "$CTL" get s3://no-such-bucket/k "$WORK/x"
expect_fail "missing key" 1 "not found" "$CTL" get "$B/nope/nothing" "$WORK/x"
expect_fail "wrong secret" 1 "SignatureDoesNotMatch" env AWS_SECRET_ACCESS_KEY=wrong-secret-value "$CTL" get "$B/ctl/small.bin" "$WORK/x"
expect_fail "unknown access key" 1 "InvalidAccessKeyId" env AWS_ACCESS_KEY_ID=AKIAUNKNOWNKEY000000 "$CTL" get "$B/ctl/small.bin" "$WORK/x"
dead=$(free_port)
expect_fail "unreachable endpoint" 1 "127.0.0.1:$dead" "$CTL" get --max-outage 2 --endpoint "http://127.0.0.1:$dead" "$B/k" "$WORK/x"
expect_fail "plain http to a remote host is refused" 1 "http" "$CTL" ls --endpoint http://192.0.2.1:9000 "$B/"
expect_fail "key with .." 1 "'\.\.'" "$CTL" put "$B/a/../b" "$WORK/small.bin"
expect_fail "missing arguments" 2 "expected" "$CTL" put "$B/a"
expect_fail "unknown flag" 2 "unknown flag" "$CTL" get --bogus "$B/a"
expect_fail "unknown command" 2 "unknown command" "$CTL" frobnicate
grep -rl -- "$SECRET" "$WORK"/*.err "$WORK"/*.txt "$WORK"/*.json 2>/dev/null >"$WORK/leaks" || true
check "secret never printed" test ! -s "$WORK/leaks"
finish
