#!/usr/bin/env python3
"""The limits of grpo-rollout --serve (doc/environments.md, "The endpoint's limits"):
what no client can do to it. Raw sockets and httpx2; every refusal must be OpenAI's
JSON error body.

  serve_limits.py http BASE MODEL          a 9 MiB body (and chunked), a false Content-Length, -1,
                                           DELETE, PUT, FOO, HEAD, 5,000 reward components: JSON
                                           errors, the connection left usable or closed cleanly
                                           (no reset)
  serve_limits.py flood BASE MODEL CAP HDR_S N  N idle sockets against --serve-max-connections CAP:
                                           /health, a chat and an episode still answer; at most
                                           CAP stay open; all close within HDR_S (+ slack)
  serve_limits.py handshake HOST PORT HDR_S N  N sockets that never start the TLS handshake are
                                           closed by --serve-header-timeout HDR_S
Prints one line per check; exits 1 when one fails.
"""
import json
import os
import select
import socket
import sys
import time

import httpx2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../validation/agent"))
import calc_agent  # noqa: E402

FAILED = []


def check(name, cond, detail=""):
    print(("  ok    " if cond else "  FAIL  ") + name + ("" if cond else ": " + str(detail)[:400]), flush=True)
    if not cond:
        FAILED.append(name)


def error_shape(j):
    e = j.get("error") if isinstance(j, dict) else None
    return isinstance(e, dict) and set(e) == {"message", "type", "param", "code"} and isinstance(e["message"], str)


def host_port(base):
    hp = base.split("://", 1)[1].split("/", 1)[0]
    h, p = hp.rsplit(":", 1)
    return h, int(p)


def raw_exchange(base, head, body=b"", wait=10):
    """Sends head + body on one socket (all of it, as a client that writes its whole body
    before reading) and reads the reply. (status, JSON or text, how it ended)."""
    s = socket.create_connection(host_port(base), timeout=wait)
    how, data = "closed", b""
    try:
        s.sendall(head + body)
        while True:
            try:
                d = s.recv(65536)
            except socket.timeout:
                how = "open"
                break
            if not d:
                break
            data += d
            if b"\r\n\r\n" in data:
                h, _, rest = data.partition(b"\r\n\r\n")
                cl = [int(x.split(b":")[1]) for x in h.split(b"\r\n") if x.lower().startswith(b"content-length:")]
                if cl and len(rest) >= cl[0]:
                    how = "complete"
                    break
    except (ConnectionResetError, BrokenPipeError):
        how = "reset"
    finally:
        s.close()
    h, _, rest = data.partition(b"\r\n\r\n")
    try:
        st = int(h.split(b" ")[1])
    except (IndexError, ValueError):
        return None, data[:200], how
    try:
        return st, json.loads(rest), how
    except ValueError:
        return st, rest[:200], how


