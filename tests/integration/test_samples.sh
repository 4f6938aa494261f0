#!/usr/bin/env bash
# grpo-ctl samples on a real tiny loop (one trainer, two rollout workers, a
# random model): every sample shown is checked against the shard itself read
# with h5py and decoded with the HF `tokenizers` library (prompt, completion,
# reward, components, advantage recomputed, version, worker); the selections
# (newest, --version, --step), --worst / --best order, --n, the human output
# against --json, special tokens shown, the same samples from an s3:// copy of
# the run (moto), and the errors.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
G="$BIN/grpo-ctl"
M="$WORK/model" D="$WORK/run" RUN="file://$WORK/run"
export OMP_NUM_THREADS=1
"$G" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 \
  >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -64 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
COMMON=(--model "$M" --group-size 4)
"$BIN/grpo-train" "${COMMON[@]}" --run "$RUN" --steps 3 --groups-per-step 2 --lr 5e-3 --lora-rank 4 \
  --metrics "" --rollout-timeout 120 >"$WORK/train.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
for w in wa wb; do
  "$BIN/grpo-rollout" "${COMMON[@]}" --run "$RUN" --dataset "$WORK/train.jsonl" --worker-id "$w" \
    --groups-per-shard 2 --max-new-tokens 6 --batch-size 8 --max-shards 3 --seed 7 --reward format \
    --format-regex '[0-9]' --reward length:0.5 --length-target 3 >"$WORK/roll-$w.log" 2>&1 &
  PIDS+=($!)
done
check "the tiny loop runs 3 steps" wait $TRAIN
wait "${PIDS[@]:1}" 2>/dev/null

# check.py SELECTION JSONL [ORDER]: every line against its shard; SELECTION is
# newest, v<V>, step<N> (exactly the groups of step N's record in the trainer
# state, in order) or window<N> (the shards step N may have drawn from);
# ORDER asc / desc.
cat >"$WORK/check.py" <<'PY'
import glob, json, os, sys
import h5py, numpy as np
from tokenizers import Tokenizer
run, model = os.environ["D"], os.environ["M"]
sel, lines = sys.argv[1], [json.loads(l) for l in open(sys.argv[2])]
order = sys.argv[3] if len(sys.argv) > 3 else None
tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
shards = sorted(glob.glob(os.path.join(run, "rollouts", "v*", "*.h5")))
ver = lambda p: int(p.split("/")[-2][1:])
if sel == "newest":
    lo = hi = max(ver(p) for p in shards)
elif sel.startswith("v"):
    lo = hi = int(sel[1:])
else:
    n = int(sel.lstrip("stepwindow"))
    m = json.load(open(os.path.join(run, "metrics", "step-%08d.json" % n)))
    hi, lo = m["version"], m["version"] - int(np.ceil(m["staleness_max"]))
chosen = [p for p in shards if lo <= ver(p) <= hi]
total = sum(h5py.File(p)["rewards"].shape[0] for p in chosen)
if sel.startswith("step"):  # the record of the state that committed step n: v(version + 1)
    st = h5py.File(os.path.join(run, "trainer", "state-v%08d.h5" % (m["version"] + 1)))
    rec = [(k.decode(), int(f), int(c)) for s, k, f, c in zip(st["record/steps"], st["record/keys"],
                                                                st["record/first"], st["record/count"]) if s == n]
    assert rec, "no record of step %d" % n
    want = [(k, r) for k, f, c in rec for r in range(f * 4, (f + c) * 4)]  # G = 4
    chosen, total = [os.path.join(run, k) for k, _, _ in rec], len(want)
    assert [(j["shard"], j["row"]) for j in lines] == want[:len(lines)], ([(j["shard"], j["row"]) for j in lines], want)
