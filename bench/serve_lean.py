#!/usr/bin/env python3
"""bench/serve.sh's lean clients: N threads playing one-turn episodes against
grpo-rollout --serve with http.client (keep-alive, no SDK), so that the
endpoint's capacity is measured rather than the client's (the openai package
costs ~90 ms of CPU an episode here).
  serve_lean.py BASE_URL MODEL THREADS EPISODES"""
import http.client
import json
import sys
import threading
import time
import urllib.parse

base, model, nthreads, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
u = urllib.parse.urlsplit(base)
lock = threading.Lock()
done, tokens = [0], [0]


def call(conn, path, body, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request("POST", u.path + path, json.dumps(body), h)
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def agent():
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    while True:
        with lock:
            if done[0] >= total:
                return
        try:
            st, ep = call(conn, "/episodes", {"wait": 5})
            if st != 200:
                continue
            st, r = call(conn, "/chat/completions", {"model": model, "messages": [
                {"role": "user", "content": ep["row"]["prompt"]}]}, {"X-Pail-Episode": ep["id"]})
            call(conn, f"/episodes/{ep['id']}/reward", {"reward": 0.0})
        except (OSError, http.client.HTTPException, ValueError):
            return  # the worker is gone
        with lock:
            done[0] += 1
            tokens[0] += r["usage"]["completion_tokens"] if st == 200 else 0


t0 = time.time()
ts = [threading.Thread(target=agent) for _ in range(nthreads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
secs = time.time() - t0
print(f"lean clients: {done[0]} episodes in {secs:.1f} s, {tokens[0] / secs:.0f} generated tokens/s", flush=True)
