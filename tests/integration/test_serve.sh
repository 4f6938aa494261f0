#!/usr/bin/env bash
# grpo-rollout --serve (doc/environments.md, "An agent as the environment"):
# the OpenAI-compatible endpoint with the official openai package as the client
# (tests/integration/serve_openai.py). A tiny byte-level model is warmed up in a
# second on four calculator problems (data/calc's format: "A*B" -> the tool call
# mul(A, B) -> after the tool's result, the result). One trainer and one serving
# worker on a file:// bucket; then:
#   - models, completions and chat (streamed chunks = the whole answer), stop
#     strings, tool calls both ways, a dropped stream, every malformed request
#     class answered with OpenAI's error body;
#   - the endpoint's greedy answer equals grpo-ctl eval's for the same opening;
#   - 64 concurrent agents (the openai client + their own tool code) play
#     episodes to their rewards, twice; the trainer trains 4 steps on the
#     shards, a new adapter version goes live on the endpoint;
#   - a worker under a connection flood at --serve-max-connections (loopback, 200 idle sockets,
#     192 descriptors): /health and its work go on, the log stays short, the timeouts close
#     them; a 9 MiB body (and chunked), a false Content-Length, -1, HTTP/0.9, DELETE, FOO, HEAD,
#     5,000 reward components: JSON errors;
#   - the run's end: the worker exits 0 by itself; with an agent's episode open it serves that
#     episode to its reward first, answering new work 503 run_done;
#   - a second worker over TLS with a bearer key (handshake timeout, 400 streamed chats from 8
#     clients all complete, heartbeat while serving);
#     the refusals at startup.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"
PY=$(venv)/bin/python
export OMP_NUM_THREADS=1

# The four problems, the warm-up rows and the dataset.
"$PY" - "$WORK" <<'PYEOF'
import json, sys
w = sys.argv[1]
P = [(100, 48), (100, 94), (101, 57), (101, 73)]
with open(w + "/sft.jsonl", "w") as f, open(w + "/calc.jsonl", "w") as d:
    for a, b in P:
        call = {"role": "assistant", "content": '<tool_call>{"name":"mul","arguments":{"a":%d,"b":%d}}</tool_call>' % (a, b)}
        u = {"role": "user", "content": "%d*%d" % (a, b)}
        f.write(json.dumps({"messages": [u, call]}) + "\n")
        f.write(json.dumps({"messages": [u, call, {"role": "tool", "content": str(a * b)},
                                         {"role": "assistant", "content": str(a * b)}]}) + "\n")
        d.write(json.dumps({"prompt": "%d*%d" % (a, b), "answer": str(a * b)}) + "\n")
PYEOF
M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$WORK/model-random" --model-type llama --hidden 64 --layers 2 --heads 2 --kv-heads 1 \
  --ffn 128 --vocab 257 --max-positions 1536 --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 --seed 1 \
  >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
cp "$ROOT/data/calc/chat_template.jinja" "$WORK/model-random/"
check "a tiny model learns the four problems' tool format (grpo-train --sft --full)" \
  "$BIN/grpo-train" --sft "$WORK/sft.jsonl" --sft-valid "$WORK/sft.jsonl" --valid-every 50 --stop-accuracy 1 --full \
  --model "$WORK/model-random" --out "$M" --steps 1500 --groups-per-step 8 --lr 3e-3 --warmup-steps 10 \
  --token-budget 4096 --metrics ""
grep -q 'reached the target' "$WORK/last.err" || bad "...it reached 100% (see the warm-up log)"

RUN="file://$WORK/run"
PORT=$(free_port)
BASE="http://127.0.0.1:$PORT/v1"
ROLL=(--model "$M" --run "$RUN" --dataset "$WORK/calc.jsonl" --group-size 4 --groups-per-shard 16 --batch-size 64
  --max-new-tokens 96 --max-turns 3 --max-episode-tokens 256 --served-model-name tiny --seed 3)
"$BIN/grpo-train" --model "$M" --run "$RUN" --group-size 4 --groups-per-step 8 --steps 4 --lr 5e-3 --lora-rank 4 \
  --rollout-timeout 300 --metrics "$WORK/metrics.jsonl" >"$WORK/train.log" 2>&1 &
