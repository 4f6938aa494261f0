#!/usr/bin/env bash
# grpo-rollout --env with environment programs that misbehave
# (tests/integration/env_modes.py), on a file:// run with a tiny random model:
# each failure ends the affected episodes with a failed reward (reward_valid 0,
# said in the log), the program is restarted where it must be, and the worker
# goes on writing shards and exits 0 at --max-shards: a crash, an episode never
# answered (--env-timeout), a program that hangs, a line that is not JSON, an
# answer for an unknown episode (dropped, counted), two answers to one request,
# messages where a reward was due, a reward that is not a number, the program's
# own error; --max-turns (the last turn sent with "final": true), the episode
# token limit ("end" then the reward, finish length), a command not found (refused
# at start; through the shell, the first batch of failed episodes stops the worker),
# evaluation through the program (grpo-ctl eval --env, grpo-rollout --eval --env),
# and --env refused with --reward, without a chat template, or with episodes
# longer than the model's positions.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
cat >"$M/chat_template.jinja" <<'TPL'
{%- for m in messages -%}
{%- if m.role == 'user' -%}{{ 'Q:' + m.content + '\n' }}
{%- elif m.role == 'tool' -%}{{ 'R:' + m.content + '\n' }}
{%- elif m.role == 'assistant' -%}{{ 'A:' + m.content + eos_token }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ 'A:' }}{%- endif -%}
TPL
head -16 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
export OMP_NUM_THREADS=1
"$BIN/grpo-train" --model "$M" --group-size 2 --run "file://$WORK/run" --steps 0 --lora-rank 4 --metrics "" \
  >"$WORK/train.log" 2>&1 || bad "the trainer creating the run"
ENVPY="python3 $ROOT/tests/integration/env_modes.py"
# roll NAME MODE [flags]: 2 shards of 2 groups x 2 episodes with env_modes.py MODE
roll() {
  local name=$1 mode=$2; shift 2
  mkdir -p "$WORK/st-$name"
  timeout 120 "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/train.jsonl" \
    --worker-id "$name" --group-size 2 --groups-per-shard 2 --batch-size 4 --max-shards 2 --max-ahead 0 \
    --max-new-tokens 4 --max-turns 3 --max-episode-tokens 60 --env-timeout 2 \
    --env "$ENVPY $mode $WORK/st-$name" "$@" >"$WORK/$name.log" 2>&1
}
# shards NAME: per completion "valid turns finish" of the worker's shards, one line each
shards() {
  "$PY" - "$WORK/run/rollouts/v00000000" "$1" <<'PYEOF'
import glob, sys, h5py
for f in sorted(glob.glob(f"{sys.argv[1]}/{sys.argv[2]}-*.h5")):
    h = h5py.File(f, "r")
    for v, t, fin in zip(h["reward_valid"][:], h["turns"][:], h["finish_reason"][:]):
        print(int(v), int(t), int(fin))
PYEOF
}
count() { grep -Ec -- "$1" "$2"; }
valid() { shards "$1" | awk '$1 == 1' | wc -l; }

echo "a well-behaved program"
roll good log
check "the worker exits 0 and writes its 2 shards" test $? -eq 0 -a "$(ls "$WORK"/run/rollouts/v00000000/good-*.h5 | wc -l)" -eq 2
check "...every episode valid, 3 turns (--max-turns 3)" test "$(shards good | awk '$1 == 1 && $2 == 3' | wc -l)" -eq 8
check "...the last turn went with \"final\": true, the others false" "$PY" -c '
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["type"] == "step"]
assert len(steps) == 24 and all(s["final"] == (s["turn"] == 3) for s in steps), steps[:3]
assert all(set(s) >= {"id", "turn", "text", "tool_calls", "finish", "final"} for s in steps)' "$WORK/st-good/requests.jsonl"
check "...the starts carry the dataset row" "$PY" -c '
import json, sys
st = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["type"] == "start"]
assert len(st) == 8 and all("prompt" in s["row"] and "answer" in s["row"] for s in st)' "$WORK/st-good/requests.jsonl"
check "...a group's two openings are prefilled once (the second copied)" \
  test "$(grep -c '2 of 4 openings copied from their group' "$WORK/good.log")" -eq 2
check "...the components are the program's" "$PY" -c '
import glob, sys, h5py
h = h5py.File(sorted(glob.glob(sys.argv[1] + "/good-*.h5"))[0], "r")
names = [n.decode() for n in h["reward_components"].attrs["names"]]
assert names == ["digit", "turns"], names
assert (h["reward_components"][:, 1] == 3).all()' "$WORK/run/rollouts/v00000000"

