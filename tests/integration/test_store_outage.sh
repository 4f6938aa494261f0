#!/usr/bin/env bash
# Outages of the bucket or relay cost time, not the run: --max-outage on every
# tool (validated), a grpo-ctl upload that waits out a relay that is down, one
# that gives up past its budget with a message saying so, a put into a file://
# bucket on a full disk (a 2 MiB tmpfs, as root) that waits for space, and a trainer and a
# rollout worker that finish while the relay between them is killed (SIGKILL:
# connections reset mid-request) and restarted on the same port, again and again.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"

echo "--max-outage is a flag of every tool, and a positive number"
for t in grpo-train grpo-rollout grpo-ctl grpo-relay; do
  sub=(); [ "$t" = grpo-ctl ] && sub=(ls)
  check "$t --help lists --max-outage" bash -c "'$BIN/$t' ${sub[*]} --help | grep -q -- '--max-outage'"
  for v in 0 -5 abc; do
    expect_fail "$t --max-outage $v" 2 "--max-outage: '$v' is not a number in \[0.1, " "$BIN/$t" "${sub[@]}" --max-outage "$v"
  done
done
check "grpo-ctl doctor waits less by default (10 s)" bash -c "'$BIN/grpo-ctl' doctor --help | grep -q 'max-outage.*(default: 10)'"

start_relay || { bad "relay start"; finish; exit 1; }
PORT=$RELAY_PORT
G=(--endpoint "$RELAY_URL" --ca-bundle "$RELAY_CA")
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=$OP_AK AWS_SECRET_ACCESS_KEY=$OP_SK
head -c 300000 /dev/urandom >"$WORK/blob"

echo "grpo-ctl put while the relay is down: it waits (--max-outage 30), then lands"
kill -KILL "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null
PAIL_LOG=info "$BIN/grpo-ctl" put "${G[@]}" --max-outage 30 s3://pail/runs/r1/trainer/blob "$WORK/blob" >"$WORK/put.out" 2>"$WORK/put.err" &
PUT=$!
sleep 3
RELAY_REUSE_PORT=$PORT start_relay || { bad "relay restart"; finish; exit 1; }
check "the put waited out a 3 s outage" wait $PUT
check "...and its bytes landed" cmp "$WORK/blob" "$WORK/root/runs/r1/trainer/blob"
check "...after retries it logged" grep -q "PUT s3://pail/runs/r1/trainer/blob: .*retry" "$WORK/put.err"

echo "an outage longer than --max-outage: a clear error"
kill -KILL "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null
expect_fail "put gives up after --max-outage 1" 1 \
  "s3://pail/runs/r1/trainer/late: PUT at https://127.0.0.1:$PORT gave up after [0-9]+ attempts in [0-9.]+ s \(--max-outage 1 s\)" \
  "$BIN/grpo-ctl" put "${G[@]}" --max-outage 1 s3://pail/runs/r1/trainer/late "$WORK/blob"

echo "a full disk under a file:// bucket: the put waits for space (--max-outage), then lands"
if [ "$(id -u)" = 0 ] && mkdir -p "$WORK/full" && mount -t tmpfs -o size=2m tmpfs "$WORK/full" 2>/dev/null; then
  head -c 600000 /dev/urandom >"$WORK/blob600k"
  dd if=/dev/zero of="$WORK/full/.pail-filler" bs=64k count=100 2>/dev/null  # fills the 2 MiB
  "$BIN/grpo-ctl" put --versioned --max-outage 30 "file://$WORK/full/adapters/v00000001.h5" "$WORK/blob600k" \
    >"$WORK/full.out" 2>"$WORK/full.err" &
  FP=$!
  sleep 2
  rm -f "$WORK/full/.pail-filler"
  check "the put waited out a full disk" wait $FP
  check "...its bytes landed" cmp "$WORK/blob600k" "$WORK/full/adapters/v00000001.h5"
  check "...after one line saying it waits for space" grep -q \
    "adapters/v00000001.h5: No space left on device; retrying for up to 30 s (--max-outage)" "$WORK/full.err"
  check "...and no temp file is left" bash -c "! ls -a '$WORK/full/adapters' | grep -q pail-tmp"
  dd if=/dev/zero of="$WORK/full/.pail-filler" bs=64k count=100 2>/dev/null
  expect_fail_last "a disk still full after --max-outage 1: one line" 1 \
    "adapters/v00000002.h5: .*No space left on device \(gave up after [0-9.]+ s, --max-outage 1 s\)" \
    "$BIN/grpo-ctl" put --versioned --max-outage 1 "file://$WORK/full/adapters/v00000002.h5" "$WORK/blob600k"
  umount -l "$WORK/full"
else
  echo "  skip  a full disk: mounting a small tmpfs needs root (run as root to include it)"
