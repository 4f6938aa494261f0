#!/usr/bin/env python3
"""The calculator task's environment program (doc/environments.md): JSON lines
on stdin / stdout, episodes interleaved by id. Opens each episode with the
row's question and the tool mul(a, b); answers a well-formed mul call with the
product and a broken one with its error; takes a turn without a tool call as
the final answer. Reward 1 when that answer is the row's answer, else 0;
components: correct (0/1) and tool_calls (calls answered)."""
import json
import sys

TOOLS = [{"type": "function", "function": {
    "name": "mul", "description": "a times b",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}]
episodes = {}  # id -> {"answer", "calls"}


def say(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()


def result(call):
    if "error" in call:
        return "error: " + call["error"]
    args = call["arguments"]
    if call["name"] != "mul":
        return "error: no tool named " + call["name"]
    if not all(isinstance(args.get(k), int) for k in ("a", "b")):
        return "error: mul takes integers a and b"
    return str(args["a"] * args["b"])


def reward(eid, answer_text):
    ep = episodes.pop(eid)
    correct = float(answer_text.strip() == ep["answer"])
    say({"id": eid, "reward": correct, "components": {"correct": correct, "tool_calls": ep["calls"]}})


for line in sys.stdin:
    m = json.loads(line)
    eid, kind = m["id"], m["type"]
    if kind == "start":
        episodes[eid] = {"answer": m["row"]["answer"], "calls": 0}
        say({"id": eid, "messages": [{"role": "user", "content": m["row"]["prompt"]}], "tools": TOOLS})
    elif kind == "cancel":
        episodes.pop(eid, None)
    elif kind == "end":
        episodes.pop(eid, None)
        say({"id": eid, "reward": 0.0, "components": {"correct": 0.0, "tool_calls": 0}})
    elif m["tool_calls"] and not m["final"]:
        episodes[eid]["calls"] += 1
        say({"id": eid, "messages": [{"role": "tool", "content": result(c)} for c in m["tool_calls"]]})
    else:
        reward(eid, "" if m["tool_calls"] else m.get("content", m["text"]))