want_n = min(int(os.environ.get("N", 4)), total)
assert len(lines) == want_n, (len(lines), want_n, total)
f32 = lambda x: float(np.float32(x))
rewards = []
for j in lines:
    p = os.path.join(run, j["shard"])
    assert p in chosen, (p, lo, hi)
    h = h5py.File(p)
    assert j["adapter_version"] == int(h.attrs["adapter_version"]) == ver(p)
    assert j["worker"] == h.attrs["worker_id"].decode() == os.path.basename(p).rsplit("-", 1)[0]
    i, g = j["row"], j["group"]
    assert g == int(h["group"][i]) and j["dataset_row"] == int(h["prompt_index"][g])
    po, co = h["prompt_offsets"][:], h["completion_offsets"][:]
    pids, cids = h["prompt_ids"][po[g]:po[g + 1]].tolist(), h["completion_ids"][co[i]:co[i + 1]].tolist()
    assert j["prompt"] == tok.decode(pids, skip_special_tokens=False), (j["prompt"], pids)
    assert j["completion"] == tok.decode(cids, skip_special_tokens=False), (j["completion"], cids)
    assert j["prompt_tokens"] == len(pids) and j["completion_tokens"] == len(cids)
    r = h["rewards"][:]
    assert j["reward_valid"] and f32(j["reward"]) == float(r[i])
    names = [n.decode() for n in h["reward_components"].attrs["names"]]
    assert list(j["rewards"]) == names == ["format", "length"], names
    assert [f32(v) for v in j["rewards"].values()] == [float(x) for x in h["reward_components"][i]]
    G = len(r) // len(po[:-1])
    grp = r[g * G:(g + 1) * G].astype(np.float64)
    sd = grp.std(ddof=1)
    adv = 0.0 if sd == 0 else (r[i] - grp.mean()) / (sd + 1e-4)  # the trainer's group scaling
    assert abs(j["advantage"] - adv) < 1e-4, (j["advantage"], adv)
    assert j["finish_reason"] in ("stop", "length") and j["turns"] == 1
    rewards.append(j["reward"])
allr = sorted(float(x) for p in chosen for x in h5py.File(p)["rewards"][:])
if order == "asc":
    assert rewards == sorted(rewards) and f32(rewards[0]) == allr[0], (rewards, allr[:3])
elif order == "desc":
    assert rewards == sorted(rewards, reverse=True) and f32(rewards[0]) == allr[-1], (rewards, allr[-3:])
print(len(lines), "samples from", len(chosen), "shards of versions", lo, "to", hi)
PY
export D M

echo "samples: selections"
check "the newest version's shards (--json)" bash -c "'$G' samples '$RUN' --json >'$WORK/newest.jsonl'"
check "...decoded, rewards, components and advantages equal the shard's (h5py, tokenizers)" \
  "$PY" "$WORK/check.py" newest "$WORK/newest.jsonl"
V=$(ls "$D/rollouts" | head -1 | sed 's/^v0*//; s/^$/0/')
check "--version $V (the oldest with shards)" bash -c "'$G' samples '$RUN' --version $V --n 5 --json >'$WORK/v.jsonl'"
check "...only that version's shards" env N=5 "$PY" "$WORK/check.py" "v$V" "$WORK/v.jsonl"
check "--step 2 --n 100: all the shards step 2 may have drawn from" \
  bash -c "'$G' samples '$RUN' --step 2 --n 100 --json >'$WORK/s.jsonl'"
check "...exactly the groups its trainer state's record says it trained on, in order" \
  env N=100 "$PY" "$WORK/check.py" step2 "$WORK/s.jsonl"
check "--step 3 (human)" bash -c "'$G' samples '$RUN' --step 3 | grep -q 'step 3 (from adapter v.*), the groups it trained on (trainer/state-v0000000[1-9].h5)'"
check "--worst --n 6 over every shard of --version $V" \
  bash -c "'$G' samples '$RUN' --version $V --worst --n 6 --json >'$WORK/w.jsonl'"
check "...rewards ascending from the lowest" env N=6 "$PY" "$WORK/check.py" "v$V" "$WORK/w.jsonl" asc
check "--best --n 6" bash -c "'$G' samples '$RUN' --version $V --best --n 6 --json >'$WORK/b.jsonl'"
check "...rewards descending from the highest" env N=6 "$PY" "$WORK/check.py" "v$V" "$WORK/b.jsonl" desc

