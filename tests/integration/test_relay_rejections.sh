#!/usr/bin/env bash
# grpo-relay's rejections over HTTPS, signed by an independent SigV4 signer
# (relay_sign.py: hashlib/hmac only): no signature, a wrong secret, an unknown
# key, a stale date, a tampered payload, the wrong role's prefix, a key outside
# the run prefix, role folders below the run root, keys outside the run
# layout, an object where a folder goes (409), traversal, control characters
# and keys that are not UTF-8; a key file with a trainer or rollout key without a run prefix. Each gets the right status
# and S3 error code, and nothing is written. Then the long-poll extension: a
# waiting LIST wakes when a version is published (latency printed) and returns
# an empty list at its deadline; a standard LIST is unchanged. A versioned
# object damaged in the bucket is not pinned in the relay's cache.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"
start_relay --poll-interval 5 || exit 1
SIGN=(python3 "$ROOT/tests/integration/relay_sign.py")
U=$RELAY_URL/pail
R=$WORK/root
# want "desc" "STATUS CODE" args...: one signed request, its status and S3 code.
want() {
  local d=$1 w=$2; shift 2
  local got; got=$("${SIGN[@]}" "$@" --ca "$RELAY_CA" 2>&1 | head -1)
  if [ "${got% *}" = "$w" ]; then ok "$d ($got)"; else bad "$d: want '$w', got '$got'"; fi
}
want "signed trainer PUT" "200 -" PUT "$U/runs/r1/trainer/progress.json" "$TR_AK" "$TR_SK" --body hello
want "no signature" "403 AccessDenied" PUT "$U/runs/r1/trainer/a.txt" "$TR_AK" "$TR_SK" --body x --no-auth
want "no signature (GET)" "403 AccessDenied" GET "$U/runs/r1/trainer/progress.json" "$TR_AK" "$TR_SK" --no-auth
want "wrong secret" "403 SignatureDoesNotMatch" PUT "$U/runs/r1/trainer/b.txt" "$TR_AK" wrong-secret-0123456789 --body x
want "unknown access key" "403 InvalidAccessKeyId" PUT "$U/runs/r1/trainer/c.txt" nobody "$TR_SK" --body x
want "stale date (16 min)" "403 RequestTimeTooSkewed" PUT "$U/runs/r1/trainer/d.txt" "$TR_AK" "$TR_SK" --body x --age 960
want "date 14 min old is fine" "200 -" PUT "$U/runs/r1/metrics/step-00000001.json" "$TR_AK" "$TR_SK" --body x --age 840
want "tampered payload" "400 XAmzContentSHA256Mismatch" PUT "$U/runs/r1/metrics/step-00000003.json" "$TR_AK" "$TR_SK" \
  --body tampered --signed-body original
want "UNSIGNED-PAYLOAD over TLS" "200 -" PUT "$U/runs/r1/metrics/step-00000002.json" "$TR_AK" "$TR_SK" --body x --unsigned
want "rollout writes an adapter" "403 AccessDenied" PUT "$U/runs/r1/adapters/v00000009.h5" "$RO_AK" "$RO_SK" --body x
want "trainer writes a rollout shard" "403 AccessDenied" PUT "$U/runs/r1/rollouts/v00000001/w-000001.h5" "$TR_AK" "$TR_SK" --body x
want "trainer writes control/" "403 AccessDenied" PUT "$U/runs/r1/control/stop" "$TR_AK" "$TR_SK" --body x
want "reader writes anything" "403 AccessDenied" PUT "$U/runs/r1/workers/r.json" "$RD_AK" "$RD_SK" --body x
want "trainer deletes" "403 AccessDenied" DELETE "$U/runs/r1/trainer/progress.json" "$TR_AK" "$TR_SK"
want "rollout writes another run's adapter (eval/ below the bucket root)" "403 AccessDenied" \
  PUT "$U/runs/eval/exp1/adapters/v00000001.h5" "$RO_AK" "$RO_SK" --body x
want "rollout writes another run's run.json (workers/ below the bucket root)" "403 AccessDenied" \
  PUT "$U/runs/workers/exp2/run.json" "$RO_AK" "$RO_SK" --body x
want "trainer writes another run's control/stop (metrics/ below the bucket root)" "403 AccessDenied" \
  PUT "$U/runs/metrics/exp4/control/stop" "$TR_AK" "$TR_SK" --body x
want "rollout writes eval/ one folder below its run" "403 AccessDenied" \
  PUT "$U/runs/r1/x/eval/v00000001.json" "$RO_AK" "$RO_SK" --body x