def http(base, model):
    path = "/" + base.split("://", 1)[1].split("/", 1)[1]
    big = b'{"model": "%s", "messages": [{"role": "user", "content": "' % model.encode() + b"x" * (9 << 20) + b'"}]}'
    head = b"POST %s/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (
        path.encode(), len(big))
    st, j, how = raw_exchange(base, head, big, wait=30)
    check("a 9 MiB body: 413 with OpenAI's error body, read to its end (no reset)",
          st == 413 and error_shape(j) and how != "reset", (st, j, how))
    head = b"POST %s/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n" % path.encode()
    st, j, how = raw_exchange(base, head, b'{"model": "x"}', wait=10)
    check("a false Content-Length of 99,999,999,999: 413 with OpenAI's error body at once",
          st == 413 and error_shape(j) and "8388608" in j["error"]["message"], (st, j, how))
    # The same 9 MiB chunked: the chunk that takes it over the limit ends the request the HTTP server reads.
    chunks = b"".join(b"%x\r\n" % len(big[i:i + (1 << 20)]) + big[i:i + (1 << 20)] + b"\r\n"
                      for i in range(0, len(big), 1 << 20)) + b"0\r\n\r\n"
    head = b"POST %s/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" % path.encode()
    st, j, how = raw_exchange(base, head, chunks, wait=30)
    check("a 9 MiB chunked body: 413 with OpenAI's error body, read to its end (no reset)",
          st == 413 and error_shape(j) and j["error"]["code"] == "request_too_large" and how != "reset", (st, j, how))
    small = json.dumps({"model": model, "messages": [{"role": "user", "content": "1*2"}], "max_tokens": 2}).encode()
    st, j, how = raw_exchange(base, head, b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        10, small[:10], len(small) - 10, small[10:]), wait=60)
    check("...a small chunked body is still read (200)", st == 200 and j["object"] == "chat.completion", (st, j, how))
    head = b"POST %s/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n" % path.encode()
    st, j, how = raw_exchange(base, head, b'{"model": "x"}', wait=10)
    check("Content-Length: -1: 400 with OpenAI's error body (invalid_content_length), not an HTML page",
          st == 400 and error_shape(j) and j["error"]["code"] == "invalid_content_length", (st, j, how))
    st, j, how = raw_exchange(base, b"GET /health\r\n", wait=10)
    check("an HTTP/0.9 request line (GET /health, no version): 400 with OpenAI's error body, not an HTML page",
          st == 400 and error_shape(j) and "HTTP/1.1" in j["error"]["message"], (st, j, how))
    st, j, how = raw_exchange(base, b"POST %s/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                              b"zz\r\n{}\r\n0\r\n\r\n" % path.encode(), wait=10)
    check("a chunk size that is not hex: 400 with OpenAI's error body", st == 400 and error_shape(j), (st, j, how))
    st, j, how = raw_exchange(base, b"FOO %s/models HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode(), wait=10)
    check("an unknown method (FOO): 405 with OpenAI's error body, not libevent's HTML 501",
          st == 405 and error_shape(j), (st, j, how))
    # HEAD: the head a GET would get, its Content-Length, no body: the next reply on the connection reads clean.
    hp = host_port(base)
    sk = socket.create_connection(hp, timeout=10)
    sk.sendall(b"HEAD %s/models HTTP/1.1\r\nHost: x\r\n\r\nHEAD %s/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"
               b"GET %s/models HTTP/1.1\r\nHost: x\r\n\r\n" % (path.encode(), path.encode(), path.encode()))
    data = b""
    try:
        while data.count(b"HTTP/1.1 ") < 3 or not data.endswith(b"}"):
            d = sk.recv(65536)
            if not d:
                break
            data += d
    except socket.timeout:
        pass
    sk.close()
    parts = data.split(b"HTTP/1.1 ")[1:]
    lens = [int(x.split(b":")[1]) for p in parts for x in p.split(b"\r\n") if x.lower().startswith(b"content-length:")]
    bodies = [p.split(b"\r\n\r\n", 1)[1] for p in parts]
    check("HEAD /v1/models then HEAD on a POST route, then GET on one keep-alive connection: 200 and 405 heads with "
          "Content-Length and no body, then the GET's whole answer",
          [p[:3] for p in parts] == [b"200", b"405", b"200"] and bodies[:2] == [b"", b""] and len(lens) == 3 and
          lens[0] == lens[2] == len(bodies[2]) and json.loads(bodies[2])["object"] == "list", data[:600])
    for method in ("DELETE", "PUT", "PATCH"):
        r = httpx2.request(method, base + "/chat/completions", content=b"{}", timeout=30)
        try:
            j = r.json()
        except ValueError:
            j = r.text
        check(f"{method} /v1/chat/completions: 405 with OpenAI's error body", r.status_code == 405 and
              error_shape(j), (r.status_code, j))
    r = httpx2.get(base.rsplit("/v1", 1)[0] + "/health", timeout=10)
    check("...and the endpoint still answers", r.status_code == 200, r.status_code)

    # An episode with one turn, then a reward with more components than a shard holds.
    ep = calc_agent.claim(base)
    r = httpx2.post(base + "/chat/completions", json={"model": model, "messages": [
        {"role": "user", "content": ep["row"]["prompt"]}], "max_tokens": 4}, headers={"X-Pail-Episode": ep["id"]},
        timeout=120)
    check("an episode's first turn", r.status_code == 200, r.text[:200])
    comps = {"c%d" % i: 0.5 for i in range(5000)}
    r = httpx2.post(base + "/episodes/%s/reward" % ep["id"], json={"reward": 1, "components": comps}, timeout=30)
    j = r.json()
    check("5,000 reward components: 400 naming the limit (32), not cut silently",
          r.status_code == 400 and error_shape(j) and j["error"]["param"] == "components" and
          "32" in j["error"]["message"], (r.status_code, j))
    r = httpx2.post(base + "/episodes/%s/reward" % ep["id"], json={"reward": 1, "components": {"c%d" % i: 1 for i in range(32)}},
                    timeout=30)
    check("...32 components are taken (the episode ends)", r.status_code == 200, r.text[:200])
    return 0


def open_idle(addr, n):
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(addr)
        socks.append(s)
    return socks


def closed_by_server(socks, gone):
    """Adds to the set gone the indices of socks the server has closed (EOF or reset); its size."""
    for i, s in enumerate(socks):
        if i in gone:
            continue
        try:
            r, _, _ = select.select([s], [], [], 0)
        except (OSError, ValueError):
            gone.add(i)
            continue
        if r:
            try:
                if s.recv(1) == b"":
                    gone.add(i)
            except (ConnectionResetError, BrokenPipeError):
                gone.add(i)
            except BlockingIOError:
                pass
    return len(gone)


def flood(base, model, cap, hdr_s, n):
    cap, hdr_s, n = int(cap), float(hdr_s), int(n)
    addr = host_port(base)
    t0 = time.time()
    socks = open_idle(addr, n)
    time.sleep(1.0)
    c = httpx2.Client(timeout=10)
    try:
        r = c.get(base.rsplit("/v1", 1)[0] + "/health")
        ok = r.status_code == 200 and r.json()["status"] == "ok"
    except httpx2.HTTPError as e:
        ok, r = False, e
    check(f"{n} idle connections against a cap of {cap}: /health still answers", ok, r)
    try:
        r = c.post(base + "/chat/completions", json={"model": model,
                   "messages": [{"role": "user", "content": "100*48"}], "max_tokens": 4, "temperature": 0})
        ok = r.status_code == 200
    except httpx2.HTTPError as e:
        ok, r = False, e
    check("...an ad-hoc chat still answers", ok, r)
    try:
        ep = calc_agent.claim(base)
        r = c.post(base + "/chat/completions", json={"model": model, "messages": [
            {"role": "user", "content": ep["row"]["prompt"]}], "max_tokens": 4}, headers={"X-Pail-Episode": ep["id"]})
        r2 = c.post(base + "/episodes/%s/reward" % ep["id"], json={"reward": 1})
        ok = r.status_code == 200 and r2.status_code == 200
    except Exception as e:  # noqa: BLE001 (any failure is the check's)
        ok, r2 = False, e
    check("...an episode is still played to its reward (the worker's own work goes on)", ok, r2)
    c.close()
    gone = set()
    left = n - closed_by_server(socks, gone)
    check(f"...at most {cap} of them stay open (the oldest idle ones closed to make room)", left <= cap + 2,
          f"{left} open")
    while time.time() - t0 < hdr_s + 3 and closed_by_server(socks, gone) < n:
        time.sleep(0.2)
    check(f"...and the rest are closed within --serve-header-timeout {hdr_s:g} s (+ slack)", len(gone) >= n,
          f"{n - len(gone)} of {n} still open after {time.time() - t0:.1f} s")
    for s in socks:
        s.close()
    return 0


def handshake(host, port, hdr_s, n):
    hdr_s, n = float(hdr_s), int(n)
    t0 = time.time()
    socks = open_idle((host, int(port)), n)
    gone = set()
    while time.time() - t0 < hdr_s + 3 and closed_by_server(socks, gone) < n:
        time.sleep(0.2)
    check(f"{n} TLS connections that never start the handshake are closed within --serve-header-timeout "
          f"{hdr_s:g} s (+ slack)", len(gone) >= n, f"{n - len(gone)} of {n} still open after {time.time() - t0:.1f} s")
    for s in socks:
        s.close()
    return 0


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"http": http, "flood": flood, "handshake": handshake}[cmd](*args)
    sys.exit(1 if FAILED else 0)