echo "rows an environment program reads: any JSON object"
printf '{"question": "1+1", "answer": 2}\n{"question": "2+3", "answer": 5}\n' >"$WORK/questions.jsonl"
mkdir -p "$WORK/st-rows"
timeout 120 "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/questions.jsonl" \
  --worker-id rows --group-size 2 --groups-per-shard 2 --max-shards 1 --max-ahead 0 --max-new-tokens 4 \
  --max-turns 2 --max-episode-tokens 60 --env "$ENVPY log $WORK/st-rows" >"$WORK/rows.log" 2>&1
check "rows with neither prompt nor messages: episodes of them, the program gets each row" \
  test $? -eq 0 -a "$(valid rows)" -eq 4 -a "$(grep -c '"question"' "$WORK/st-rows/requests.jsonl")" -eq 4
expect_fail_last "...while single completions still need a prompt or messages" 1 'questions.jsonl:1: neither "prompt" nor "messages"' \
  "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/questions.jsonl" --group-size 2 \
  --max-shards 1 --reward format --format-regex x

echo "the episode token limit"
roll short ok --max-episode-tokens 16 --max-turns 8
check "the worker exits 0" test $? -eq 0
check "...every episode valid, ended by length before --max-turns" \
  test "$(shards short | awk '$1 == 1 && $2 < 8 && $3 == 1' | wc -l)" -eq 8

echo "a crash"
roll crash crash
check "the worker exits 0 and writes its 2 shards" test $? -eq 0 -a "$(ls "$WORK"/run/rollouts/v00000000/crash-*.h5 | wc -l)" -eq 2
check "...says how the program ended, with its stderr" grep -q "exited with status 3.*restarted; stderr: crashing on purpose" "$WORK/crash.log"
check "...the episodes open with it failed, the restarted program's did not" \
  test "$(valid crash)" -ge 4 -a "$(valid crash)" -lt 8
check "...the heartbeat counts the restart and the failed episodes" "$PY" -c '
import json, sys
e = json.load(open(sys.argv[1]))["environment"]
assert e["restarts"] == 1 and e["episodes"] == 8 and 0 < e["failed"] <= 4, e' "$WORK/run/workers/crash.json"

echo "an episode never answered"
roll slow slow
check "the worker exits 0" test $? -eq 0
check "...says which episode and the timeout" grep -q "episode slow/0.1: no answer within 2 s (--env-timeout" "$WORK/slow.log"
check "...only episode .1 of each batch failed" test "$(valid slow)" -eq 6

echo "a program that hangs"
roll hang hang
check "the worker exits 0" test $? -eq 0
check "...restarts it: it wrote nothing in the timeout" grep -q "wrote nothing in 2 s.*restarted" "$WORK/hang.log"
check "...the second shard's episodes are valid" test "$(valid hang)" -ge 4

echo "a line that is not JSON"
roll badline badline
check "the worker exits 0" test $? -eq 0
check "...quotes the line and restarts the program" grep -q "wrote a line that is not a JSON object ('hello, not json'" "$WORK/badline.log"
check "...the next shard is valid" test "$(valid badline)" -ge 4

echo "a line of invalid UTF-8"
# It froze workers/<id>.json for good ("heartbeat ... cannot build the JSON": last_error quoted the
# raw bytes) and copied them into the log. Outside text is made valid (U+FFFD) before either.
roll badutf8 badutf8
check "the worker exits 0" test $? -eq 0
check "...the heartbeat kept up: done, 2 shards, last_error with U+FFFD" "$PY" -c '
import json, sys
h = json.load(open(sys.argv[1]))
assert h["state"] != "starting" and h["shards_written"] == 2, h
assert h["environment"]["restarts"] == 1 and "\ufffd\ufffd caf\ufffd \ufffd end" in h["last_error"], h' "$WORK/run/workers/badutf8.json"
check "...the log is valid UTF-8 and quotes the line with U+FFFD" "$PY" -c '
import sys
t = open(sys.argv[1], "rb").read().decode("utf-8")
assert "not a JSON object (\x27\ufffd\ufffd caf\ufffd \ufffd end\x27" in t, t[-2000:]
assert "cannot build the JSON" not in t' "$WORK/badutf8.log"

echo "an answer for an episode that is not open"
roll unknown unknown
check "the worker exits 0, every episode valid" test $? -eq 0 -a "$(valid unknown)" -eq 8
check "...the stray answers are reported, dropped" grep -q "answer for episode 'nobody.7', which is not an open episode" "$WORK/unknown.log"

echo "answers that break the protocol"
roll twice twice
check "two answers to a start: the episode fails, the worker goes on" \
  test $? -eq 0 -a "$(valid twice)" -eq 0 -a "$(count 'an answer nothing asked for' "$WORK/twice.log")" -ge 1
roll nofinal nofinal
check "messages after the final turn: fails (a reward was expected)" \
  test $? -eq 0 -a "$(valid nofinal)" -eq 0 -a "$(count 'a reward was expected' "$WORK/nofinal.log")" -ge 1