want "outside the run prefix (write)" "403 AccessDenied" PUT "$U/runs/r2/trainer/h.txt" "$TR_AK" "$TR_SK" --body x
want "outside the run prefix (read)" "403 AccessDenied" GET "$U/runs/r2/run.json" "$RD_AK" "$RD_SK"
want "outside the run prefix (list)" "403 AccessDenied" GET "$U?list-type=2&prefix=runs/" "$RD_AK" "$RD_SK"
want "encoded traversal %2e%2e" "400 InvalidArgument" PUT "$U/runs/r1/trainer/%2e%2e/%2e%2e/%2e%2e/x" "$OP_AK" "$OP_SK" --body x
want "literal ../ traversal" "400 InvalidArgument" PUT "$U/runs/r1/trainer/../../../x" "$OP_AK" "$OP_SK" --body x
want "encoded NUL" "400 InvalidURI" PUT "$U/runs/r1/trainer/a%00b" "$OP_AK" "$OP_SK" --body x
want "encoded newline" "400 InvalidArgument" PUT "$U/runs/r1/trainer/a%0Ab" "$OP_AK" "$OP_SK" --body x
want "backslash" "400 InvalidArgument" PUT "$U/runs/r1/trainer/a%5C..%5Cb" "$OP_AK" "$OP_SK" --body x
want "reserved .pail segment" "400 InvalidArgument" PUT "$U/runs/r1/trainer/.pail-meta.ok.txt" "$OP_AK" "$OP_SK" --body x
want "a key that is not UTF-8" "400 InvalidArgument" PUT "$U/runs/r1/rollouts/v00000101/%FF%FE.h5" "$RO_AK" "$RO_SK" --body x
want "... also for the operator" "400 InvalidArgument" PUT "$U/runs/r1/control/%C0%AF" "$OP_AK" "$OP_SK" --body x
want "rollout writes an object named like a version folder" "403 AccessDenied" \
  PUT "$U/runs/r1/rollouts/v00000005" "$RO_AK" "$RO_SK" --body x
want "trainer writes outside the run layout" "403 AccessDenied" PUT "$U/runs/r1/trainer/h.txt" "$TR_AK" "$TR_SK" --body x
want "operator writes an object where a version folder goes" "200 -" PUT "$U/runs/r1/rollouts/v00000006" "$OP_AK" "$OP_SK" --body x
want "a shard below that object: a final 409, not a retried 500" "409 KeyConflict" \
  PUT "$U/runs/r1/rollouts/v00000006/w-000001.h5" "$RO_AK" "$RO_SK" --body x
want "another bucket" "404 NoSuchBucket" GET "$RELAY_URL/other/x" "$OP_AK" "$OP_SK"
check "health needs no key" curl -sf --cacert "$RELAY_CA" "$RELAY_URL/-/health"
check "every response carries x-pail-relay: 1" bash -c "curl -si --cacert '$RELAY_CA' '$RELAY_URL/pail/x' | grep -qi '^x-pail-relay: 1'"
check "TLS 1.1 is refused" bash -c "! openssl s_client -connect 127.0.0.1:$RELAY_PORT -tls1_1 </dev/null >/dev/null 2>&1"
check "TLS 1.3 is accepted" bash -c "openssl s_client -connect 127.0.0.1:$RELAY_PORT -tls1_3 -CAfile '$RELAY_CA' </dev/null 2>/dev/null | grep -q 'TLSv1.3'"
written=$(cd "$R" && find . -type f ! -name '.pail-meta.*' | sort | tr '\n' ' ')
check "nothing written but the four accepted PUTs (got: $written)" test "$written" = "./runs/r1/metrics/step-00000001.json ./runs/r1/metrics/step-00000002.json ./runs/r1/rollouts/v00000006 ./runs/r1/trainer/progress.json "
printf '%s\nexp2-rollout %s rollout\n' "$(grep -v '^#' "$WORK/keys")" "$RO_SK" >"$WORK/keys.noprefix"
expect_fail_last "a rollout key without a run prefix: the relay does not start, naming the key" 2 \
  "keys.noprefix:[0-9]+: rollout key 'exp2-rollout' has no run prefix" \
  timeout 10 "$BIN/grpo-relay" --http --listen 127.0.0.1:0 --root "$R" --keys "$WORK/keys.noprefix"
