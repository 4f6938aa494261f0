#!/usr/bin/env python3
"""An agent for the calculator task (data/calc), written against the official
openai client as any agent is: it is the environment of `grpo-rollout --serve`
(doc/environments.md, "An agent as the environment"). Each of its threads
claims an episode (POST /v1/episodes), plays it -- the model's mul calls are
run here and their results sent back as tool messages, a turn without a call
is the answer -- and posts the reward (1 when the answer is the row's, else 0;
components correct and tool_calls), the same rules as data/calc/env.py.

  calc_agent.py --base http://127.0.0.1:PORT/v1 --model NAME [--agents 64]
                [--api-key-file F] [--ca F] [--episodes N] [--stop-file F]

Runs until N episodes are played, the stop file exists, or the endpoint has
been unreachable for --give-up seconds; prints a summary line at the end.
"""
import argparse
import concurrent.futures as cf
import json
import os
import threading
import time

import httpx2
import openai

TOOLS = [{"type": "function", "function": {
    "name": "mul", "description": "a times b",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}]


_clients = {}  # one pooled HTTP client per CA setting (keep-alive across the episode API's requests)
_clients_lock = threading.Lock()


def post(base, path, body, key=None, verify=True, timeout=60):
    """(status, JSON) of a POST to the endpoint's episode API."""
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    with _clients_lock:
        c = _clients.setdefault(str(verify), httpx2.Client(verify=verify, limits=httpx2.Limits(max_connections=256)))
    r = c.post(base + path, content=json.dumps(body), headers=h, timeout=timeout)
    return r.status_code, r.json()


def claim(base, key=None, verify=True, tries=100):
    """The next episode: {"id", "group", "index", "row", "adapter_version", "max_turns", ...}."""
    for _ in range(tries):
        st, j = post(base, "/episodes", {"wait": 30}, key, verify, timeout=40)
        if st == 200:
            return j
        if st != 503:  # 503: between batches, or every episode of this one is out
            raise RuntimeError(f"POST /v1/episodes: {st} {j}")
    raise RuntimeError("no episode handed out")


def tool_result(call):
    try:
        a = json.loads(call.function.arguments)
    except ValueError:
        return "error: the arguments are not JSON"
    if call.function.name != "mul":
        return "error: no tool named " + call.function.name
    if not isinstance(a, dict) or not all(isinstance(a.get(k), int) for k in ("a", "b")):
        return "error: mul takes integers a and b"
    return str(a["a"] * a["b"])


def play(client, base, model, ep, key=None, verify=True):
    """One episode, as an agent plays it; returns what happened."""
    msgs = [{"role": "user", "content": ep["row"]["prompt"]}]
    hdr = {"X-Pail-Episode": ep["id"]}
    tokens, calls, answer = 0, 0, None
    for _ in range(ep["max_turns"]):
        r = client.chat.completions.create(model=model, messages=msgs, tools=TOOLS, extra_headers=hdr)
        tokens += r.usage.completion_tokens
        m = r.choices[0].message
        msgs.append(m.model_dump(exclude_none=True))
        if not m.tool_calls or r.model_extra["pail"]["final"] or r.choices[0].finish_reason == "length":
            answer = "" if m.tool_calls else (m.content or "")
            break
        calls += 1
        for tc in m.tool_calls:
            msgs.append({"role": "tool", "tool_call_id": tc.id, "content": tool_result(tc)})
    reward = float(answer is not None and answer.strip() == ep["row"]["answer"])
    st, j = post(base, f"/episodes/{ep['id']}/reward", {"reward": reward, "components": {
        "correct": reward, "tool_calls": calls}}, key, verify)
    if st != 200:
        raise RuntimeError(f"reward for {ep['id']}: {st} {j}")
    return {"id": ep["id"], "group": ep["group"], "row": ep["row"], "reward": reward, "tokens": tokens,
            "turns": sum(m["role"] == "assistant" for m in msgs), "calls": calls, "version": ep["adapter_version"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--api-key-file")
    ap.add_argument("--ca")
    ap.add_argument("--episodes", type=int, default=0, help="stop after this many (0: no limit)")
    ap.add_argument("--stop-file")
    ap.add_argument("--give-up", type=float, default=30, help="seconds the endpoint may be unreachable")
    a = ap.parse_args()
    key = open(a.api_key_file).readline().strip() if a.api_key_file else None
    verify = a.ca or True
    client = openai.OpenAI(api_key=key or "unused", base_url=a.base, max_retries=2, timeout=600,
                           http_client=httpx2.Client(verify=verify, timeout=600))
    lock = threading.Lock()
    done, reward, tokens, t0 = [0], [0.0], [0], time.time()

    def agent(_):
        down_since = None
        while True:
            with lock:
                if a.episodes and done[0] >= a.episodes:
                    return
            if a.stop_file and os.path.exists(a.stop_file):
                return
            try:
                res = play(client, a.base, a.model, claim(a.base, key, verify), key, verify)
                down_since = None
            except (httpx2.HTTPError, openai.APIConnectionError, RuntimeError, openai.APIStatusError) as e:
                # The worker swapped batches under us, restarted, or is gone.
                down_since = down_since or time.time()
                if time.time() - down_since > a.give_up:
                    return
                time.sleep(0.5 if not isinstance(e, RuntimeError) else 0.05)
                continue
            with lock:
                done[0] += 1
                reward[0] += res["reward"]
                tokens[0] += res["tokens"]

    with cf.ThreadPoolExecutor(a.agents) as ex:
        list(ex.map(agent, range(a.agents)))
    secs = time.time() - t0
    print(f"calc_agent: {done[0]} episodes in {secs:.1f} s ({done[0] / max(secs, 1e-9):.1f}/s, "
          f"{tokens[0] / max(secs, 1e-9):.0f} generated tokens/s), mean reward "
          f"{reward[0] / max(done[0], 1):.3f}", flush=True)


if __name__ == "__main__":
    main()
