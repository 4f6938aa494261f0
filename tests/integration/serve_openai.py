#!/usr/bin/env python3
"""Client-side checks of grpo-rollout --serve (doc/environments.md, "An agent as
the environment"), with the official openai package as the client.

  serve_openai.py api BASE MODEL OUT       models, completions, chat, streaming, stop, tools, errors;
                                           writes OUT/greedy.json (the greedy answer of one opening)
  serve_openai.py episodes BASE MODEL N OUT  N concurrent agents playing one episode each of the
                                           calculator task; OUT/episodes.json
  serve_openai.py timeout BASE MODEL SECS  an idle episode fails after --episode-timeout SECS
  serve_openai.py tls BASE MODEL CA KEY    TLS with the bearer key: a wrong key is 401, the right one works
  serve_openai.py run_done BASE MODEL      the run ends with an episode open: it is served to its reward,
                                           new work gets 503 run_done
  serve_openai.py tls_streams BASE MODEL CA KEY N C  N short streamed chats over TLS from C clients at once

Episodes are played by validation/agent/calc_agent.py. The model is the test's warmed-up tiny model: it answers "A*B" with the tool
call mul(A, B) and, after the tool's result, with the result.
Prints one line per check; exits 1 when one fails.
"""
import concurrent.futures as cf
import json
import sys
import time

import os

import httpx2
import openai

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../validation/agent"))
import calc_agent  # noqa: E402  (the agent the validation trains through the endpoint)

FAILED = []
VERIFY = True  # the CA bundle of a TLS endpoint (tls)
TOOLS = calc_agent.TOOLS


def check(name, cond, detail=""):
    print(("  ok    " if cond else "  FAIL  ") + name + ("" if cond else ": " + str(detail)[:400]), flush=True)
    if not cond:
        FAILED.append(name)


def raw(base, method, path, body=None, headers=None, key=None):
    """(status, parsed JSON or text) of one request, without the openai client."""
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    h.update(headers or {})
    data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
    r = httpx2.request(method, base + path, content=data, headers=h, timeout=60, verify=VERIFY)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text


def error_shape(j):
    """OpenAI's error body ({"error": {...}}; the openai client's exceptions carry the inner object)."""
    e = j.get("error", j) if isinstance(j, dict) else None
    return isinstance(e, dict) and set(e) == {"message", "type", "param", "code"} and isinstance(e["message"], str)


def stream_text(chunks, chat):
    text, finish, calls, usage = "", None, {}, None
    for c in chunks:
        if c.usage:
            usage = c.usage
        for ch in c.choices:
            if chat:
                d = ch.delta
                text += d.content or ""
                for tc in d.tool_calls or []:
                    calls[tc.index] = (tc.function.name, tc.function.arguments)
            else:
                text += ch.text or ""
            finish = ch.finish_reason or finish
    return text, finish, [calls[i] for i in sorted(calls)], usage