fi

echo "a full multipart spool under the relay: a put in parts waits for space (--max-outage), then lands"
if [ "$(id -u)" = 0 ] && mkdir -p "$WORK/spool" && mount -t tmpfs -o size=1m tmpfs "$WORK/spool" 2>/dev/null; then
  MAIN_PID=$RELAY_PID MAIN_PORT=$PORT
  start_relay --spool "$WORK/spool" || { bad "relay with a spool"; finish; exit 1; }
  SP=(--endpoint "$RELAY_URL" --ca-bundle "$RELAY_CA")
  dd if=/dev/zero of="$WORK/spool/.filler" bs=64k count=16 2>/dev/null  # fills the 1 MiB
  PAIL_S3_PART_BYTES=65536 PAIL_LOG=info "$BIN/grpo-ctl" put "${SP[@]}" --max-outage 30 \
    s3://pail/runs/r9/trainer/blob "$WORK/blob" >"$WORK/spool.out" 2>"$WORK/spool.err" &
  SPUT=$!
  sleep 3
  rm -f "$WORK/spool/.filler"
  check "the put in 5 parts waited out a full spool" wait $SPUT
  check "...its bytes landed" cmp "$WORK/blob" "$WORK/root/runs/r9/trainer/blob"
  check "...after the relay said why (one line naming the spool)" grep -q "spool $WORK/spool/.*No space left on device" "$WORK/relay.log"
  check "...and the client retried" grep -q "retry" "$WORK/spool.err"
  check "...and the spool holds nothing afterwards" bash -c "[ -z \"\$(ls -A '$WORK/spool')\" ]"
  # The spool fills between the last part and the completion (boto3 as the client), leaving
  # room for the first two (small) parts but not the third: the join stops there with a 503
  # SlowDown (a full spool is for the client to retry, never a 500);
  # once there is room the same completion carries on from the third part and lands the bytes.
  cat >"$WORK/mp_full.py" <<'PY'
import os, subprocess, sys, boto3, botocore
url, ca, spool, blob = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=url, verify=ca, region_name="us-east-1",
                  config=botocore.config.Config(retries={"max_attempts": 1}))
data = open(blob, "rb").read()[:248 << 10]
key = "runs/r9/trainer/joined"
up = s3.create_multipart_upload(Bucket="pail", Key=key)["UploadId"]
parts, at = [], 0
for n, size in enumerate([16 << 10, 16 << 10, 200 << 10, 16 << 10], 1):  # the relay has no 5 MiB minimum
    e = s3.upload_part(Bucket="pail", Key=key, UploadId=up, PartNumber=n, Body=data[at:at + size])["ETag"]
    parts.append({"PartNumber": n, "ETag": e})
    at += size
hole, fill = os.path.join(spool, ".hole"), os.path.join(spool, ".filler")
subprocess.run(["dd", "if=/dev/zero", f"of={hole}", "bs=4k", "count=12"], capture_output=True)
subprocess.run(["dd", "if=/dev/zero", f"of={fill}", "bs=4k", "count=1000"], capture_output=True)
os.remove(hole)  # 48 KiB free: parts 1 and 2 join (each deleted once joined), part 3 does not fit
try:
    s3.complete_multipart_upload(Bucket="pail", Key=key, UploadId=up, MultipartUpload={"Parts": parts})
    print("completed on a full spool"); sys.exit(1)
except botocore.exceptions.ClientError as e:
    print("full:", e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])
upload_dir = [d for d in os.listdir(spool) if not d.startswith(".")][0]
print("spooled:", " ".join(sorted(os.listdir(os.path.join(spool, upload_dir)))))
os.remove(fill)
s3.complete_multipart_upload(Bucket="pail", Key=key, UploadId=up, MultipartUpload={"Parts": parts})
got = s3.get_object(Bucket="pail", Key=key)["Body"].read()
print("retried:", "same bytes" if got == data else "DIFFERENT bytes")
PY
  "$(venv)/bin/python" "$WORK/mp_full.py" "$RELAY_URL" "$RELAY_CA" "$WORK/spool" "$WORK/blob" >"$WORK/mp_full.out" 2>&1
  check "a completion on a full spool: 503 SlowDown, not 500" grep -q "^full: 503 SlowDown" "$WORK/mp_full.out"
  check "...parts 1 and 2 joined, 3 and 4 kept" grep -q "^spooled: object part-00003 part-00004$" "$WORK/mp_full.out"
  check "...completed again once there is room: the same bytes" grep -q "^retried: same bytes" "$WORK/mp_full.out"
  [ "$FAIL" = 0 ] || sed 's/^/        /' "$WORK/mp_full.out" | tail -5
  check "...and the spool holds nothing afterwards" bash -c "[ -z \"\$(ls -A '$WORK/spool')\" ]"
  kill "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null
  umount -l "$WORK/spool"
  RELAY_PID=$MAIN_PID RELAY_URL="https://127.0.0.1:$MAIN_PORT" PORT=$MAIN_PORT
