#!/usr/bin/env bash
# A wrong setup is refused at start, in one line, before the memory plan and
# the weights (no "memory plan" line in the log): a dataset whose rows lack the
# reward's answer field (grpo-rollout, its --eval worker, grpo-ctl eval), token
# limits past the model's positions (--max-prompt-tokens auto fits them: longer
# rows are skipped and counted), a reward program or script that does not
# exist, a run whose trainer expects another group size. A reward program that
# fails on every item stops the worker after its first batch with the
# program's stderr, and writes no shard. A run URL that is not one is refused
# before the plan by grpo-train and grpo-rollout. tiny random model, file:// run.
source "$(dirname "$0")/lib.sh"
M="$WORK/model"
CTL="$BIN/grpo-ctl"
# 256 positions: the token limits are checked against this.
"$CTL" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 \
  --max-positions 256 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
export OMP_NUM_THREADS=1
RUN="file://$WORK/run"
"$BIN/grpo-train" --model "$M" --group-size 4 --run "$RUN" --steps 0 --lora-rank 4 --metrics "" \
  >"$WORK/train.log" 2>&1 || bad "trainer publishing v0"
ROLL=("$BIN/grpo-rollout" --model "$M" --run "$RUN" --group-size 4 --max-new-tokens 4 --batch-size 8 --max-ahead 0
      --max-prompt-tokens 64 --groups-per-shard 2 --max-shards 1 --wait-timeout 20)
# refused: expect_fail_last, its stderr kept for no_plan (check overwrites last.err)
refused() { expect_fail_last "$@"; cp "$WORK/last.err" "$WORK/refused.err"; }
# no_plan: the last refused run stopped before the memory plan (and so before the weights)
no_plan() { test -s "$WORK/refused.err" && ! grep -q "memory plan" "$WORK/refused.err"; }

# 6 rows; lines 2 and 5 lack "answer" (line 5 has it as null)
{ echo '{"prompt": "1+1=", "answer": "2"}'
  echo '{"prompt": "1+2="}'
  echo '{"prompt": "1+3=", "answer": 4}'
  echo '{"prompt": "1+4=", "answer": "5"}'
  echo '{"prompt": "1+5=", "answer": null}'
  echo '{"prompt": "1+6=", "answer": "7"}'; } >"$WORK/noans.jsonl"
WANT='noans.jsonl: 2 of 6 rows lack "answer" as a string or a number \(needed by --reward exact_answer\): lines 2, 5$'

echo "a dataset without the reward's field"
refused "grpo-rollout: refused at start naming the lines" 1 "$WANT" \
  "${ROLL[@]}" --dataset "$WORK/noans.jsonl" --reward exact_answer --worker-id w1
check "...before the memory plan and the weights" no_plan
check "...and no shard or heartbeat written" test ! -e "$WORK/run/workers/w1.json" -a ! -e "$WORK/run/rollouts"
refused "grpo-rollout --eval: the same" 1 "$WANT" \
  "${ROLL[@]}" --eval --eval-dataset "$WORK/noans.jsonl" --reward exact_answer --worker-id ev
check "...before the memory plan" no_plan
refused "grpo-ctl eval: exit 1, not accuracy 0" 1 "$WANT" \
  "$CTL" eval --model "$M" --dataset "$WORK/noans.jsonl" --reward exact_answer --max-new-tokens 4
check "...before the memory plan" no_plan
refused "--answer-field names the field looked for" 1 'lack "solution" .*lines 1, 2, 3, 4, 5, 6$' \
  "${ROLL[@]}" --dataset "$WORK/noans.jsonl" --reward exact_answer --answer-field solution
check "a reward that reads no field (format): the same rows are fine" \
  "${ROLL[@]}" --dataset "$WORK/noans.jsonl" --reward format --format-regex '[0-9]' --worker-id wfmt

echo "token limits and the model's 256 positions"
head -8 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
RW=(--dataset "$WORK/train.jsonl" --reward exact_answer)
refused "--max-prompt-tokens 300: refused" 1 \
  "^grpo-rollout: --max-prompt-tokens 300: no room for a completion in the model's 256 positions \(max_position_embeddings" \
  "${ROLL[@]}" "${RW[@]}" --max-prompt-tokens 300
check "...before the memory plan" no_plan
refused "--max-new-tokens 256: refused" 1 "--max-new-tokens 256: no room for a prompt in the model's 256 positions" \
  "${ROLL[@]}" "${RW[@]}" --max-new-tokens 256