TRAIN=$!; PIDS+=($TRAIN)
"$BIN/grpo-rollout" "${ROLL[@]}" --worker-id ws --serve "127.0.0.1:$PORT" >"$WORK/roll.log" 2>&1 &
WS=$!; PIDS+=($WS)
up() { for _ in $(seq 1 300); do curl -sf "$1" 2>/dev/null | grep -q '"adapter_version":0' && return 0; sleep 0.1; done; return 1; }
check "the worker serves /health with adapter v0" up "http://127.0.0.1:$PORT/health"

echo "the API (ad hoc requests)"
"$PY" "$ROOT/tests/integration/serve_openai.py" api "$BASE" tiny "$WORK"; rc=$?
[ $rc = 0 ] && ok "...every API check" || bad "...API checks failed (above)"

# grpo-ctl eval's greedy episode of the same opening, recorded by its environment program.
cat >"$WORK/record_env.py" <<'PYEOF'
import json, sys
g = json.load(open(sys.argv[1]))
for line in sys.stdin:
    m = json.loads(line)
    if m["type"] == "start":
        print(json.dumps({"id": m["id"], "messages": g["messages"]}), flush=True)
    elif m["type"] == "step":
        open(sys.argv[2], "w").write(m["text"])
        print(json.dumps({"id": m["id"], "reward": 1.0}), flush=True)
PYEOF
v=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["adapter_version"])' "$WORK/greedy.json")
"$BIN/grpo-ctl" eval --model "$M" --adapter "$WORK/run/adapters/v$(printf %08d "$v").h5" --dataset "$WORK/calc.jsonl" \
  --env "python3 $WORK/record_env.py $WORK/greedy.json $WORK/eval-text" --max-turns 1 --max-new-tokens 96 \
  --max-episode-tokens 256 --tool-format none >"$WORK/eval.log" 2>&1
check "the endpoint's greedy answer equals grpo-ctl eval's for the same opening (adapter v$v)" "$PY" -c '
import json, sys
want = json.load(open(sys.argv[1]))["content"]; got = open(sys.argv[2]).read()
assert want and got == want, (got, want)' "$WORK/greedy.json" "$WORK/eval-text"

echo "episodes: 64 concurrent agents, twice"
"$PY" "$ROOT/tests/integration/serve_openai.py" episodes "$BASE" tiny 64 "$WORK" | tee "$WORK/episodes1.out"
[ "${PIPESTATUS[0]}" = 0 ] && ok "...first round" || bad "...first round failed (above)"
# The trainer publishes v1 from the first shard before the second round: the batch
# after the second round's is of a later version (the one the worker swaps to).
check "...the trainer publishes adapter v1 from the first round's shard" bash -c \
  'for _ in $(seq 1 600); do [ -f "$1/run/adapters/v00000001.h5" ] && exit 0; sleep 0.2; done; exit 1' _ "$WORK"
"$PY" "$ROOT/tests/integration/serve_openai.py" episodes "$BASE" tiny 64 "$WORK" | tee "$WORK/episodes2.out"
[ "${PIPESTATUS[0]}" = 0 ] && ok "...second round" || bad "...second round failed (above)"
# Each round claims 66 episodes of the 64 a batch holds: the second round's last ones are the third batch's.
check "a new adapter version went live on the endpoint: the second round's last episodes were played with it" "$PY" -c '
import json, sys
v = [e["version"] for e in json.load(open(sys.argv[1]))["episodes"]]
assert 0 < sum(x >= 1 for x in v) < len(v), v' "$WORK/episodes.json"
check "the trainer trains 4 steps on the endpoint's episode shards" wait $TRAIN
check "...its metrics: multi-turn rows (tool call, then the answer), only the model's tokens trained" "$PY" - \
  "$WORK/metrics.jsonl" <<'PYEOF'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
assert len(steps) == 4, len(steps)
for s in steps:
    assert s["completions/mean_turns"] > 1.2, s["completions/mean_turns"]
    assert 0 < s["completions/mean_trained_tokens"] < s["completions/mean_length"], s
