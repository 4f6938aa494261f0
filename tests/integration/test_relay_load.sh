#!/usr/bin/env bash
# grpo-relay under load over TLS, memory bounded: 16 slow and fast clients
# downloading a 48 MiB object at once (larger than the cache takes, so it
# streams in 8 MiB ranged reads), 24 clients hammering a cached small object,
# 100 parked long-polls, and uploads; every byte checked, and the relay's peak
# resident memory must stay under --cache-bytes + --stream-bytes + a fixed
# allowance, far below what buffering the downloads whole would take (768 MiB).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"
start_relay --cache-bytes $((32 << 20)) --stream-bytes $((64 << 20)) --max-body-bytes $((16 << 20)) || exit 1
R=$WORK/root
mkdir -p "$R/runs/r1/adapters" "$R/runs/r1/rollouts/v00000001"
head -c $((48 << 20)) /dev/urandom >"$R/runs/r1/adapters/v00000001.h5"
head -c 4096 /dev/urandom >"$R/runs/r1/rollouts/v00000001/w-000001.h5"
want_big=$(sha256sum <"$R/runs/r1/adapters/v00000001.h5" | cut -c1-64)
want_small=$(sha256sum <"$R/runs/r1/rollouts/v00000001/w-000001.h5" | cut -c1-64)
SIGN=(python3 "$ROOT/tests/integration/relay_sign.py")
hdrs() { python3 - "$1" "$RD_AK" "$RD_SK" <<'PY'
import datetime, hashlib, hmac, sys, urllib.parse
url, ak, sk = sys.argv[1:]
u = urllib.parse.urlsplit(url)
amz = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ"); day = amz[:8]
ph = hashlib.sha256(b"").hexdigest()
h = {"host": u.netloc, "x-amz-date": amz, "x-amz-content-sha256": ph}
creq = "\n".join(["GET", u.path, "", "".join(f"{k}:{h[k]}\n" for k in sorted(h)), ";".join(sorted(h)), ph])
scope = f"{day}/us-east-1/s3/aws4_request"
sts = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(creq.encode()).hexdigest()])
k = ("AWS4" + sk).encode()
for m in (day, "us-east-1", "s3", "aws4_request"): k = hmac.new(k, m.encode(), hashlib.sha256).digest()
sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
print(f"Authorization: AWS4-HMAC-SHA256 Credential={ak}/{scope}, SignedHeaders={';'.join(sorted(h))}, Signature={sig}")
print(f"x-amz-date: {amz}"); print(f"x-amz-content-sha256: {ph}")
PY
}
BIG="$RELAY_URL/pail/runs/r1/adapters/v00000001.h5"
SMALL="$RELAY_URL/pail/runs/r1/rollouts/v00000001/w-000001.h5"
mapfile -t HB < <(hdrs "$BIG"); mapfile -t HS < <(hdrs "$SMALL")
CB=(); for h in "${HB[@]}"; do CB+=(-H "$h"); done
CS=(); for h in "${HS[@]}"; do CS+=(-H "$h"); done
# 100 parked long-polls (answered at their 8 s deadline).
pids=()
for i in $(seq 1 100); do
  "${SIGN[@]}" GET "$RELAY_URL/pail?list-type=2&prefix=runs/r1/eval/&x-pail-wait=8" "$RD_AK" "$RD_SK" --ca "$RELAY_CA" \
    >"$WORK/lp.$i" 2>&1 &
  pids+=($!)
done
for i in $(seq 1 16); do
  if [ $((i % 3)) = 0 ]; then rate=(--limit-rate 20M); else rate=(); fi  # a third are slow readers
  ( curl -sf --cacert "$RELAY_CA" "${CB[@]}" "${rate[@]}" "$BIG" | sha256sum | cut -c1-64 >"$WORK/big.$i" ) &
  pids+=($!)
  ( for j in $(seq 1 30); do curl -sf --cacert "$RELAY_CA" "${CS[@]}" "$SMALL"; done | sha256sum >/dev/null
    curl -sf --cacert "$RELAY_CA" "${CS[@]}" "$SMALL" | sha256sum | cut -c1-64 >"$WORK/small.$i" ) &
  pids+=($!)
done
export AWS_ACCESS_KEY_ID=$RO_AK AWS_SECRET_ACCESS_KEY=$RO_SK
head -c $((40 << 20)) /dev/urandom >"$WORK/up.bin"
for i in 1 2; do
  "$BIN/grpo-ctl" put --endpoint "$RELAY_URL" --ca-bundle "$RELAY_CA" s3://pail/runs/r1/rollouts/v00000001/up-00000$i.h5 "$WORK/up.bin" 2>"$WORK/up.$i.err" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
okb=0; oks=0
for i in $(seq 1 16); do
  [ "$(cat "$WORK/big.$i")" = "$want_big" ] && okb=$((okb + 1))
  [ "$(cat "$WORK/small.$i")" = "$want_small" ] && oks=$((oks + 1))
done
check "16 concurrent 48 MiB downloads intact ($okb/16)" test "$okb" = 16
check "16 clients x 30 cached small GETs intact ($oks/16)" test "$oks" = 16
check "2 concurrent 40 MiB multipart uploads intact" bash -c "for i in 1 2; do cmp '$WORK/up.bin' '$R/runs/r1/rollouts/v00000001/up-00000'\$i.h5 || exit 1; done"
lp_ok=$(grep -l '^200 - 1' "$WORK"/lp.* | wc -l)
check "100 long-polls answered at their deadline ($lp_ok/100)" test "$lp_ok" = 100
hwm=$(awk '/VmHWM/ {print int($2 / 1024)}' /proc/"$RELAY_PID"/status)
echo "        relay peak RSS: ${hwm} MiB (cache 32 MiB + stream budget 64 MiB; 16 x 48 MiB downloads = 768 MiB)"
check "peak RSS ${hwm} MiB < 320 MiB" test "$hwm" -lt 320
check "relay still healthy" curl -sf --cacert "$RELAY_CA" "$RELAY_URL/-/health"
finish
