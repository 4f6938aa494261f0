#!/usr/bin/env bash
# Eval figures that say what they are, on a tiny random model: accuracy only
# where the reward defines it (exact_answer == 1, or --success-threshold for a
# partial-credit cmd reward; otherwise the JSON has none and the line says
# why), the mean reward and distinct completions always; --dump writes one
# JSON line per scored completion, the eval worker its completions to
# eval/samples/v%08d.jsonl through the relay's rollout key; --adapter takes a
# store URL (file://, and s3:// through the https relay) like export does.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"
PY=$(venv)/bin/python
M="$WORK/model"
export OMP_NUM_THREADS=1
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -8 "$ROOT/data/addition/train.jsonl" >"$WORK/ev.jsonl"
# Partial credit: 1 for a completion with a digit, else 0.25.
cat >"$WORK/partial.py" <<'EOF'
import json, re, sys
for line in sys.stdin:
    print(1.0 if re.search("[0-9]", json.loads(line)["completion"]) else 0.25, flush=True)
EOF
PARTIAL=(--reward cmd --reward-cmd "python3 $WORK/partial.py")
EV=("$BIN/grpo-ctl" eval --model "$M" --dataset "$WORK/ev.jsonl" --max-new-tokens 4 --batch-size 8)

cat >"$WORK/broken.py" <<'EOF'
import sys
sys.stderr.write("broken.py: no model server at localhost:1\n")
sys.exit(3)
EOF
"${EV[@]}" --reward cmd --reward-cmd "python3 $WORK/broken.py" --out "$WORK/broken.json" >/dev/null 2>"$WORK/broken.err"
check "every reward failing: exit 1, no figure written (not a reward of 0)" \
  bash -c "test $? -eq 1 && test ! -e '$WORK/broken.json'"
check "...the error says so with the program's stderr" \
  bash -c "grep -q 'every reward of the first batch failed' '$WORK/broken.err' && grep -q 'no model server' '$WORK/broken.err'"

echo "accuracy where the reward defines it"
"${EV[@]}" "${PARTIAL[@]}" --samples 2 --temperature 1 --dump "$WORK/p.jsonl" >"$WORK/p.json" 2>"$WORK/p.err"
check "a partial-credit reward: exit 0" test $? -eq 0
check "...no accuracy in the JSON, the rule null and why; the mean reward, distinct completions of the dump" "$PY" -c '
import json, sys
e = json.load(open(sys.argv[1])); d = [json.loads(l) for l in open(sys.argv[2])]
assert "accuracy" not in e and e["accuracy_rule"] is None and "give --success-threshold" in e["accuracy_note"], e
assert "(cmd)" in e["accuracy_note"] and e["completions"] == len(d) == 16, e
assert abs(e["reward_mean"] - sum(x["reward"] for x in d) / 16) < 1e-6, e
assert e["distinct_completions"] == len({x["completion"] for x in d}), e' "$WORK/p.json" "$WORK/p.jsonl"
check "...and the line says accuracy is not defined, and why" \
  grep -Eq 'accuracy: not defined for a partial-credit reward \(cmd\); give --success-threshold; distinct completions [0-9]+ of 16' "$WORK/p.err"
check "--dump: one line per scored completion (row, sample), the decoded completion the reward saw" "$PY" -c '
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[2])]
d = [json.loads(l) for l in open(sys.argv[1])]
assert sorted((x["row"], x["sample"]) for x in d) == [(r, s) for r in range(8) for s in range(2)], d
for x in d:
    assert x["prompt"] == rows[x["row"]]["prompt"] and x["valid"] and "correct" not in x, x
    assert 1 <= x["completion_tokens"] <= 4 and len(x["completion"].encode()) <= 4 * 4, x
    want = 1.0 if re.search("[0-9]", x["completion"]) else 0.25
    assert x["reward"] == want and x["components"] == {"cmd": want}, x' "$WORK/p.jsonl" "$WORK/ev.jsonl"

"${EV[@]}" "${PARTIAL[@]}" --samples 2 --temperature 1 --success-threshold 1 --dump "$WORK/t.jsonl" \
  >"$WORK/t.json" 2>"$WORK/t.err"