PYEOF
check "...it trained the segment of the episode whose history was edited (completions/segments), and on data of its own version the importance ratio is 1: the behaviour log-probs of every row, the segment's too, are the trainer's" "$PY" -c '
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
assert sum(s["completions/segments"] for s in m) >= 1, [s["completions/segments"] for s in m]
fresh = [s for s in m if s["staleness_max"] == 0]
assert fresh and all(abs(s["ratio_min"] - 1) < 1e-3 and abs(s["ratio_max"] - 1) < 1e-3 for s in fresh), fresh' "$WORK/metrics.jsonl"
check "...the shards hold the agents' rewards and components" "$PY" -c '
import glob, sys, h5py
fs = sorted(glob.glob(sys.argv[1] + "/rollouts/*/ws-*.h5"))
assert len(fs) >= 2, fs
segs = False
for f in fs:
    h = h5py.File(f, "r")
    assert h.attrs["format_version"] in (2, 3) and h.attrs["max_new_tokens"] == 256
    names = [n.decode() if isinstance(n, bytes) else n for n in h["reward_components"].attrs["names"]]
    assert names == ["correct", "tool_calls"], names
    m = h["completion_mask"][:]
    assert 0 < m.sum() < len(m) and (h["logprobs"][:][m == 0] == 0).all()
    assert h["reward_valid"][:].sum() >= 60 and h["turns"][:].max() >= 2
    if "segment_of" in h:  # format 3: a segment shares the reward of its episode row
        seg, r = h["segment_of"][:], h["rewards"][:]
        N = len(h["group"]) - len(seg)
        assert h.attrs["format_version"] == 3 and all(r[N + x] == r[e] for x, e in enumerate(seg))
        segs = True
assert segs, "no shard with a segment"' "$WORK/run"
exits() {  # PID SECONDS: the process exits by itself within SECONDS, with status 0 (else it is stopped: 1)
  local i; for i in $(seq 1 $(($2 * 10))); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then echo "still running after $2 s" >&2; kill "$1"; wait "$1"; return 1; fi
  wait "$1"
}
check "the serving worker exits by itself, with status 0, once the run is done (nothing in flight)" exits $WS 60
check "...its log and heartbeat say so" bash -c '
grep -q "the run is done (the trainer reached its --steps; final adapter v00000004).*takes no new episodes" "$1" &&
grep -q "\"state\": \"finished\"" "$2"' _ "$WORK/roll.log" "$WORK/run/workers/ws.json"
check "the heartbeat names the endpoint and counts its episodes" "$PY" -c '
import json, sys
h = json.load(open(sys.argv[1]))
assert h["endpoint"] == sys.argv[2], h
assert h["environment"]["episodes"] >= 128, h["environment"]' "$WORK/run/workers/ws.json" "http://127.0.0.1:$PORT"

echo "the run ends while an agent holds an episode (a trainer of 1 step, batches of 4 episodes)"
DPORT=$(free_port)
"$BIN/grpo-train" --model "$M" --run "file://$WORK/run-done" --group-size 4 --groups-per-step 1 --steps 1 --lr 1e-3 \
  --lora-rank 4 --rollout-timeout 300 --metrics "" >"$WORK/train-done.log" 2>&1 &
TD=$!; PIDS+=($TD)
"$BIN/grpo-rollout" "${ROLL[@]/$RUN/file://$WORK/run-done}" --groups-per-shard 1 --max-ahead 0 --worker-id wd \
  --serve "127.0.0.1:$DPORT" >"$WORK/roll-done.log" 2>&1 &
WD=$!; PIDS+=($WD)
check "...its worker serves adapter v0" up "http://127.0.0.1:$DPORT/health"
"$PY" "$ROOT/tests/integration/serve_openai.py" run_done "http://127.0.0.1:$DPORT/v1" tiny; rc=$?
[ $rc = 0 ] && ok "...every check while the worker finishes" || bad "...checks while the worker finishes failed (above)"
check "...the worker then exits by itself with status 0" exits $WD 60
check "...its log says it finished the episode in flight first" grep -q "the episodes in flight have ended" \
  "$WORK/roll-done.log"
wait $TD

echo "an idle episode (a worker given a bare port: loopback)"
OPORT=$(free_port)
"$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wo --serve "$OPORT" --episode-timeout 1 \
  >"$WORK/roll-timeout.log" 2>&1 &