else
  echo "  skip  a full relay spool: mounting a small tmpfs needs root (run as root to include it)"
fi

echo "SIGTERM during an outage: the worker stops within 5 s, the trainer within 20 s, not at --max-outage"
mkdir -p "$WORK/stop"
"$BIN/grpo-ctl" init-model --out "$WORK/stop/m" --shape tiny --vocab 300 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || bad "init-model for the stop test"
DEAD=$(free_port)
"$BIN/grpo-rollout" --model "$WORK/stop/m" --run s3://pail/x --endpoint "http://127.0.0.1:$DEAD" --max-outage 600 \
  --dataset "$ROOT/data/multiplication/train.jsonl" >"$WORK/stop/w.log" 2>&1 &
SW=$!
"$BIN/grpo-train" --model "$WORK/stop/m" --run s3://pail/x --endpoint "http://127.0.0.1:$DEAD" --max-outage 600 \
  >"$WORK/stop/t.log" 2>&1 &
ST=$!
sleep 3
kill -TERM $SW $ST
t0=$(date +%s)
wait $SW; wrc=$?; tw=$(( $(date +%s) - t0 ))
wait $ST; trc=$?; tt=$(( $(date +%s) - t0 ))
echo "        worker exit $wrc after ${tw} s, trainer exit $trc after ${tt} s"
check "the worker stopped within 15 s of SIGTERM (its --max-outage is 600 s)" test $wrc = 1 -a $tw -le 15
check "...saying why in one line" grep -q "^grpo-rollout: .*run.json: GET at .*: not retried further, the process is stopping (a stop signal)" "$WORK/stop/w.log"
check "the trainer stopped within 40 s (20 s of grace to publish)" test $trc = 1 -a $tt -le 40
check "...saying why in one line" grep -q "^grpo-train: .*not retried further, the process is stopping (a stop signal)" "$WORK/stop/t.log"

echo "trainer and worker through a relay killed and restarted while they run"
RELAY_REUSE_PORT=$PORT start_relay || { bad "relay restart"; finish; exit 1; }
M="$WORK/model" RUN=s3://pail/runs/r1
# Wider than tiny, and rank 64: adapter and state uploads of a few MB, long
# enough that a kill often lands in the middle of one.
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --hidden 256 --layers 4 --vocab 257 \
  --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -64 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
export OMP_NUM_THREADS=1
AWS_ACCESS_KEY_ID=$TR_AK AWS_SECRET_ACCESS_KEY=$TR_SK "$BIN/grpo-train" --model "$M" --run "$RUN" "${G[@]}" --max-outage 60 \
  --steps 12 --groups-per-step 2 --group-size 4 --lora-rank 64 --lr 5e-3 --metrics "" --rollout-timeout 120 \
  >"$WORK/train.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
AWS_ACCESS_KEY_ID=$RO_AK AWS_SECRET_ACCESS_KEY=$RO_SK "$BIN/grpo-rollout" --model "$M" --run "$RUN" "${G[@]}" --max-outage 60 \
  --dataset "$WORK/train.jsonl" --group-size 4 --groups-per-shard 2 --max-new-tokens 6 --batch-size 8 \
  --worker-id w1 --reward format --format-regex '[0-9]' --reward length:0.5 --length-target 3 \
  >"$WORK/roll.log" 2>&1 &
ROLL=$!; PIDS+=($ROLL)
restarts=0
while kill -0 "$TRAIN" 2>/dev/null && [ "$restarts" -lt 20 ]; do
  sleep "0.$(( RANDOM % 4 + 1 ))"
  kill -KILL "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null
  sleep 0.3
  RELAY_REUSE_PORT=$PORT start_relay >/dev/null || { bad "relay restart $restarts"; kill "$TRAIN" "$ROLL"; break; }
  restarts=$((restarts + 1))
done
echo "        relay restarted $restarts times"
check "the relay was restarted under the run" test "$restarts" -ge 3
check "the trainer finished its 12 steps" wait $TRAIN
check "...and published v12" test -f "$WORK/root/runs/r1/adapters/v00000012.h5"
kill -TERM "$ROLL" 2>/dev/null; wait "$ROLL"; rc=$?
check "the worker ended cleanly (exit $rc)" test "$rc" = 0
check "no store request failed for good" bash -c "! grep -E 'gave up after|failed: |rewind' '$WORK/train.log' '$WORK/roll.log'"
[ "$FAIL" = 0 ] || { echo "        trainer log:"; tail -5 "$WORK/train.log" | sed 's/^/        /'; }
finish
