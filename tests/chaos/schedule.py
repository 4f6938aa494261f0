"""The seeded fault schedule of one round (doc/reliability.md lists each fault).
make_schedule(rng, backend, has_tmpfs, faketime) -> [{"at": seconds, "kind": ..., ...}],
sorted by time; it depends on the round's seed only."""

PROC_ROLES = ["trainer", "w1", "w2", "eval"]
WINDOW = 36.0  # seconds of the round in which faults land


def make_schedule(rng, backend, has_tmpfs, faketime):
    def role():
        return rng.choice(PROC_ROLES)

    menu = [
        (6, lambda: {"kind": "kill9", "role": role()}),
        (3, lambda: {"kind": "kill9", "role": "trainer"}),
        (3, lambda: {"kind": "term", "role": role()}),
        (2, lambda: {"kind": "stop", "role": role(), "secs": round(rng.uniform(6, 12), 1)}),
        (1, lambda: {"kind": "gc"}),
        (1, lambda: {"kind": "twin", "secs": round(rng.uniform(3, 10), 1)}),
        (1, lambda: {"kind": "dup", "secs": round(rng.uniform(4, 12), 1)}),
        (1, lambda: {"kind": "corrupt", "what": "shard", "how": rng.choice(["flip", "truncate"])}),
        (1, lambda: {"kind": "corrupt", "what": "adapter", "how": rng.choice(["flip", "truncate"])}),
        (1, lambda: {"kind": "corrupt", "what": "progress", "how": "junk"}),
        (1, lambda: {"kind": "resume_state"}),
        (1, lambda: {"kind": "resume_runjson"}),
        (1, lambda: {"kind": "resume_adapter", "how": rng.choice(["flip", "truncate"])}),
    ]
    if has_tmpfs:  # under the file:// bucket, or under the relay's multipart spool
        menu.append((2, lambda: {"kind": "disk_full", "secs": round(rng.uniform(2, 6), 1)}))
    if backend == "s3":
        menu += [
            (5, lambda: {"kind": "relay_restart", "secs": round(rng.uniform(0.2, 3), 2)}),
            (1, lambda: {"kind": "relay_hup"}),
            (1, lambda: {"kind": "relay_term", "secs": round(rng.uniform(0.2, 2), 2)}),
            (1, lambda: {"kind": "relay_stop", "secs": round(rng.uniform(3, 10), 1)}),
            (2, lambda: {"kind": "upstream", "mode": rng.choice(["refuse", "blackhole"]),
                         "secs": round(rng.uniform(2, 8), 1)}),
            (6, lambda: net()),
        ]
        if faketime:
            menu.append((1, lambda: {"kind": "skew", "offset": rng.choice(["+20m", "-20m", "+2h"]),
                                     "secs": round(rng.uniform(5, 10), 1)}))

    def net():
        mode = rng.choice(["latency", "bandwidth", "reset", "blackhole"])
        arg = {"latency": round(rng.uniform(0.05, 0.3), 3), "bandwidth": rng.randrange(20000, 200000),
               "reset": rng.randrange(500, 100000), "blackhole": 0}[mode]
        # A black hole sometimes outlasts the clients' 30 s stall timeout (store/http.c).
        secs = rng.uniform(31, 45) if mode == "blackhole" and rng.random() < 0.4 else rng.uniform(2, 10)
        return {"kind": "net", "role": role(), "mode": mode, "arg": arg, "secs": round(secs, 1)}

    total = sum(w for w, _ in menu)
    n = rng.randint(5, 9)
    out = []
    for _ in range(n):
        x = rng.uniform(0, total)
        for w, make in menu:
            if x < w:
                f = make()
                break
            x -= w
        f["at"] = round(rng.uniform(1.0, WINDOW), 2)
        out.append(f)
    return sorted(out, key=lambda f: f["at"])
