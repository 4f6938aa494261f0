"""An environment program for test_env_faults.sh (doc/environments.md's
protocol), well-behaved or broken on purpose: env_modes.py MODE [STATE_DIR].
Episodes: the row's prompt as the user's message, a tool result after each
turn until the last (`final`), then reward = 1 when the last turn's text has
a digit, else 0, with components {"digit", "turns"}. MODE:
  ok         as above
  crash      exits with status 3 at its 5th request, once (STATE_DIR/crashed)
  slow       never answers episodes whose id ends in ".1"
  hang       answers the starts, then never again (once: STATE_DIR/hung)
  badline    writes a line that is not JSON at its 3rd request, once
  badutf8    writes a line of invalid UTF-8 at its 3rd request, once
  unknown    answers an id that is not open before each real answer
  twice      answers every start twice
  nofinal    answers the final turn with messages instead of a reward
  badreward  a reward of "high" for every episode
  manycomps  40 reward components for every episode (32 is the most a shard holds)
  error      {"error": ...} for every episode at its first step
  log        as ok, and appends each request line to STATE_DIR/requests.jsonl
  stall      as log for the worker's first batch (ids "W/0.k"); later batches get their
             openings, then no answer (a slow tool: the worker must not wait for them)
"""
import json
import os
import sys
import time

mode = sys.argv[1]
state = sys.argv[2] if len(sys.argv) > 2 else "."
once = lambda name: not os.path.exists(os.path.join(state, name)) and not open(os.path.join(state, name), "w").close()
n = 0


def say(o):
    print(json.dumps(o), flush=True)


for line in sys.stdin:
    m = json.loads(line)
    n += 1
    if mode in ("log", "stall"):
        with open(os.path.join(state, "requests.jsonl"), "a") as f:
            f.write(line)
    i, t = m["id"], m["type"]
    if t == "cancel":
        continue
    if mode == "crash" and n == 5 and once("crashed"):
        print("crashing on purpose", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "stall" and t != "start" and "/0." not in i:
        continue
    if mode == "slow" and i.endswith(".1"):
        continue
    if mode == "hang" and t != "start" and once("hung"):
        time.sleep(3600)
    if mode == "badline" and n == 3 and once("badline"):
        print("hello, not json", flush=True)
    if mode == "badutf8" and n == 3 and once("badutf8"):
        sys.stdout.buffer.write(b"\xff\xfe caf\xc3 \xe2\x82 end\n")
        sys.stdout.buffer.flush()
    if mode == "unknown":
        say({"id": "nobody.7", "reward": 1.0})
    if t == "start":
        row = m["row"]
        say({"id": i, "messages": [{"role": "user", "content": row.get("prompt") or row["question"]}]})
        if mode == "twice":
            say({"id": i, "messages": [{"role": "user", "content": "again"}]})
        continue
    if mode == "error":
        say({"id": i, "error": "the tool broke"})
        continue
    if t == "end" or (m.get("final") and mode != "nofinal"):
        digit = any(c.isdigit() for c in m.get("text", ""))
        r = "high" if mode == "badreward" else float(digit)
        comps = {"digit": float(digit), "turns": m.get("turn", 0)}
        if mode == "manycomps":
            comps.update({"c%02d" % k: 0.5 for k in range(38)})
        say({"id": i, "reward": r, "components": comps})
        continue
    say({"id": i, "messages": [{"role": "tool", "content": "r%d" % m["turn"]}]})