def api(base, model, out):
    c = openai.OpenAI(api_key="unused", base_url=base, max_retries=0)
    ms = c.models.list().data
    check("/v1/models lists the run's model with its adapter version",
          len(ms) == 1 and ms[0].id == model and isinstance(getattr(ms[0], "adapter_version", None), int), ms)
    check("/v1/models/{id} retrieves it", c.models.retrieve(model).id == model)
    try:
        c.models.retrieve("no-such-model")
        check("an unknown model is 404", False, "no error")
    except openai.NotFoundError as e:
        check("an unknown model is 404 with the error body", e.status_code == 404 and error_shape(e.body), e.body)

    # Completions: streamed chunks concatenate to the answer.
    for temp, seed in ((0, None), (1.0, 1234)):
        kw = dict(model=model, prompt="100*48 = ", max_tokens=24, temperature=temp)
        if seed is not None:
            kw["seed"] = seed
        a = c.completions.create(**kw)
        b = stream_text(c.completions.create(stream=True, **kw), False)
        check(f"completions (temperature {temp}): the streamed chunks concatenate to the answer",
              a.choices[0].text == b[0] and a.choices[0].finish_reason == b[1] and a.choices[0].text,
              (a.choices[0].text, b))
        if seed is not None:
            a2 = c.completions.create(**kw)
            check("completions: the same seed gives the same sample", a2.choices[0].text == a.choices[0].text)

    # Chat without tools, greedy: the same answer streamed and not; usage agrees.
    msgs = [{"role": "user", "content": "100*48"}]
    a = c.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=96)
    b = stream_text(c.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=96, stream=True,
                                              stream_options={"include_usage": True}), True)
    check("chat: the streamed chunks concatenate to the answer",
          a.choices[0].message.content == b[0] and a.choices[0].finish_reason == b[1], (a.choices[0].message, b))
    check("chat: the stream's usage chunk equals the answer's usage",
          b[3] is not None and b[3].completion_tokens == a.usage.completion_tokens and
          b[3].prompt_tokens == a.usage.prompt_tokens, (b[3], a.usage))
    json.dump({"messages": msgs, "content": a.choices[0].message.content,
               "adapter_version": a.model_extra["pail"]["adapter_version"]}, open(out + "/greedy.json", "w"))

    # Stop strings: cut before the first one, finish "stop", streamed the same.
    full = a.choices[0].message.content
    stop = full[5:8]
    for stream in (False, True):
        r = c.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=96, stop=[stop],
                                      stream=stream)
        text, finish = (stream_text(r, True)[:2] if stream else (r.choices[0].message.content, r.choices[0].finish_reason))
        check(f"chat: stop={stop!r} cuts the answer before it ({'streamed' if stream else 'whole'})",
              text == full[:full.index(stop)] and finish == "stop", (text, finish, full))

    # Tools: the model's call comes back as tool_calls; its result goes back in; the answer follows.
    r = c.chat.completions.create(model=model, messages=msgs, tools=TOOLS, temperature=0, max_tokens=96)
    m = r.choices[0].message
    calls = m.tool_calls or []
    check("chat with tools: the call is returned as tool_calls (finish_reason tool_calls)",
          r.choices[0].finish_reason == "tool_calls" and len(calls) == 1 and calls[0].function.name == "mul" and
          json.loads(calls[0].function.arguments) == {"a": 100, "b": 48} and calls[0].id and not m.content, m)
    s = stream_text(c.chat.completions.create(model=model, messages=msgs, tools=TOOLS, temperature=0, max_tokens=96,
                                              stream=True), True)
    check("chat with tools, streamed: the same call in the deltas",
          s[1] == "tool_calls" and s[2] == [(calls[0].function.name, calls[0].function.arguments)] if calls else False, s)
    if calls:
        hist = msgs + [m.model_dump(exclude_none=True)] + [
            {"role": "tool", "tool_call_id": calls[0].id, "content": "4800"}]
        r2 = c.chat.completions.create(model=model, messages=hist, tools=TOOLS, temperature=0, max_tokens=96)
        check("chat with tools: after the tool's result the model answers it (round trip)",
              r2.choices[0].message.content == "4800" and not r2.choices[0].message.tool_calls, r2.choices[0].message)

    # A stream the client drops: the endpoint keeps serving.
    with c.chat.completions.with_streaming_response.create(model=model, messages=msgs, max_tokens=200,
                                                          stream=True) as resp:
        next(resp.iter_lines())
    r = c.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=96)
    check("a client that drops its stream midway leaves the endpoint serving",
          r.choices[0].message.content == full, r.choices[0].message.content)

    # Every malformed request class: 400 (or 404) with OpenAI's error body.
    cases = [
        ("a body that is not JSON", "/chat/completions", b"{not json", 400, None),
        ("a JSON body that is not an object", "/chat/completions", b"[1, 2]", 400, None),
        ("no model", "/chat/completions", {"messages": msgs}, 400, "model"),
        ("an unknown model", "/chat/completions", {"model": "gpt-4o", "messages": msgs}, 404, "model"),
        ("no messages", "/chat/completions", {"model": model}, 400, "messages"),
        ("empty messages", "/chat/completions", {"model": model, "messages": []}, 400, "messages"),
        ("a message without a role", "/chat/completions", {"model": model, "messages": [{"content": "x"}]}, 400,
         "messages"),
        ("an image content part", "/chat/completions", {"model": model, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:,"}}]}]}, 400, "messages"),
        ("temperature 3", "/chat/completions", {"model": model, "messages": msgs, "temperature": 3}, 400,
         "temperature"),
        ("top_p 0", "/chat/completions", {"model": model, "messages": msgs, "top_p": 0}, 400, "top_p"),
        ("max_tokens 0", "/chat/completions", {"model": model, "messages": msgs, "max_tokens": 0}, 400, "max_tokens"),
        ("n 2", "/chat/completions", {"model": model, "messages": msgs, "n": 2}, 400, "n"),
        ("five stop strings", "/chat/completions", {"model": model, "messages": msgs, "stop": list("abcde")}, 400,
         "stop"),
        ("stream not a boolean", "/chat/completions", {"model": model, "messages": msgs, "stream": "yes"}, 400,
         "stream"),
        ("tools not functions", "/chat/completions", {"model": model, "messages": msgs, "tools": [{"type": "x"}]},
         400, "tools"),
        ("tool_choice required", "/chat/completions", {"model": model, "messages": msgs, "tools": TOOLS,
                                                       "tool_choice": "required"}, 400, "tool_choice"),
        ("a completion without a prompt", "/completions", {"model": model}, 400, "prompt"),
        ("a completion with echo", "/completions", {"model": model, "prompt": "x", "echo": True}, 400, "echo"),
        ("episode wait out of range", "/episodes", {"wait": 1000}, 400, "wait"),
        ("a reward for no episode", "/episodes/nope.1/reward", {"reward": 1}, 404, None),
        ("an unknown URL", "/nothing/here", {}, 404, None),
    ]
    for name, path, body, status, param in cases:
        st, j = raw(base, "POST", path, body)
        check(f"{name}: {status} with the error body" + (f" (param {param})" if param else ""),
              st == status and error_shape(j) and (param is None or j["error"]["param"] == param), (st, j))
    st, j = raw(base, "POST", "/completions", {"model": model, "prompt": "x"}, {"X-Pail-Episode": "w/0.0"})
    check("X-Pail-Episode on /v1/completions: 400 (episodes are chats)", st == 400 and error_shape(j), (st, j))
    st, j = raw(base, "POST", "/chat/completions", {"model": model, "messages": msgs}, {"X-Pail-Episode": "w/99.0"})
    check("an unknown X-Pail-Episode: 404 episode_not_found",
          st == 404 and error_shape(j) and j["error"]["code"] == "episode_not_found", (st, j))
    st, j = raw(base, "GET", "/chat/completions")
    check("GET on a POST route: 405 with the error body", st == 405 and error_shape(j), (st, j))
    return 0


def episodes(base, model, n, out):
    n = int(n)
    c = openai.OpenAI(api_key="unused", base_url=base, max_retries=0, timeout=600)

    # Protocol errors of an episode first (one episode, played by hand).
    ep = calc_agent.claim(base)
    hdr = {"X-Pail-Episode": ep["id"]}
    st, j = raw(base, "POST", f"/episodes/{ep['id']}/reward", {"reward": 1})
    check("a reward before the episode's first turn: 400 episode_has_no_turn",
          st == 400 and error_shape(j) and j["error"]["code"] == "episode_has_no_turn", (st, j))
    msgs = [{"role": "user", "content": ep["row"]["prompt"]}]
    r = c.chat.completions.create(model=model, messages=msgs, tools=TOOLS, extra_headers=hdr)
    check("an episode's turn names its episode and adapter version",
          r.model_extra["pail"]["episode"] == ep["id"] and r.model_extra["pail"]["turn"] == 1 and
          r.model_extra["pail"]["adapter_version"] == ep["adapter_version"], r.model_extra)
    m = r.choices[0].message.model_dump(exclude_none=True)
    st, j = raw(base, "POST", "/chat/completions", {"model": model, "messages": msgs + [m]}, hdr)
    check("a history with no new message: 400 no_new_messages",
          st == 400 and error_shape(j) and j["error"]["code"] == "no_new_messages", (st, j))
    bad = [{"role": "user", "content": "999*999"}, m, {"role": "tool", "content": "1"}]
    st, j = raw(base, "POST", "/chat/completions", {"model": model, "messages": bad}, hdr)
    check("a history edited in its opening: 400 history_mismatch (a segment must keep the opening)",
          st == 400 and error_shape(j) and j["error"]["code"] == "history_mismatch" and "opening" in
          j["error"]["message"], (st, j))
    # An edit after the opening: the episode goes on in a second segment, sharing its reward.
    edited = msgs + [{"role": "assistant", "content": "let me think"}, {"role": "user", "content": "go on"}]
    r2 = c.chat.completions.create(model=model, messages=edited, tools=TOOLS, extra_headers=hdr)
    check("a history edited after the opening: a new segment of the episode (pail.segment 2, turn 2)",
          r2.model_extra["pail"]["segment"] == 2 and r2.model_extra["pail"]["turn"] == 2, r2.model_extra)
    m2 = r2.choices[0].message.model_dump(exclude_none=True)
    r3 = c.chat.completions.create(model=model, messages=edited + [m2, {"role": "user", "content": "and?"}],
                                   tools=TOOLS, extra_headers=hdr)
    check("...and goes on from the edited history (turn 3, still segment 2, the last turn)",
          r3.model_extra["pail"]["segment"] == 2 and r3.model_extra["pail"]["turn"] == 3 and
          r3.model_extra["pail"]["final"], r3.model_extra)
    for bad in ({"reward": "1"}, {"reward": 1, "components": {"x": "y"}}, {}):
        st, j = raw(base, "POST", f"/episodes/{ep['id']}/reward", bad)
        check(f"a malformed reward {json.dumps(bad)}: 400", st == 400 and error_shape(j), (st, j))
    st, j = raw(base, "POST", f"/episodes/{ep['id']}/reward", {"reward": 0.5})
    check("the reward ends the episode", st == 200 and j.get("status") == "ended", (st, j))
    st, j = raw(base, "POST", "/chat/completions", {"model": model, "messages": msgs + [m, {"role": "tool",
                                                    "content": "1"}]}, hdr)
    check("a request for an ended episode: 404", st == 404 and error_shape(j), (st, j))

    # An episode's turn ends at the request's stop strings, as an agent's stop sequences (ReAct) want.
    ep = calc_agent.claim(base)
    stops = ["<", "{", "a", "e"]
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": ep["row"]["prompt"]}],
                                  stop=stops, extra_headers={"X-Pail-Episode": ep["id"]})
    text = r.choices[0].message.content or ""
    check("an episode's turn ends at the request's stop strings (cut before them, finish_reason stop)",
          r.choices[0].finish_reason == "stop" and not any(x in text for x in stops) and
          r.usage.completion_tokens <= 12, (r.choices[0], r.usage))
    raw(base, "POST", f"/episodes/{ep['id']}/reward", {"reward": 0})

    # n agents at once, each one episode.
    t0 = time.time()
    with cf.ThreadPoolExecutor(n) as ex:
        res = list(ex.map(lambda _: calc_agent.play(c, base, model, calc_agent.claim(base)), range(n)))
    secs = time.time() - t0
    groups = {}
    for e in res:
        groups.setdefault(e["group"], []).append(e)
    check(f"{n} concurrent agents each played an episode to its reward", len(res) == n and
          len({e["id"] for e in res}) == n)
    check("the episodes of a group share its row and adapter version",
          all(len({json.dumps(e["row"]) for e in g}) == 1 and len({e["version"] for e in g}) == 1
              for g in groups.values()), groups)
    check("tool calls round-trip in the episodes (calls answered, then the answer)",
          sum(e["calls"] for e in res) >= n // 2 and sum(e["reward"] for e in res) > 0,
          [(e["calls"], e["reward"]) for e in res][:8])
    toks = sum(e["tokens"] for e in res)
    print(f"  endpoint: {n} concurrent agents, {n} episodes in {secs:.2f} s: {n / secs:.1f} episodes/s, "
          f"{toks / secs:.0f} generated tokens/s, {sum(e['turns'] for e in res) / n:.2f} turns an episode", flush=True)
    json.dump({"episodes": res, "seconds": secs}, open(out + "/episodes.json", "w"))
    return 0


def timeout(base, model, secs):
    """An episode left with no request past --episode-timeout fails: its id is gone."""
    c = openai.OpenAI(api_key="unused", base_url=base, max_retries=0)
    ep = calc_agent.claim(base)
    msgs = [{"role": "user", "content": ep["row"]["prompt"]}]
    r = c.chat.completions.create(model=model, messages=msgs, tools=TOOLS, extra_headers={"X-Pail-Episode": ep["id"]})
    time.sleep(float(secs) + 1.5)
    m = r.choices[0].message.model_dump(exclude_none=True)
    st, j = raw(base, "POST", "/chat/completions", {"model": model, "messages": msgs + [m, {"role": "tool",
                "content": "1"}]}, {"X-Pail-Episode": ep["id"]})
    check(f"an episode idle past --episode-timeout {secs} s is gone (404 episode_not_found)",
          st == 404 and error_shape(j) and j["error"]["code"] == "episode_not_found", (st, j))
    st, j = raw(base, "POST", f"/episodes/{ep['id']}/reward", {"reward": 1})
    check("...and its reward is refused (404)", st == 404 and error_shape(j), (st, j))
    return 0


def tls(base, model, ca, key):
    global VERIFY
    VERIFY = ca
    bad = openai.OpenAI(api_key="wrong-key-0123456789", base_url=base, max_retries=0,
                        http_client=httpx2.Client(verify=ca))
    try:
        bad.models.list()
        check("TLS endpoint: a wrong bearer key is refused", False, "no error")
    except openai.AuthenticationError as e:
        check("TLS endpoint: a wrong bearer key is 401 with the error body", e.status_code == 401 and
              error_shape(e.body), e.body)
    c = openai.OpenAI(api_key=key, base_url=base, max_retries=0, http_client=httpx2.Client(verify=ca))
    check("TLS endpoint: the right key lists the model", c.models.list().data[0].id == model)
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "100*48"}], temperature=0,
                                  max_tokens=16, stream=True)
    check("TLS endpoint: a streamed chat answers", len(stream_text(r, True)[0]) > 0)
    ep = calc_agent.claim(base, key, VERIFY)
    res = calc_agent.play(c, base, model, ep, key, VERIFY)
    check("TLS endpoint: an episode is played to its reward", res["turns"] >= 1, res)
    try:
        httpx2.get(base.replace("https://", "http://") + "/models", timeout=5)
        check("TLS endpoint: plain HTTP gets no answer", False, "answered")
    except httpx2.HTTPError:
        check("TLS endpoint: plain HTTP gets no answer", True)
    return 0


