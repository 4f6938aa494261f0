#!/usr/bin/env bash
# A trainer honours control/stop wherever it waits (issue 43: a resumed
# --device sim trainer ignored it for 200 s). Found: the trainer looked for
# control/stop only between steps and while waiting for shards, so a store
# request in retries (a full disk, a relay answering 5xx) held it until
# --max-outage. Here a resumed sim trainer with 2 shards pending trains a step
# whose publish finds the disk full (a 2 MiB tmpfs, as root) while control/stop,
# a few bytes, still fits: it stops within its 20 s grace, not at --max-outage
# (600 s), publishing nothing half-written.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
if [ "$(id -u)" != 0 ] || ! mkdir -p "$WORK/full" || ! mount -t tmpfs -o size=2m tmpfs "$WORK/full" 2>/dev/null; then
  echo "  skip  a full disk: mounting a small tmpfs needs root (run as root to include it)"
  finish; exit
fi
trap 'umount -l "$WORK/full" 2>/dev/null; cleanup' EXIT
M="$WORK/model" R="file://$WORK/full/run" D="$WORK/full/run"
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -64 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
COMMON=(--model "$M" --group-size 4)
T=(--run "$R" --groups-per-step 2 --lr 5e-3 --lora-rank 4 --device sim --metrics "" --max-outage 600)
check "v0 published" "$BIN/grpo-train" "${COMMON[@]}" "${T[@]}" --steps 0
check "2 shards of one group" timeout 120 "$BIN/grpo-rollout" "${COMMON[@]}" --run "$R" --dataset "$WORK/train.jsonl" \
  --groups-per-shard 1 --max-new-tokens 6 --batch-size 8 --seed 7 --reward format --format-regex '[0-9]' \
  --worker-id wa --max-shards 2 --max-ahead 0
dd if=/dev/zero of="$WORK/full/.filler" bs=4k 2>/dev/null  # full, then 16 KiB freed: room for control/stop only
truncate -s -16k "$WORK/full/.filler"
"$BIN/grpo-train" "${COMMON[@]}" "${T[@]}" --steps 5 >"$WORK/t.log" 2>&1 &
TR=$!; PIDS+=($TR)
for i in $(seq 1 600); do grep -q "No space left on device; retrying" "$WORK/t.log" && break; sleep 0.1; done
check "the resumed trainer's publish waits on the full disk" grep -q "state-v00000001.h5: No space left on device; retrying" "$WORK/t.log"
check "grpo-ctl stop lands (a few bytes)" "$BIN/grpo-ctl" stop "$R" --reason "stop test"
t0=$SECONDS
for i in $(seq 1 450); do kill -0 $TR 2>/dev/null || break; sleep 0.1; done
if kill -0 $TR 2>/dev/null; then
  bad "the trainer is still retrying 45 s after control/stop (its --max-outage is 600 s)"
  kill -KILL $TR
else
  ok "the trainer stopped $((SECONDS - t0)) s after control/stop (within 45 s, not at --max-outage 600 s)"
fi
wait $TR; rc=$?
check "...exit 1: the step it trained could not be published" test $rc = 1
check "...having found control/stop" grep -q "control/stop found: stopping" "$WORK/t.log"
check "...and said why the publish ended" grep -q "^grpo-train: trainer/state-v00000001.h5: .*not retried further .*the process is stopping" "$WORK/t.log"
check "nothing half-written: no state or adapter v1" bash -c "! ls '$D'/trainer/state-v00000001.h5 '$D'/adapters/v00000001.h5 2>/dev/null"
finish