roll badreward badreward
check "a reward that is not a number: fails, quoting the answer" \
  test $? -eq 0 -a "$(valid badreward)" -eq 0 -a "$(count '"reward" is not a finite number.*"high"' "$WORK/badreward.log")" -ge 1
roll manycomps manycomps
check "40 reward components: fails naming the limit of 32, none dropped silently" \
  test $? -eq 0 -a "$(valid manycomps)" -eq 0 -a "$(count 'at most 32 finite numbers' "$WORK/manycomps.log")" -ge 1
roll error error
check "the program's own error: fails with its message" \
  test $? -eq 0 -a "$(valid error)" -eq 0 -a "$(count 'the program says: the tool broke' "$WORK/error.log")" -ge 1

echo "a command that does not exist"
mkdir -p "$WORK/st-missing"
timeout 120 "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/train.jsonl" \
  --worker-id missing --group-size 2 --groups-per-shard 2 --max-shards 2 --max-ahead 0 --max-new-tokens 4 \
  --max-episode-tokens 60 --env "/nonexistent/env-program" >"$WORK/missing.log" 2>&1
check "a plain command line: refused at start (exit 1), before the memory plan" test $? -eq 1 \
  -a "$(count "the program '/nonexistent/env-program' does not exist" "$WORK/missing.log")" -eq 1 \
  -a "$(count "memory plan" "$WORK/missing.log")" -eq 0
# Shell syntax: not decided at start; every episode of the first batch fails.
timeout 120 "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/train.jsonl" \
  --worker-id missing --group-size 2 --groups-per-shard 2 --max-shards 2 --max-ahead 0 --max-new-tokens 4 \
  --max-episode-tokens 60 --env "cd / && /nonexistent/env-program" >"$WORK/missing.log" 2>&1
check "through the shell: the worker stops after its first batch (exit 1), writing no shard" test $? -eq 1 \
  -a -z "$(ls "$WORK"/run/rollouts/v00000000/ | grep missing-)"
check "...saying every episode failed and that the command was not found" \
  grep -Eq "every episode of the first batch failed and the environment never answered.*exited with status 127 \(command not found\)" "$WORK/missing.log"

echo "evaluation through the program"
head -6 "$WORK/train.jsonl" >"$WORK/eval.jsonl"
mkdir -p "$WORK/st-eval"
"$BIN/grpo-ctl" eval --model "$M" --dataset "$WORK/eval.jsonl" --env "$ENVPY ok $WORK/st-eval" --max-new-tokens 4 \
  --max-turns 2 --max-episode-tokens 60 --success-threshold 1 --out "$WORK/eval.json" >/dev/null 2>"$WORK/eval.log"
check "grpo-ctl eval --env: greedy episodes of every row, scored by the program" "$PY" -c '
import json, sys
e = json.load(open(sys.argv[1]))
assert e["prompts"] == 6 and e["samples"] == 1 and e["turns_mean"] == 2 and e["failed_episodes"] == 0, e
assert 0 <= e["accuracy"] <= 1 and e["components"]["turns"] == 2 and e["environment"].endswith("st-eval"), e' "$WORK/eval.json"
timeout 120 "$BIN/grpo-rollout" --eval --model "$M" --run "file://$WORK/run" --eval-dataset "$WORK/eval.jsonl" \
  --worker-id ev --env "$ENVPY ok $WORK/st-eval" --max-new-tokens 4 --max-turns 2 --max-episode-tokens 60 \
  --success-threshold 1 --max-shards 1 >"$WORK/ev.log" 2>&1
check "grpo-rollout --eval --env writes eval/v00000000.json, the same greedy result" "$PY" -c '
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["version"] == 0 and a["accuracy"] == b["accuracy"] and a["reward_mean"] == b["reward_mean"], (a, b)' \
  "$WORK/run/eval/v00000000.json" "$WORK/eval.json"

echo "refused at startup"
expect_fail_last "--env with --reward" 2 "the environment program gives the rewards" \
  "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/train.jsonl" --env true --reward format
cp -r "$M" "$WORK/plain"
rm "$WORK/plain/chat_template.jinja"
expect_fail_last "--env without a chat template" 1 "--env needs the model's chat template" \
  "$BIN/grpo-rollout" --model "$WORK/plain" --run "file://$WORK/run" --dataset "$WORK/train.jsonl" --env true \
  --group-size 2 --max-shards 1 --max-episode-tokens 60
expect_fail_last "--max-episode-tokens 2048 with a model of 2048 positions" 1 \
  "--max-episode-tokens 2048: no room for a prompt in the model's 2048 positions" \
  "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/train.jsonl" --env true --group-size 2 \
  --max-shards 1 --wait-timeout 20
finish