def run_done(base, model):
    """A worker whose batch is 4 episodes, its trainer 1 step: the agent plays the first
    batch (its last reward posted while a claim for the next batch waits), holds the next
    batch's episode E while the trainer ends the run, checks what new work gets, then plays
    E to its reward. The worker exits by itself after it (the caller checks)."""
    c = openai.OpenAI(api_key="unused", base_url=base, max_retries=0, timeout=60)
    eps = [calc_agent.claim(base) for _ in range(4)]
    check("the first batch: 4 episodes of adapter v0", len({e["id"] for e in eps}) == 4 and
          all(e["adapter_version"] == 0 for e in eps), eps)
    for e in eps:
        st, j = raw(base, "POST", "/chat/completions", {"model": model, "max_tokens": 4, "messages": [
            {"role": "user", "content": e["row"]["prompt"]}]}, {"X-Pail-Episode": e["id"]})
        check("...a turn of each", st == 200, (st, j))
    with cf.ThreadPoolExecutor(1) as ex:  # a claim waits for the next batch while the last reward goes in
        nxt = ex.submit(calc_agent.claim, base)
        time.sleep(0.5)
        for e in eps:
            raw(base, "POST", f"/episodes/{e['id']}/reward", {"reward": 1})
        E = nxt.result()
    h = {}
    for _ in range(600):  # the trainer takes its step and ends the run; the worker looks every 2 s
        h = httpx2.get(base.rsplit("/v1", 1)[0] + "/health", timeout=10).json()
        if h["status"] == "finishing":
            break
        time.sleep(0.1)
    check("the run is done with an episode open: /health says finishing, the episode still counted",
          h["status"] == "finishing" and h["episodes_open"] == 1, h)
    st, j = raw(base, "POST", "/episodes", {"wait": 5})
    check("...a new claim: 503 run_done, saying the run is done", st == 503 and error_shape(j) and
          j["error"]["code"] == "run_done" and "the run is done" in j["error"]["message"], (st, j))
    try:
        c.chat.completions.create(model=model, messages=[{"role": "user", "content": "1*2"}], max_tokens=4)
        check("...an ad-hoc chat: 503 run_done", False, "answered")
    except openai.APIStatusError as e:
        check("...an ad-hoc chat: 503 run_done", e.status_code == 503 and e.body["code"] == "run_done", e.body)
    st, j = raw(base, "POST", "/chat/completions", {"model": model, "max_tokens": 4, "messages": [
        {"role": "user", "content": E["row"]["prompt"]}]}, {"X-Pail-Episode": E["id"]})
    check("...the open episode's turn is still answered", st == 200, (st, j))
    st, j = raw(base, "POST", f"/episodes/{E['id']}/reward", {"reward": 1})
    check("...and its reward taken", st == 200 and j.get("status") == "ended", (st, j))
    return 0


