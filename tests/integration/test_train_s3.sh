#!/usr/bin/env bash
# The loop over a real S3 server (moto, authentication on): a trainer and a
# rollout worker on s3://, then the shards they left replayed offline into a
# file:// run.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
start_moto 4 || { bad "moto server"; finish; exit 1; }
read -r KEY SECRET < <("$PY" "$ROOT/validation/s3/moto_setup.py" "$MOTO_URL" pail-test) || { bad "moto setup"; finish; exit 1; }
export AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_ENDPOINT_URL=$MOTO_URL AWS_REGION=us-east-1
export OMP_NUM_THREADS=1
M="$WORK/model" RUN=s3://pail-test/runs/r1
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -64 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
RW=(--reward format --format-regex '[0-9]' --reward length:0.5 --length-target 3)
"$BIN/grpo-rollout" --model "$M" --run "$RUN" --dataset "$WORK/train.jsonl" --group-size 4 --groups-per-shard 2 \
  --max-new-tokens 6 --batch-size 8 --max-shards 5 --worker-id s3w "${RW[@]}" >"$WORK/roll.log" 2>&1 &
PIDS+=($!)
check "trainer on s3:// (moto)" "$BIN/grpo-train" --model "$M" --run "$RUN" --steps 3 --groups-per-step 2 \
  --group-size 4 --lora-rank 4 --lr 5e-3 --metrics "" --rollout-timeout 120
"$BIN/grpo-ctl" ls --recursive --keys "$RUN/" >"$WORK/keys.txt"
check "adapters, states and metrics in the bucket" bash -c "grep -q adapters/v00000003.h5 '$WORK/keys.txt' && grep -q trainer/state-v00000003.h5 '$WORK/keys.txt' && grep -q metrics/step-00000003.json '$WORK/keys.txt'"
check "shards from the worker in the bucket" grep -q "rollouts/v0000000./s3w-" "$WORK/keys.txt"
check "aws cli sees the same adapter bytes" bash -c "aws --endpoint-url '$MOTO_URL' s3 cp --only-show-errors $RUN/adapters/v00000003.h5 '$WORK/a.aws' && '$BIN/grpo-ctl' get --verify $RUN/adapters/v00000003.h5 '$WORK/a.ctl' && cmp '$WORK/a.aws' '$WORK/a.ctl'"
wait "${PIDS[-1]}" 2>/dev/null
check "replay of the s3 run's shards into a file:// run" "$BIN/grpo-train" --model "$M" --run "file://$WORK/replay" \
  --replay "$RUN" --steps 2 --groups-per-step 2 --group-size 4 --lora-rank 4 --lr 5e-3 --metrics ""
check "...published its versions" test -f "$WORK/replay/adapters/v00000002.h5"
finish