echo "samples: human output"
check "the human output" bash -c "'$G' samples '$RUN' --version $V --worst --n 6 >'$WORK/w.txt'"
# human.py TXT JSONL: the human output holds the --json samples, texts whole (a
# text's newlines continue on "           | " lines, a trailing one too).
cat >"$WORK/human.py" <<'EOF'
import json, re, sys
js = [json.loads(l) for l in open(sys.argv[2])]
txt = open(sys.argv[1]).read()
blocks = txt.split('=== sample ')[1:]
assert len(blocks) == len(js) > 0, len(blocks)
unesc = lambda s: re.sub(r'\\x([0-9a-f]{2})', lambda m: chr(int(m.group(1), 16)), s)
for b, j in zip(blocks, js):
    head = b.split('\n')[0]
    assert head.endswith('adapter v%d, worker %s, %s' % (j['adapter_version'], j['worker'], j['shard'])), head
    assert ('reward %.4g  (format %.4g, length %.4g)  advantage %+.4f' % (j['reward'], j['rewards']['format'],
            j['rewards']['length'], j['advantage'])) in b, b
    p = b.split('prompt     | ', 1)[1].split('\ncompletion | ')[0]
    c = b.split('completion | ', 1)[1].rstrip('\n')
    assert unesc(p.replace('\n           | ', '\n')) == j['prompt'], (p, j['prompt'])
    assert unesc(c.replace('\n           | ', '\n')) == j['completion'], (c, j['completion'])
EOF
check "...shows the same samples as --json: shard, version, worker, reward, advantage, whole texts" \
  "$PY" "$WORK/human.py" "$WORK/w.txt" "$WORK/w.jsonl"
check "--max-chars 2 cuts the texts and says so" bash -c \
  "'$G' samples '$RUN' --n 1 --max-chars 2 | grep -q 'more bytes; --max-chars 0 shows all'"
"$G" samples "$RUN" --n 1 --max-chars 2 >"$WORK/cut.txt"
"$G" samples "$RUN" --n 1 --json >"$WORK/cut.jsonl"
check "--max-chars 2 keeps a prompt's end (where a chat's question is), saying how much it left out before" "$PY" -c '
import json, sys
j = json.loads(open(sys.argv[2]).readline()); t = open(sys.argv[1]).read()
p = t.split("prompt     | ", 1)[1].split("\ncompletion | ")[0].replace("\n           | ", "\n")
b = j["prompt"].encode()
assert len(b) > 2, b
want = "[... %d bytes before; --max-chars 0 shows all] " % (len(b) - 2) + b[-2:].decode()
assert p == want, (p, want)' "$WORK/cut.txt" "$WORK/cut.jsonl"

