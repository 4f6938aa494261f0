#!/usr/bin/env bash
# Slow is not hostile: grpo-relay times a request's head by --header-timeout
# and its body by --min-body-rate over --body-window, and pail's S3 client sizes
# its parts from the throughput it sees. At 400 KB/s grpo-ctl put of 16 MiB once
# failed 4 times in 121 s (the 30 s limit covered the whole request). Scaled
# down here through a loopback proxy at 800 KB/s (tests/chaos/faultproxy.py)
# with --header-timeout 1: a 2 MiB PUT takes ~2.6 s and is stored; a 4 MiB
# multipart put with 1 MiB parts at most (PAIL_S3_PART_BYTES) and a 0.5 s part
# target (PAIL_S3_PART_SECONDS) sends smaller parts once it has seen the rate.
# (A client that stalls is cut: tests/check_relay_body.c.)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"
start_relay --header-timeout 1 --min-body-rate 65536 --body-window 1 || exit 1
python3 -c "
import sys, time
sys.path.insert(0, '$ROOT/tests/chaos')
from faultproxy import ProxyHost
p = ProxyHost().proxy($RELAY_PORT, 'slow')
p.set('bandwidth', 800000)
print(p.port, flush=True)
time.sleep(300)
" >"$WORK/proxy.port" &
PIDS+=($!)
for i in $(seq 1 50); do [ -s "$WORK/proxy.port" ] && break; sleep 0.1; done
SLOW="https://127.0.0.1:$(cat "$WORK/proxy.port")"
export AWS_ACCESS_KEY_ID=$TR_AK AWS_SECRET_ACCESS_KEY=$TR_SK AWS_REGION=us-east-1
CTL=("$BIN/grpo-ctl" put --endpoint "$SLOW" --ca-bundle "$RELAY_CA" --max-outage 10)
R=$WORK/root/runs/r1/trainer
head -c $((2 << 20)) /dev/urandom >"$WORK/one.bin"
t0=$(date +%s.%N)
"${CTL[@]}" s3://pail/runs/r1/trainer/state-v00000001.h5 "$WORK/one.bin" 2>"$WORK/one.err"
dt=$(echo "$(date +%s.%N) - $t0" | bc)
echo "        2 MiB PUT at 800 KB/s: ${dt} s"
check "a 2 MiB PUT slower than --header-timeout is stored" cmp "$WORK/one.bin" "$R/state-v00000001.h5"
check "... in one attempt, past --header-timeout (${dt} s > 1.5 s)" bash -c "[ \$(echo '$dt > 1.5' | bc) = 1 ] && ! grep -q retry '$WORK/one.err'"
head -c $((4 << 20)) /dev/urandom >"$WORK/two.bin"
PAIL_S3_PART_BYTES=1048576 PAIL_S3_PART_SECONDS=0.5 PAIL_LOG=debug \
  "${CTL[@]}" s3://pail/runs/r1/trainer/state-v00000002.h5 "$WORK/two.bin" 2>"$WORK/two.err"
check "a 4 MiB multipart put at 800 KB/s is stored" cmp "$WORK/two.bin" "$R/state-v00000002.h5"
parts=$(grep -o '[0-9]* parts of [0-9]* to [0-9]* bytes ([^)]*)' "$WORK/two.err")
echo "        $parts"
read -r n _ _ lo _ hi _ <<<"$parts"
check "its parts follow the observed rate: ${lo:-?} to ${hi:-?} bytes, not all 1 MiB" \
  test "${hi:-0}" = 1048576 -a "${lo:-1048576}" -lt 700000 -a "${n:-0}" -gt 4
finish