refused "--max-prompt-tokens 200 + --max-new-tokens 100: refused, with a value that fits" 1 \
  "--max-prompt-tokens 200 \+ --max-new-tokens 100 = 300 tokens is past the model's 256 positions .*--max-prompt-tokens 156\)$" \
  "${ROLL[@]}" "${RW[@]}" --max-prompt-tokens 200 --max-new-tokens 100
refused "grpo-ctl eval: the same" 1 "--max-prompt-tokens 200 \+ --max-new-tokens 100 = 300 tokens is past" \
  "$CTL" eval --model "$M" --dataset "$WORK/train.jsonl" --reward exact_answer --max-prompt-tokens 200 --max-new-tokens 100
check "...before the memory plan" no_plan

# --max-prompt-tokens auto (the default): the positions left after --max-new-tokens 200 are 56;
# a longer row (line 3, 100 tokens) is skipped and counted, the others generate.
{ head -2 "$WORK/train.jsonl"; printf '{"prompt": "%s=", "answer": "0"}\n' "$(printf '0+%.0s' $(seq 1 49))0"
  sed -n 3,6p "$WORK/train.jsonl"; } >"$WORK/long.jsonl"
AUTO=("$BIN/grpo-rollout" --model "$M" --run "$RUN" --group-size 4 --max-new-tokens 200 --batch-size 8 --max-ahead 0
      --groups-per-shard 4 --max-shards 1 --num-workers 1 --dataset "$WORK/long.jsonl" --reward format --format-regex x)
"${AUTO[@]}" --worker-id wa >"$WORK/auto.log" 2>&1
check "auto: the worker runs (exit 0), --max-prompt-tokens 56, said once" test $? -eq 0 \
  -a "$(grep -c -- "--max-prompt-tokens auto: 56 (the model's 256 positions .* less --max-new-tokens 200" "$WORK/auto.log")" -eq 1
check "...the row too long for the positions is skipped, named and counted" bash -c "
  grep -q 'long.jsonl:3: prompt has 100 tokens (1..56 accepted: --max-prompt-tokens)' '$WORK/auto.log' &&
  grep -q '\"skipped_prompts\": 1' '$WORK/run/workers/wa.json' && ls '$WORK'/run/rollouts/v00000000/wa-*.h5"
refused "an explicit --max-prompt-tokens 64 with it: refused" 1 \
  "--max-prompt-tokens 64 \+ --max-new-tokens 200 = 264 tokens is past the model's 256 positions .*--max-prompt-tokens 56\)$" \
  "${AUTO[@]}" --max-prompt-tokens 64

echo "reward programs"
refused "a missing script: refused at start" 1 \
  "--reward-cmd 'python3 $WORK/nope.py': the script '$WORK/nope.py' does not exist" \
  "${ROLL[@]}" "${RW[@]}" --reward cmd --reward-cmd "python3 $WORK/nope.py"
check "...before the memory plan" no_plan
refused "a missing program: refused at start" 1 "the program '$WORK/nope' does not exist" \
  "${ROLL[@]}" "${RW[@]}" --reward cmd --reward-cmd "$WORK/nope --x"
printf 'import sys\nfor line in sys.stdin:\n    sys.stderr.write("rubric.txt: no such file\\n"); sys.exit(1)\n' >"$WORK/fail.py"
"${ROLL[@]}" "${RW[@]}" --reward cmd --reward-cmd "python3 $WORK/fail.py" --worker-id wf >"$WORK/fail.log" 2>&1
check "a program failing on every item: the worker stops (exit 1)" test $? -eq 1
check "...naming the first batch and the program's stderr" \
  grep -Eq "grpo-rollout: every reward of the first batch failed .*rubric.txt: no such file" "$WORK/fail.log"
check "...and writes no shard" test -z "$(ls "$WORK/run/rollouts/v00000000/" 2>/dev/null | grep wf-)"

echo "the run"
refused "a run whose trainer expects groups of 4: refused before the plan" 1 \
  "run.json: the trainer expects groups of 4, --group-size is 8" "${ROLL[@]}" "${RW[@]}" --group-size 8
check "...before the memory plan" no_plan
refused "grpo-train: a run URL that is not one, before the memory plan" 1 "ftp://x/y" \
  "$BIN/grpo-train" --model "$M" --run "ftp://x/y" --steps 0 --metrics ""
check "...before the memory plan" no_plan
refused "grpo-rollout: the same" 1 "ftp://x/y" "${ROLL[@]}" "${RW[@]}" --run "ftp://x/y"
check "...before the memory plan" no_plan
finish