check "--success-threshold 1: pass@2 accuracy is the share of rows with a sample rewarded >= 1" "$PY" -c '
import json, sys
e = json.load(open(sys.argv[1])); d = [json.loads(l) for l in open(sys.argv[2])]
solved = {x["row"] for x in d if x["reward"] >= 1}
assert e["accuracy_rule"] == "reward >= 1" and e["solved_prompts"] == len(solved), e
assert abs(e["accuracy"] - len(solved) / 8) < 1e-9, (e, solved)
assert all(x["correct"] == (x["reward"] >= 1) for x in d), d' "$WORK/t.json" "$WORK/t.jsonl"
check "...the line names the rule" grep -Eq "accuracy [0-9.]+% \([0-9] of 8 prompts; reward >= 1 in one of its samples\)" \
  "$WORK/t.err"

"${EV[@]}" --dump "$WORK/x.jsonl" >"$WORK/x.json" 2>"$WORK/x.err"
check "exact_answer (binary): accuracy with the rule exact_answer == 1, each line's correct its component" "$PY" -c '
import json, sys
e = json.load(open(sys.argv[1])); d = [json.loads(l) for l in open(sys.argv[2])]
assert e["accuracy_rule"] == "exact_answer == 1" and len(d) == 8, e
assert all(x["correct"] == (x["components"]["exact_answer"] == 1) for x in d), d
assert e["accuracy"] == sum(x["correct"] for x in d) / 8, e' "$WORK/x.json" "$WORK/x.jsonl"
check "...and the line names it and the distinct completions" \
  grep -Eq 'accuracy [0-9.]+% \([0-9] of 8 prompts; exact_answer == 1\), reward [0-9.]+ \(exact_answer [0-9.]+\), distinct completions [0-9] of 8' \
  "$WORK/x.err"

echo "one reward vocabulary (the flags grpo-rollout has)"
"$PY" -c 'import json, sys
for l in open(sys.argv[1]): r = json.loads(l); r["solution"] = r.pop("answer"); print(json.dumps(r))' \
  "$WORK/ev.jsonl" >"$WORK/sol.jsonl"
"$BIN/grpo-ctl" eval --model "$M" --dataset "$WORK/sol.jsonl" --max-new-tokens 4 --batch-size 8 --answer-field solution \
  --dump "$WORK/sol.d.jsonl" >"$WORK/sol.json" 2>"$WORK/sol.err"
check "--answer-field solution: the same figures as with \"answer\"" "$PY" -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert b["accuracy_rule"] == "exact_answer == 1" and a["accuracy"] == b["accuracy"] and a["reward_mean"] == b["reward_mean"], (a, b)' \
  "$WORK/x.json" "$WORK/sol.json"
"${EV[@]}" --reward-cmd "python3 $WORK/partial.py" --dump "$WORK/only.jsonl" >/dev/null 2>"$WORK/only.err"
check "--reward-cmd without --reward selects the cmd reward (not exact_answer)" "$PY" -c '
import json, sys
d = [json.loads(l) for l in open(sys.argv[1])]
assert len(d) == 8 and all(list(x["components"]) == ["cmd"] for x in d), d' "$WORK/only.jsonl"
expect_fail_last "--reward format with a --reward-cmd no cmd reward takes: refused, naming it" 1 \
  "--reward-cmd 'python3 .*partial.py' is given but --reward lists no cmd reward \(add --reward cmd\)" \
  "${EV[@]}" --reward format --format-regex x --reward-cmd "python3 $WORK/partial.py"
cat >"$WORK/quarter.py" <<'EOF2'
import sys
for line in sys.stdin: print(0.25, flush=True)
EOF2
"${EV[@]}" --reward cmd:digit --reward cmd:quarter:2 --reward-cmd "digit=python3 $WORK/partial.py" \
  --reward-cmd "quarter=python3 $WORK/quarter.py" --dump "$WORK/two.jsonl" >"$WORK/two.json" 2>"$WORK/two.err"
check "two named cmd rewards: a component each (cmd:digit, cmd:quarter), weighted" "$PY" -c '
import json, re, sys
d = [json.loads(l) for l in open(sys.argv[1])]
assert len(d) == 8, d
for x in d:
    want = 1.0 if re.search("[0-9]", x["completion"]) else 0.25
    assert x["components"] == {"cmd:digit": want, "cmd:quarter": 0.25}, x
    assert abs(x["reward"] - (want + 0.5)) < 1e-6, x' "$WORK/two.jsonl"
expect_fail "grpo-rollout --env with --reward-cmd: refused (the environment gives the rewards)" 2 \
  "--env: the environment program gives the rewards \(no --reward-cmd\)" \
  "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/nothere" --dataset "$WORK/ev.jsonl" --env "python3 x.py" \
  --reward-cmd "python3 $WORK/partial.py"

echo "bad input"
expect_fail_last "--dump into a missing folder: exit 1 naming it, the result still written" 1 \
  "--dump $WORK/no/such/d.jsonl: cannot write" "${EV[@]}" --dump "$WORK/no/such/d.jsonl" --out "$WORK/kept.json"