printf '%s\nexp2-trainer %s trainer runs/r1/eval\n' "$(grep -v '^#' "$WORK/keys")" "$TR_SK" >"$WORK/keys.nested"
expect_fail_last "a trainer key for a run inside another run: the relay does not start" 2 \
  "keys.nested:[0-9]+: run runs/r1/eval of trainer key 'exp2-trainer' lies inside run runs/r1" \
  timeout 10 "$BIN/grpo-relay" --http --listen 127.0.0.1:0 --root "$R" --keys "$WORK/keys.nested"
check "plain --http on a public address is refused" bash -c "! '$BIN/grpo-relay' --http --listen 0.0.0.0:0 --root '$R' --keys '$WORK/keys' 2>'$WORK/h.err' && grep -q loopback '$WORK/h.err'"

# ---- long-poll ----
LP="$U?list-type=2&prefix=runs/r1/adapters/&start-after=runs/r1/adapters/v00000001.h5"
( t0=$(date +%s%N); "${SIGN[@]}" GET "$LP&x-pail-wait=10" "$RD_AK" "$RD_SK" --ca "$RELAY_CA" --print-body >"$WORK/lp.out"
  echo $(( ($(date +%s%N) - t0) / 1000000 )) >"$WORK/lp.ms"; date +%s%N >"$WORK/lp.woke" ) &
lp=$!
sleep 1
pub=$(date +%s%N)
export AWS_ACCESS_KEY_ID=$TR_AK AWS_SECRET_ACCESS_KEY=$TR_SK
"$BIN/grpo-ctl" put --endpoint "$RELAY_URL" --ca-bundle "$RELAY_CA" --versioned \
  s3://pail/runs/r1/adapters/v00000002.h5 "$WORK/keys" 2>"$WORK/put.err"
wait $lp
lat=$(( ($(cat "$WORK/lp.woke") - pub) / 1000000 ))
check "a waiting LIST wakes on publish (woke ${lat} ms after the publish started)" \
  bash -c "grep -q 'runs/r1/adapters/v00000002.h5' '$WORK/lp.out' && [ $lat -lt 1000 ]"
t0=$(date +%s%N)
"${SIGN[@]}" GET "${LP/v00000001/v00000002}&x-pail-wait=2" "$RD_AK" "$RD_SK" --ca "$RELAY_CA" --print-body >"$WORK/lp2.out"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "at the deadline: an empty list after ${ms} ms (want ~2000)" \
  bash -c "[ $ms -ge 1900 ] && [ $ms -lt 3500 ] && grep -q '<KeyCount>0</KeyCount>' '$WORK/lp2.out'"
t0=$(date +%s%N)
"${SIGN[@]}" GET "${LP/v00000001/v00000002}" "$RD_AK" "$RD_SK" --ca "$RELAY_CA" --print-body >"$WORK/lp3.out"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "without x-pail-wait a LIST answers at once (${ms} ms)" bash -c "[ $ms -lt 1000 ]"

echo "a versioned object damaged in the bucket is not pinned in the relay's cache"
# Only bytes that match their pail-sha256 are cached: once the object is
# repaired in the bucket, readers through the relay get the good bytes.
G=(--endpoint "$RELAY_URL" --ca-bundle "$RELAY_CA")
head -c 5000 /dev/urandom >"$WORK/good.h5"
AWS_ACCESS_KEY_ID=$TR_AK AWS_SECRET_ACCESS_KEY=$TR_SK AWS_REGION=us-east-1 "$BIN/grpo-ctl" put --versioned "${G[@]}" \
  s3://pail/runs/r1/adapters/v00000007.h5 "$WORK/good.h5" >/dev/null
cp "$R/runs/r1/adapters/v00000007.h5" "$WORK/good.bak"
printf 'XXXX' | dd of="$R/runs/r1/adapters/v00000007.h5" bs=1 seek=100 conv=notrunc 2>/dev/null
export AWS_ACCESS_KEY_ID=$RD_AK AWS_SECRET_ACCESS_KEY=$RD_SK AWS_REGION=us-east-1
expect_fail "a reader refuses the damaged object" 1 "v00000007.h5.*sha256" \
  "$BIN/grpo-ctl" get --verify "${G[@]}" s3://pail/runs/r1/adapters/v00000007.h5 "$WORK/got.h5"
cat "$WORK/good.bak" >"$R/runs/r1/adapters/v00000007.h5"   # repaired in place (same metadata)
check "once repaired in the bucket, the relay serves the good bytes" "$BIN/grpo-ctl" get --verify "${G[@]}" \
  s3://pail/runs/r1/adapters/v00000007.h5 "$WORK/got.h5"
check "...intact" cmp "$WORK/got.h5" "$WORK/good.h5"
finish