WO=$!; PIDS+=($WO)
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$OPORT/health" >/dev/null && break; sleep 0.1; done
"$PY" "$ROOT/tests/integration/serve_openai.py" timeout "http://127.0.0.1:$OPORT/v1" tiny 1; rc=$?
[ $rc = 0 ] && ok "...the timeout checks" || bad "...timeout checks failed (above)"

echo "before the first adapter"
BPORT=$(free_port)
"$BIN/grpo-rollout" "${ROLL[@]/$RUN/file://$WORK/no-run-yet}" --worker-id wb --serve "$BPORT" >"$WORK/roll-before.log" 2>&1 &
WB=$!; PIDS+=($WB)
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$BPORT/health" >/dev/null && break; sleep 0.1; done
check "a worker still waiting for its run answers ad-hoc requests with the base model (adapter_version -1)" "$PY" -c '
import openai, sys
c = openai.OpenAI(api_key="unused", base_url=sys.argv[1], max_retries=0, timeout=30)
r = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "100*48"}], temperature=0, max_tokens=8)
assert r.model_extra["pail"]["adapter_version"] == -1 and r.usage.completion_tokens > 0, r' "http://127.0.0.1:$BPORT/v1"
kill $WB; wait $WB 2>/dev/null

echo "the endpoint's limits (doc/environments.md): a connection flood, hostile requests"
# 192 descriptors: the old endpoint, which had no cap, ran out of them under this flood.
LPORT=$(free_port)
(ulimit -n 192; exec "$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wl --serve "127.0.0.1:$LPORT" \
  --serve-max-connections 64 --serve-header-timeout 2 --serve-idle-timeout 3) >"$WORK/roll-limits.log" 2>&1 &
WL=$!; PIDS+=($WL)
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$LPORT/health" >/dev/null && break; sleep 0.1; done
"$PY" "$ROOT/tests/integration/serve_limits.py" flood "http://127.0.0.1:$LPORT/v1" tiny 64 2 200; rc=$?
[ $rc = 0 ] && ok "...every flood check" || bad "...flood checks failed (above)"
check "...the log says so in at most a few lines (one rate-limited line, not one per refusal)" "$PY" -c '
import os, sys
t = open(sys.argv[1], errors="replace").read()
assert os.path.getsize(sys.argv[1]) < 200000, os.path.getsize(sys.argv[1])
n = t.count("max-connections"); m = t.count("Too many open files")
assert 1 <= n <= 3 and m <= 3, (n, m)' "$WORK/roll-limits.log"
"$PY" "$ROOT/tests/integration/serve_limits.py" http "http://127.0.0.1:$LPORT/v1" tiny; rc=$?
[ $rc = 0 ] && ok "...every hostile-request check" || bad "...hostile-request checks failed (above)"
kill $WL; wait $WL 2>/dev/null

echo "TLS and a bearer key"
mkdir -p "$WORK/tls"
relay_tls "$WORK/tls" || bad "openssl"
echo "serve-key-0123456789abcdef" >"$WORK/api-key"
TPORT=$(free_port)
"$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wt --serve "127.0.0.1:$TPORT" --serve-cert "$WORK/tls/server.pem" \
  --serve-tls-key "$WORK/tls/server.key" --serve-api-key-file "$WORK/api-key" --serve-header-timeout 3 \
  >"$WORK/roll-tls.log" 2>&1 &
WT=$!; PIDS+=($WT); WT_T0=$(date +%s)
for _ in $(seq 1 300); do curl -sf --cacert "$WORK/tls/ca.pem" "https://127.0.0.1:$TPORT/health" >/dev/null && break; sleep 0.1; done
"$PY" "$ROOT/tests/integration/serve_openai.py" tls "https://127.0.0.1:$TPORT/v1" tiny "$WORK/tls/ca.pem" \
  serve-key-0123456789abcdef; rc=$?
[ $rc = 0 ] && ok "...every TLS check" || bad "...TLS checks failed (above)"
"$PY" "$ROOT/tests/integration/serve_openai.py" tls_streams "https://127.0.0.1:$TPORT/v1" tiny "$WORK/tls/ca.pem" \
  serve-key-0123456789abcdef 400 8; rc=$?
[ $rc = 0 ] && ok "...every streamed chat over TLS complete" || bad "...a streamed chat over TLS was cut (above)"
"$PY" "$ROOT/tests/integration/serve_limits.py" handshake 127.0.0.1 "$TPORT" 3 50; rc=$?
[ $rc = 0 ] && ok "...connections that never start the TLS handshake are closed" || bad "...handshake timeout (above)"
beat() {  # the worker waiting for its agents refreshes its heartbeat while it serves (not "starting ... LATE")
  sleep $((WT_T0 + 14 - $(date +%s) > 0 ? WT_T0 + 14 - $(date +%s) : 0))
  "$PY" -c '
import json, sys, time
h = json.load(open(sys.argv[1]))
assert h["state"] == "serving" and time.time() - h["time"] < 8, (h["state"], time.time() - h["time"])' "$WORK/run/workers/wt.json"
}
check "the TLS worker, waiting for agents 14 s after its start, has a fresh heartbeat in state serving" beat

echo "refusals"
expect_fail_last "--serve off loopback without TLS and a key" 1 "not a loopback address: it needs TLS" \
  "$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wr --serve 0.0.0.0:0
expect_fail_last "--serve on a port in use" 1 "cannot listen" \
  "$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wr --serve "127.0.0.1:$OPORT"
expect_fail_last "--serve-api-key-file missing" 1 "api-key-file .*No such file" \
  "$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wr --serve 127.0.0.1:0 --serve-api-key-file "$WORK/nope"
echo short >"$WORK/short-key"
expect_fail_last "a bearer key under 16 characters" 1 "16 characters" \
  "$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wr --serve 127.0.0.1:0 --serve-api-key-file "$WORK/short-key"
expect_fail_last "--serve-cert without --serve-tls-key" 1 "come together" \
  "$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wr --serve 127.0.0.1:0 --serve-cert "$WORK/tls/server.pem"
expect_fail_last "--serve-max-connections beyond the descriptor limit (ulimit -Hn 256)" 1 "file descriptors.*lower --serve-max-connections" \
  bash -c 'ulimit -n 256; ulimit -Hn 256; exec "$@"' _ "$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wr --serve 127.0.0.1:0 \
  --serve-max-connections 4000
expect_fail "--serve with --env" 2 "no --env" \
  "$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wr --serve 127.0.0.1:0 --env "cat"
expect_fail "--serve with --reward" 2 "no --reward" \
  "$BIN/grpo-rollout" "${ROLL[@]}" --worker-id wr --serve 127.0.0.1:0 --reward exact_answer
echo "stopping"
# An agent waiting for an episode while the worker stops: its claim is answered, the worker exits 0.
"$PY" -c 'import httpx2, sys; open(sys.argv[2], "w").close()
r = httpx2.post(sys.argv[1] + "/episodes", json={"wait": 60}, timeout=90)
print(r.status_code)' "http://127.0.0.1:$OPORT/v1" "$WORK/claim-ready" >"$WORK/claim-at-stop.out" 2>&1 &
CL=$!
for _ in $(seq 1 300); do [ -f "$WORK/claim-ready" ] && break; sleep 0.1; done  # (its imports take a while)
sleep 1
stopped() {  # PID LOG: SIGTERM ends a serving worker (its open batch cancelled) with status 0, its log clean
  kill -TERM "$1"; wait "$1" || return 1
  ! grep -E 'Sanitizer|double free|corruption' "$2"
}
check "SIGTERM stops a serving worker (exit 0, nothing left behind by the sanitizers when built with them)" \
  stopped $WO "$WORK/roll-timeout.log"
wait $CL
check "...an agent waiting for an episode then gets an answer (an episode, or 503 while it stops), not a hang" \
  grep -Eq '^(503|200)$' "$WORK/claim-at-stop.out"
check "...the TLS worker too" stopped $WT "$WORK/roll-tls.log"
check "...and the serving worker that exited when the run was done left its log clean" \
  bash -c '! grep -E "Sanitizer|double free|corruption" "$1"' _ "$WORK/roll.log"

finish