echo "samples: special tokens and the tokenizer"
cp -r "$D" "$WORK/run2"
S2=$(cd "$WORK/run2" && ls rollouts/*/*.h5 | tail -1)
"$PY" -c "
import h5py; h = h5py.File('$WORK/run2/$S2', 'r+'); h['completion_ids'][0] = 256  # the special <|endoftext|>"
check "a special token is shown as its text" bash -c \
  "'$G' samples 'file://$WORK/run2' --version $((10#${S2:10:8})) --n 100 | grep -F -q '<|endoftext|>'"
check "...and in --json" bash -c \
  "'$G' samples 'file://$WORK/run2' --version $((10#${S2:10:8})) --n 100 --json | grep -F -q '<|endoftext|>'"
"$PY" -c "
import h5py; h = h5py.File('$WORK/run2/$S2', 'r+'); h['completion_ids'][h['completion_offsets'][1] - 1] = 10  # a newline last"
"$G" samples "file://$WORK/run2" --version $((10#${S2:10:8})) --n 100 >"$WORK/nl.txt" 2>&1
"$G" samples "file://$WORK/run2" --version $((10#${S2:10:8})) --n 100 --json >"$WORK/nl.jsonl" 2>&1
check "a completion ending in a newline: the human output shows it (an empty continuation line), as --json" \
  bash -c "'$PY' -c 'import json, sys; assert any(json.loads(l)[\"completion\"].endswith(chr(10)) for l in open(sys.argv[1]))' '$WORK/nl.jsonl' && '$PY' '$WORK/human.py' '$WORK/nl.txt' '$WORK/nl.jsonl'"
sed 's/<|endoftext|>/<|eot|>/' "$M/tokenizer.json" >"$WORK/other.json"
expect_fail "another tokenizer (--tokenizer) -> exit 1 naming both" 1 \
  "w[ab]-.*h5 was generated with tokenizer_sha256 .* $WORK/other.json is .*pass the run's tokenizer" \
  "$G" samples "$RUN" --tokenizer "$WORK/other.json"
check "--model DIR decodes with DIR/tokenizer.json" bash -c "'$G' samples '$RUN' --model '$M' | grep -q 'tokenizer $M/tokenizer.json'"
"$PY" -c "
import json; p='$WORK/run2/run.json'; j=json.load(open(p)); j['base_model']='/nonexistent/model'; json.dump(j, open(p, 'w'))"
expect_fail "run.json's base_model not on this machine -> exit 1 saying which flag" 1 \
  "no tokenizer: run.json's base_model /nonexistent/model has no readable tokenizer.json.*--model DIR or --tokenizer FILE" \
  "$G" samples "file://$WORK/run2"
check "...--model then decodes" "$G" samples "file://$WORK/run2" --model "$M"

rm "$WORK"/run2/trainer/state-v*.h5
check "--step 2 without the trainer states: the shards it may have drawn from, saying so" bash -c \
  "'$G' samples 'file://$WORK/run2' --step 2 --n 100 --model '$M' --json >'$WORK/s2.jsonl' 2>'$WORK/s2.err' && \
   grep -q 'note: step 2: trainer/state-v.*h5 is not there (removed by gc?); showing the shards it may have drawn from' '$WORK/s2.err'"
check "...versions version - staleness_max to version of its metrics" env N=100 D="$WORK/run2" "$PY" "$WORK/check.py" \
  window2 "$WORK/s2.jsonl"

echo "samples: a damaged shard"
cp -r "$D" "$WORK/run3"
# The version with the most shards; its first shard cut to 100 bytes.
read -r VD DAMAGED < <("$PY" -c '
import collections, glob, os, sys
by = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/rollouts/v*/*.h5")): by[f.split("/")[-2]].append(f)
v = max(by, key=lambda k: len(by[k]))
print(int(v[1:]), os.path.relpath(by[v][0], sys.argv[1]))' "$WORK/run3")
truncate -s 100 "$WORK/run3/$DAMAGED"
NV=$(ls "$WORK/run3/rollouts/v$(printf %08d "$VD")" | grep -c 'h5$')
"$G" samples "file://$WORK/run3" --version "$VD" --n 1000 --json >"$WORK/dmg.jsonl" 2>"$WORK/dmg.err"; rc=$?
if [ "$NV" -ge 2 ]; then
  check "--version $VD with $DAMAGED damaged (1 of its $NV shards): exit 0, that shard skipped with one warning naming it, every sample of the others shown" \
    "$PY" -c '
import glob, json, os, sys, h5py
rc, run, bad, err = int(sys.argv[1]), sys.argv[2], sys.argv[3], open(sys.argv[5]).read()
lines = [json.loads(l) for l in open(sys.argv[4])]
others = [os.path.relpath(f, run) for f in glob.glob(os.path.join(run, os.path.dirname(bad), "*.h5")) if not f.endswith(bad)]
assert rc == 0, (rc, err)
assert err.count("warning: skipped " + bad + ": ") == 1 and len(err.strip().splitlines()) == 1, err
assert {j["shard"] for j in lines} == set(others), ({j["shard"] for j in lines}, others)
assert len(lines) == sum(h5py.File(os.path.join(run, o))["rewards"].shape[0] for o in others), len(lines)' \
    "$rc" "$WORK/run3" "$DAMAGED" "$WORK/dmg.jsonl" "$WORK/dmg.err"
  check "...the human output's header counts it as skipped" bash -c \
    "'$G' samples 'file://$WORK/run3' --version $VD 2>/dev/null | head -1 | grep -q '(1 shard skipped: cannot be read)'"
else
  bad "the fixture has no version with two shards (versions: $(ls "$D/rollouts"))"
fi
for f in "$WORK"/run3/rollouts/v"$(printf %08d "$VD")"/*.h5; do truncate -s 100 "$f"; done
expect_fail_last "every shard of --version $VD damaged -> exit 1 saying so" 1 "none of the $NV shards selected could be read" \
  "$G" samples "file://$WORK/run3" --version "$VD"

echo "samples: an --env shard (a turn cut at --max-new-tokens is finish length)"
cp -a "$D" "$WORK/run4"  # (-a: the file store keeps its metadata in extended attributes)
cat >"$WORK/env.py" <<'EOF'
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m["type"] == "start":
        print(json.dumps({"id": m["id"], "messages": [{"role": "user", "content": m["row"]["prompt"]}]}), flush=True)
    elif m["type"] == "step":
        print(json.dumps({"id": m["id"], "reward": 1.0}), flush=True)
EOF
check "an --env worker writes one shard of 1-turn episodes of at most 3 tokens" \
  "$BIN/grpo-rollout" "${COMMON[@]}" --run "file://$WORK/run4" --dataset "$WORK/train.jsonl" --worker-id we \
  --groups-per-shard 2 --max-new-tokens 3 --max-turns 1 --max-episode-tokens 64 --batch-size 8 --max-shards 1 \
  --max-ahead 0 --seed 7 --env "python3 $WORK/env.py" --chat-template "$ROOT/data/calc/chat_template.jinja"
"$G" samples "file://$WORK/run4" --n 100 --json >"$WORK/env.jsonl" 2>"$WORK/env.err"
check "...samples: a turn that ran into --max-new-tokens without a stop token is finish length, one that stopped is stop" \
  "$PY" -c '
import json, sys
lines = [j for j in map(json.loads, open(sys.argv[1])) if j["worker"] == "we"]
eos = "<|endoftext|>"
assert lines and all(j["turns"] == 1 for j in lines), lines[:1]
cut = [j for j in lines if j["completion_tokens"] == 3 and not j["completion"].endswith(eos)]
assert cut, [(j["completion_tokens"], j["completion"]) for j in lines]
assert all(j["finish_reason"] == "length" for j in cut), [(j["completion"], j["finish_reason"]) for j in cut]
assert all(j["finish_reason"] == "stop" for j in lines if j["completion"].endswith(eos)), lines' "$WORK/env.jsonl"

echo "samples: on s3:// (moto, authentication on)"
if start_moto 4 && read -r KEY SECRET < <("$PY" "$ROOT/validation/s3/moto_setup.py" "$MOTO_URL" pail-test); then
  S3ENV=(env AWS_ACCESS_KEY_ID="$KEY" AWS_SECRET_ACCESS_KEY="$SECRET" AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
    AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null)
  "${S3ENV[@]}" aws --endpoint-url "$MOTO_URL" s3 cp --only-show-errors --recursive "$D" s3://pail-test/run
  i=0
  for a in "--step 2 --n 100" "--version $V --worst --n 6"; do
    i=$((i + 1))
    "${S3ENV[@]}" "$G" samples s3://pail-test/run $a --json --endpoint "$MOTO_URL" --model "$M" >"$WORK/s3-$i.jsonl"
    "$G" samples "$RUN" $a --json >"$WORK/file-$i.jsonl"
    check "samples s3://pail-test/run $a --json: what the file:// run gives" \
      bash -c "test -s '$WORK/s3-$i.jsonl' && cmp '$WORK/s3-$i.jsonl' '$WORK/file-$i.jsonl'"
  done
  expect_fail "...a version without shards there -> exit 1" 1 "adapter version 999 has no shards" \
    "${S3ENV[@]}" "$G" samples s3://pail-test/run --version 999 --endpoint "$MOTO_URL" --model "$M"
else
  bad "moto server"
fi

echo "samples: bad input"
expect_fail "an adapter version without shards -> exit 1" 1 "adapter version 999 has no shards under rollouts/v00000999/ \(versions with shards: " \
  "$G" samples "$RUN" --version 999
expect_fail "a step not committed -> exit 1" 1 "step 99: no metrics/step-00000099.json" "$G" samples "$RUN" --step 99
expect_fail "no run -> exit 1" 1 "file://$WORK/nope: no run.json: not a run" "$G" samples "file://$WORK/nope"
mkdir -p "$WORK/empty"; cp "$D/run.json" "$WORK/empty/"
expect_fail "a run without shards -> exit 1" 1 "has no rollout shards" "$G" samples "file://$WORK/empty"
expect_fail "--worst and --best -> exit 2" 2 "--worst and --best: give one" "$G" samples "$RUN" --worst --best
expect_fail "--step and --version -> exit 2" 2 "--step and --version" "$G" samples "$RUN" --step 1 --version 0
expect_fail "--n 0 -> exit 2" 2 "--n" "$G" samples "$RUN" --n 0
expect_fail "--version x -> exit 2" 2 "--version" "$G" samples "$RUN" --version x
expect_fail "no RUN_URL -> exit 2" 2 "expected one RUN_URL" "$G" samples
finish
