"""The invariants checked after every chaos round (doc/reliability.md).
Each failed check appends one line to rnd.findings; rnd.checks counts them all."""
import glob
import hashlib
import json
import os
import re
import subprocess

import h5py
import numpy as np

ADAPTER = re.compile(r"^adapters/v(\d{8})\.h5$")
STATE = re.compile(r"^trainer/state-v(\d{8})\.h5$")
SHARD = re.compile(r"^rollouts/v(\d{8})/([A-Za-z0-9_.-]+)-(\d{6})\.h5$")
BAD_LOG = re.compile(r"Traceback|AddressSanitizer|Segmentation fault|Assertion .* failed|double free|core dumped|"
                     r"runtime error:")


def write_archived(dst, data, sha):
    """An object as file:// stores it: the bytes, and the metadata in a sidecar."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    side = os.path.join(os.path.dirname(dst), ".pail-meta." + os.path.basename(dst))
    with open(side, "w") as f:
        json.dump({"etag": sha[:16], "meta": {"pail-sha256": sha}}, f)
    os.rename(tmp, dst)


def tensors(data):
    import io
    out = {}
    with h5py.File(io.BytesIO(data), "r") as h:
        h.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        attrs = dict(h.attrs)
    return out, attrs


def check(rnd, ok, msg):
    rnd.checks += 1
    if not ok:
        rnd.findings.append(msg)
    return ok


def archive_keys(rnd, prefix):
    base = os.path.join(rnd.archive, prefix)
    out = []
    for dp, _, fs in os.walk(base):
        for f in fs:
            if not f.startswith(".pail") and not f.endswith(".tmp"):
                out.append(os.path.relpath(os.path.join(dp, f), rnd.archive))
    return sorted(out)


def check_round(rnd):
    # The store as it ends: archive what is there (first-seen copies stay).
    for prefix in ("adapters/", "trainer/", "eval/", "rollouts/"):
        try:
            keys = rnd.list_keys(prefix)
        except Exception as e:
            check(rnd, False, f"listing {prefix} at the end: {e}")
            return
        for k in keys:
            dst = os.path.join(rnd.archive, k)
            if os.path.exists(dst):
                continue
            try:
                data, sha = rnd.get_obj(k)
            except Exception:
                continue  # deleted since the listing (gc)
            verifies = sha is not None and hashlib.sha256(data).hexdigest() == sha
            if k in rnd.corrupted or not (ADAPTER.match(k) or STATE.match(k) or SHARD.match(k) or k.startswith("eval/v")):
                continue
            if check(rnd, verifies, f"{k}: does not verify against its pail-sha256 ({sha}) and the campaign did "
                                    f"not damage it"):
                write_archived(dst, data, sha)
                rnd.note_landed(k)
    # Also every object still in the store that the campaign did not damage verifies.
    for k in rnd.list_keys(""):
        if k in rnd.corrupted or not (ADAPTER.match(k) or STATE.match(k) or SHARD.match(k)):
            continue
        try:
            data, sha = rnd.get_obj(k)
        except Exception:
            continue
        check(rnd, sha == hashlib.sha256(data).hexdigest(), f"{k} in the store does not verify")

    # 1. versions v0..vN once each, adapters and states, all decode.
    av = sorted(int(ADAPTER.match(k).group(1)) for k in archive_keys(rnd, "adapters/") if ADAPTER.match(k))
    sv = sorted(int(STATE.match(k).group(1)) for k in archive_keys(rnd, "trainer/") if STATE.match(k))
    corrupted_av = {int(ADAPTER.match(k).group(1)) for k in rnd.corrupted if ADAPTER.match(k)}
    check(rnd, av and av == list(range(len(av))) or sorted(set(av) | corrupted_av) == list(range(max(av + [0]) + 1)),
          f"adapter versions are not v0..vN once each: {av}")
    check(rnd, sv == list(range(len(sv))), f"state versions are not v0..vN once each: {sv}")
    if not av or not sv:
        return
    states = {}
    for v in sv:
        data = open(os.path.join(rnd.archive, f"trainer/state-v{v:08d}.h5"), "rb").read()
        try:
            t, attrs = tensors(data)
            states[v] = (t, attrs)
            check(rnd, attrs.get("format") in (b"pail.trainer_state", "pail.trainer_state"),
                  f"state v{v}: format {attrs.get('format')}")
            fin = all(np.isfinite(x).all() for n, x in t.items() if n.startswith(("optimizer/", "base_model"))
                      and x.dtype.kind == "f")
            check(rnd, fin, f"state v{v}: non-finite values")
        except Exception as e:
            check(rnd, False, f"trainer/state-v{v:08d}.h5 verifies but does not decode: {e}")
    for v in av:
        try:
            t, _ = tensors(open(os.path.join(rnd.archive, f"adapters/v{v:08d}.h5"), "rb").read())
            check(rnd, all(np.isfinite(x).all() for x in t.values() if x.dtype.kind == "f"),
                  f"adapter v{v}: non-finite")
        except Exception as e:
            check(rnd, False, f"adapters/v{v:08d}.h5 verifies but does not decode: {e}")
    newest = max(states)
    # 2. the state chain: record_parent back to v0.
    chain, v = [], newest
    while v >= 0 and v in states:
        chain.append(v)
        p = int(states[v][1].get("record_parent", -2))
        if not check(rnd, p < v and p >= -1, f"state v{v}: record_parent {p}"):
            break
        v = p
    check(rnd, chain and chain[-1] == 0, f"the state chain from v{newest} does not reach v0: {chain}")
    chain.reverse()
    # Along the chain the step never goes back, and each state's step is its adapter's.
    csteps = [int(states[v][1].get("step", -1)) for v in chain]
    check(rnd, csteps == sorted(csteps), f"the state chain's steps go back: {csteps[:20]}")
    for v in chain:
        path = os.path.join(rnd.archive, f"adapters/v{v:08d}.h5")
        if os.path.exists(path):
            with h5py.File(path, "r") as h:
                a_step = int(h.attrs.get("step", -1))
            check(rnd, a_step == int(states[v][1].get("step", -2)),
                  f"adapters/v{v:08d}.h5 says step {a_step}, its state {states[v][1].get('step')}")
    steps = [int(states[v][1].get("step", 0)) if "step" in states[v][1] else None for v in chain]
    # 3. the record: no group twice; every shard consumed, dropped, rejected or left over.
    used = {}
    dup = []
    seq = []
    for v in chain:
        t = states[v][0]
        if "record/keys" not in t:
            continue
        for k, s, f, c in zip(t["record/keys"], t["record/steps"], t["record/first"], t["record/count"]):
            k = k.decode() if isinstance(k, bytes) else str(k)
            for g in range(int(f), int(f) + int(c)):
                if (k, g) in used:
                    dup.append((k, g))
                used[(k, g)] = int(s)
                seq.append((int(s), k, g))
    check(rnd, not dup, f"groups consumed twice: {dup[:5]}")
    rsteps = [s for s, _, _ in seq]
    check(rnd, rsteps == sorted(rsteps), "the record's step numbers go backwards")
    final_version = newest
    final = states[newest][1]
    tracked = set()
    t = states[newest][0]
    for k in t.get("feed/keys", []):
        tracked.add(k.decode() if isinstance(k, bytes) else str(k))
    try:
        rejected = {k[len("trainer/rejected/"):-5] for k in rnd.list_keys("trainer/rejected/")}
    except Exception:
        rejected = set()
    consumed = dropped = rej = left = after = 0
    lost = []
    # The trainer counts every shard behind its window that landed before its
    # last re-listing (late_listed_unix, whole seconds); one landing after it
    # (the run was stopping) is nobody's to count.
    listed_unix = int(final.get("late_listed_unix", -1))
    for k in archive_keys(rnd, "rollouts/"):
        m = SHARD.match(k)
        if not m:
            continue
        try:
            with h5py.File(os.path.join(rnd.archive, k), "r") as h:
                P = int(h["prompt_index"].shape[0])
        except Exception as e:
            check(rnd, False, f"{k}: archived shard does not decode: {e}")
            continue
        n = sum(1 for g in range(P) if (k, g) in used)
        if n == P:
            consumed += 1
        elif k in rejected:
            rej += 1
        elif int(m.group(1)) < final_version - rnd.camp_stale:
            if listed_unix >= 0 and rnd.landed.get(k, 0) >= listed_unix:
                after += 1
            else:
                dropped += 1
        elif k in tracked or int(m.group(1)) >= final_version - rnd.camp_stale:
            left += 1
        else:
            lost.append(k)
    for k in rnd.corrupted:
        if SHARD.match(k):
            ing = any((k, g) in used for g in range(64))
            check(rnd, ing or k in rejected, f"{k} was damaged, and is neither consumed before nor rejected")
    check(rnd, not lost, f"shards lost (not consumed, dropped, rejected or pending): {lost[:5]}")
    cd = int(final.get("dropped_shards", -1))
    check(rnd, dropped <= cd, f"{dropped} shards fell out of the window unused but the trainer counts {cd} dropped")
    rnd.shard_figures = dict(consumed=consumed, dropped=dropped, rejected=rej, left_over=left, counted_dropped=cd,
                             landed_after_last_listing=after)
    # 4. the final adapter equals an offline replay of the record.
    replay(rnd, newest)
    # 5. eval results parse, once per version (create-only keys).
    for k in archive_keys(rnd, "eval/"):
        try:
            json.load(open(os.path.join(rnd.archive, k)))
            check(rnd, True, "")
        except Exception as e:
            check(rnd, False, f"{k}: not JSON: {e}")
    # 6. logs: no credential, no crash, refusals one line.
    secrets = [sk for _, sk in rnd.camp_keys] + [rnd.camp_upstream_secret]
    for path in glob.glob(os.path.join(rnd.dir, "*.log")):
        text = open(path, errors="replace").read()
        name = os.path.basename(path)
        check(rnd, not any(s in text for s in secrets), f"{name}: a secret key appears in the log")
        m = BAD_LOG.search(text)
        check(rnd, not m, f"{name}: {m.group(0) if m else ''} in the log")
    for line in rnd.refusals:
        check(rnd, "\n" not in line and len(line) < 2000, f"refusal not one line: {line[:200]}")
    # 7. the relay's memory stays bounded.
    if rnd.relay_rss:
        check(rnd, max(rnd.relay_rss) < 256 * 1024, f"relay RSS reached {max(rnd.relay_rss) // 1024} MiB")


def replay(rnd, newest):
    src = os.path.join(rnd.dir, "replay-src")
    out = os.path.join(rnd.dir, "replay-run")
    import shutil
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(rnd.archive, src)
    argv = [f"{rnd.camp_bin}/grpo-train", "--model", rnd.camp.model, "--steps", str(rnd.camp_steps)] + \
        rnd.camp_train + ["--run", "file://" + out, "--replay", "file://" + src, "--replay-record"]
    r = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600)
    open(os.path.join(rnd.dir, "replay.log"), "w").write(r.stderr)
    if not check(rnd, r.returncode == 0, f"replay of the record failed (exit {r.returncode}): "
                                         f"{(r.stderr.strip().splitlines() or [''])[-1][:300]}"):
        return
    rv = sorted(glob.glob(out + "/adapters/v*.h5"))
    live, _ = tensors(open(os.path.join(rnd.archive, f"adapters/v{newest:08d}.h5"), "rb").read())
    mine, _ = tensors(open(rv[-1], "rb").read())
    keys = [k for k in live if live[k].dtype.kind == "f"]
    same = set(keys) == {k for k in mine if mine[k].dtype.kind == "f"} and \
        all(np.array_equal(live[k], mine[k]) for k in keys)
    diff = max((float(np.max(np.abs(live[k] - mine[k]))) for k in keys if k in mine and
                live[k].shape == mine[k].shape), default=-1)
    check(rnd, same, f"the final adapter v{newest} differs from the offline replay of the record "
                     f"({os.path.basename(rv[-1])}; max |diff| {diff:g})")