def tls_streams(base, model, ca, key, n, threads):
    """n short streamed chats over TLS from `threads` keep-alive clients at once: every
    stream complete. (A TLS bufferevent defers its write-drained callbacks; one left
    over from an earlier chunk once ended a reply while its last chunk was still
    queued, and that stream was cut.)"""
    n, threads = int(n), int(threads)
    def run(t):
        c = openai.OpenAI(api_key=key, base_url=base, max_retries=0, http_client=httpx2.Client(verify=ca, timeout=20))
        bad = []
        for i in range(t, n, threads):
            try:
                r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "%d*48" % (100 + i)}],
                                              temperature=1.0, max_tokens=1 + i % 8, stream=True)
                text, finish = stream_text(r, True)[:2]
                if finish is None:
                    bad.append((i, "no finish_reason"))
            except Exception as e:  # noqa: BLE001 (a cut stream is an APIConnectionError)
                bad.append((i, repr(e.__cause__ or e)[:200]))
        c.close()
        return bad
    t0 = time.time()
    with cf.ThreadPoolExecutor(threads) as ex:
        bad = [b for r in ex.map(run, range(threads)) for b in r]
    check(f"TLS endpoint: {n} streamed chats from {threads} clients at once are all complete "
          f"({time.time() - t0:.1f} s)", not bad, bad[:3])
    return 0


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"api": api, "episodes": episodes, "timeout": timeout, "tls": tls, "tls_streams": tls_streams,
     "run_done": run_done}[cmd](*args)
    sys.exit(1 if FAILED else 0)
