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