check "...--out holds the result" grep -q '"accuracy_rule": "exact_answer == 1"' "$WORK/kept.json"
expect_fail_last "--adapter naming a missing store object: exit 1 naming it" 1 "--adapter: file://$WORK/none/adapters/v00000000.h5: not found" \
  "${EV[@]}" --adapter "file://$WORK/none/adapters/v00000000.h5"
expect_fail "--success-threshold that is not a number: exit 2" 2 "success-threshold" "${EV[@]}" --success-threshold half
expect_fail "grpo-rollout --success-threshold without --eval: exit 2" 2 "--success-threshold is for --eval" \
  "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/nothere" --dataset "$WORK/ev.jsonl" --success-threshold 1
check "...and created nothing" test ! -e "$WORK/nothere"

echo "the eval worker through the relay, and --adapter URL"
start_relay || { bad "relay"; finish; exit 1; }
export AWS_CA_BUNDLE=$RELAY_CA AWS_REGION=us-east-1
RUN=(--run s3://pail/runs/r1 --endpoint "$RELAY_URL")
AWS_ACCESS_KEY_ID=$TR_AK AWS_SECRET_ACCESS_KEY=$TR_SK "$BIN/grpo-train" --model "$M" --group-size 2 "${RUN[@]}" \
  --steps 0 --lora-rank 4 --metrics "" >"$WORK/train.log" 2>&1 || bad "trainer (v0)"
SRC="$WORK/root/runs/r1"
AWS_ACCESS_KEY_ID=$RO_AK AWS_SECRET_ACCESS_KEY=$RO_SK timeout 120 "$BIN/grpo-rollout" --eval --model "$M" "${RUN[@]}" \
  --eval-dataset "$WORK/ev.jsonl" --worker-id ev "${PARTIAL[@]}" --max-new-tokens 4 --batch-size 8 --max-shards 1 \
  >"$WORK/worker.log" 2>&1
check "the eval worker (rollout key) exits 0" test $? -eq 0
check "...writes eval/v00000000.json without accuracy, and eval/samples/v00000000.jsonl, a line per completion" "$PY" -c '
import json, sys
e = json.load(open(sys.argv[1] + "/eval/v00000000.json"))
d = [json.loads(l) for l in open(sys.argv[1] + "/eval/samples/v00000000.jsonl")]
assert e["version"] == 0 and "accuracy" not in e and e["completions"] == len(d) == 8, e
assert sorted(x["row"] for x in d) == list(range(8)), d' "$SRC"
check "...its log line says why there is no accuracy" grep -q 'eval v00000000: reward .*accuracy: not defined' \
  "$WORK/worker.log"
"$BIN/grpo-ctl" status "file://$SRC" >"$WORK/status.out" 2>&1
check "grpo-ctl status shows its mean reward and why there is no accuracy (not 'accuracy 0.0%')" \
  bash -c "grep -Eq '^eval +v0: reward [0-9.]+ +\(v0: reward' '$WORK/status.out' && grep -q 'accuracy: not defined for a partial-credit reward' '$WORK/status.out' && ! grep -q 'accuracy 0.0%' '$WORK/status.out' && grep -Eq 'distinct completions: [0-9]+ of 8' '$WORK/status.out'"
AWS_ACCESS_KEY_ID=$RD_AK AWS_SECRET_ACCESS_KEY=$RD_SK "${EV[@]}" "${PARTIAL[@]}" \
  --adapter s3://pail/runs/r1/adapters/v00000000.h5 --endpoint "$RELAY_URL" --dump "$WORK/s3.jsonl" \
  >"$WORK/s3.json" 2>"$WORK/s3.err"
check "grpo-ctl eval --adapter s3://.../adapters/v00000000.h5 through the relay (reader key): adapter v0" \
  grep -q '"version": 0' "$WORK/s3.json"
check "...its completions are the eval worker's, line for line" cmp "$WORK/s3.jsonl" "$SRC/eval/samples/v00000000.jsonl"
"${EV[@]}" "${PARTIAL[@]}" --adapter "file://$SRC/adapters/v00000000.h5" --dump "$WORK/f.jsonl" >"$WORK/f.json" 2>"$WORK/f.err"
check "--adapter file://.../adapters/v00000000.h5: adapter v0, the same completions" \
  bash -c "grep -q '\"version\": 0' '$WORK/f.json' && cmp '$WORK/f.jsonl' '$WORK/s3.jsonl'"
finish
