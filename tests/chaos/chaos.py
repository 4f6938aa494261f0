"""pail's fault campaign (doc/reliability.md). Each round runs a small real loop
(a trainer, workers w1 and w2, an eval worker; on s3 rounds a grpo-relay in
front of moto, every role reaching it through its own fault proxy and the relay
reaching moto through another) on a tiny random model, injects a seeded
schedule of faults, lets the run finish, then checks the invariants.

  chaos.py --rounds N --seed S [--round R] [--backends file,s3] [--work DIR]

Same seed -> same schedule (printed); `--seed S --round R` replays one round.
Exit 0 when every invariant held in every round."""
import argparse
import glob
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from faultproxy import ProxyHost  # noqa: E402
from schedule import make_schedule, PROC_ROLES  # noqa: E402
import invariants  # noqa: E402

BIN = os.path.join(ROOT, os.environ.get("BIN", "bin"))
KEYS = {"operator": ("pail-operator", "operator-secret-0123456789abcdef"),
        "trainer": ("pail-trainer", "trainer-secret-0123456789abcdef"),
        "rollout": ("pail-rollout", "rollout-secret-0123456789abcdef"),
        "reader": ("pail-reader", "reader-secret-0123456789abcdef")}
UPSTREAM = ("chaos-upstream-key", "chaos-upstream-secret-0123456789")
PART_BYTES = 48 << 10  # s3 rounds: clients' multipart part size (PAIL_S3_PART_BYTES): states and adapters go in parts
STEPS = 100000  # never reached: a round ends with grpo-ctl stop once the faults are over
SETTLE = 120     # seconds after the last fault for the trainer to publish twice (else: stuck)
STALE = 2
TRAIN = ["--group-size", "4", "--groups-per-step", "2", "--lr", "5e-3", "--lora-rank", "4", "--seed", "0",
         "--max-staleness", str(STALE), "--metrics", "", "--max-outage", "300"]
ROLL = ["--group-size", "4", "--groups-per-shard", "2", "--max-new-tokens", "6", "--batch-size", "8",
        "--reward", "format", "--format-regex", "[0-9]", "--max-outage", "300"]


def log(msg):
    print(msg, flush=True)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, secs):
    import socket
    end = time.monotonic() + secs
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Role:
    """One supervised process: restarted after it exits until the round ends."""

    def __init__(self, rnd, name, argv, env):
        self.rnd, self.name, self.argv, self.env = rnd, name, argv, env
        self.proc = None
        self.logpath = os.path.join(rnd.dir, f"{name}.log")
        self.starts = 0
        self.expect_exit = None     # why the next exit is expected (a fault's name)
        self.restart_at = None
        self.stopped_until = None
        self.done = False           # finished its work (trainer: exit 0 at --steps)
        self.keep_running = True
        self.exits = []             # (rc, expected-by, last line)

    def start(self, extra_env=None, argv=None):
        env = dict(self.env)
        env.update(extra_env or {})
        f = open(self.logpath, "a")
        f.write(f"--- start {self.starts} at {time.monotonic() - self.rnd.t0:.2f} s\n")
        f.flush()
        self.proc = subprocess.Popen(argv or self.argv, stdout=f, stderr=f, env=env, cwd=self.rnd.dir,
                                     preexec_fn=lambda: os.nice(0))
        f.close()
        self.starts += 1
        self.started_at = time.monotonic()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def last_line(self):
        try:
            lines = [l for l in open(self.logpath, errors="replace").read().splitlines() if l.strip()]
            return lines[-1] if lines else ""
        except OSError:
            return ""


class Round:
    def __init__(self, camp, index, seed, backend):
        self.camp, self.index, self.seed, self.backend = camp, index, seed, backend
        self.rng = random.Random(seed)
        self.dir = os.path.join(camp.work, f"r{index:04d}-{backend}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.archive = os.path.join(self.dir, "archive")  # every shard as first seen, for the replay
        os.makedirs(self.archive)
        self.corrupted = set()      # keys the campaign damaged on purpose
        self.landed = {}            # shard key -> when it landed in the store (unix s), as first archived
        self.findings = []          # invariant or behaviour failures (one line each)
        self.checks = 0
        self.recovery = {"relay_restart": [], "trainer_kill": []}
        self.faults = {}
        self.relay_rss = []
        self.mount = None
        self.t0 = time.monotonic()
        self.camp_stale, self.camp_keys, self.camp_upstream_secret = STALE, list(KEYS.values()), UPSTREAM[1]
        self.camp_bin, self.camp_steps, self.camp_train = BIN, STEPS, TRAIN
        self.watch = []

    # --- setup -------------------------------------------------------------
    def setup(self):
        c = self.camp
        base_env = dict(os.environ, OMP_NUM_THREADS="1", PAIL_LOG="info")
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            base_env.pop(k, None)
        self.env = {}
        if self.backend == "file":
            self.bucket = os.path.join(self.dir, "bucket")
            os.makedirs(self.bucket)
            # A small tmpfs under the bucket so that a full disk can be injected.
            if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=384m", "tmpfs", self.bucket],
                                                    capture_output=True).returncode == 0:
                self.mount = self.bucket
            self.url = "file://" + self.bucket
            self.args = {r: ["--run", self.url] for r in ("trainer", "rollout", "operator")}
            for r in ("trainer", "rollout", "operator"):
                self.env[r] = dict(base_env)
        else:
            self.prefix = f"round-{self.index:04d}-{self.seed}"
            # The relay's multipart spool on a small tmpfs (a full-spool fault), and
            # parts small enough that every trainer state and adapter goes through it.
            self.spool = os.path.join(self.dir, "spool")
            os.makedirs(self.spool)
            if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", self.spool],
                                                    capture_output=True).returncode == 0:
                self.mount = self.spool
            self.proxies = {}
            self.up_proxy = c.host.proxy(c.moto_port, "upstream")
            self.relay_port = free_port()
            self.start_relay()
            self.url = "s3://pail/runs/r1"
            self.env, self.args = {}, {}
            for r in ("trainer", "rollout", "operator"):
                e = dict(base_env, AWS_ACCESS_KEY_ID=KEYS[r][0], AWS_SECRET_ACCESS_KEY=KEYS[r][1],
                         AWS_REGION="us-east-1", PAIL_S3_PART_BYTES=str(PART_BYTES))
                self.env[r] = e
            for name in PROC_ROLES + ["twin", "dup", "ctl"]:
                self.proxies[name] = c.host.proxy(self.relay_port, name)

    def start_relay(self):
        c = self.camp
        env = dict(os.environ, AWS_ACCESS_KEY_ID=UPSTREAM[0], AWS_SECRET_ACCESS_KEY=UPSTREAM[1],
                   AWS_REGION="us-east-1")
        f = open(os.path.join(self.dir, "relay.log"), "a")
        acc = open(os.path.join(self.dir, "relay-access.log"), "a")
        self.relay = subprocess.Popen(
            [f"{BIN}/grpo-relay", "--listen", f"127.0.0.1:{self.relay_port}", "--upstream",
             f"s3://chaos/{self.prefix}", "--endpoint", f"http://127.0.0.1:{self.up_proxy.port}",
             "--keys", c.keys, "--cert", c.tls + "/server.pem", "--key", c.tls + "/server.key",
             "--poll-interval", "0.5", "--max-outage", "300", "--spool", self.spool], stdout=acc, stderr=f, env=env)
        f.close()
        acc.close()
        if not wait_port(self.relay_port, 20):
            self.findings.append("relay did not start: " + open(os.path.join(self.dir, "relay.log")).read()[-300:])

    def client(self, role, proxy):
        """argv pieces and env for a client of role `role` through proxy `proxy`."""
        if self.backend == "file":
            return ["--run", self.url], self.env[role]
        p = self.proxies[proxy]
        return ["--run", self.url, "--endpoint", f"https://127.0.0.1:{p.port}", "--ca-bundle",
                self.camp.tls + "/ca.pem"], self.env[role]

    def make_roles(self):
        M = self.camp.model
        self.roles = {}
        a, e = self.client("trainer", "trainer")
        self.trainer_argv = [f"{BIN}/grpo-train", "--model", M, "--steps", str(STEPS)] + TRAIN + a
        self.roles["trainer"] = Role(self, "trainer", self.trainer_argv, e)
        for i, w in enumerate(("w1", "w2")):
            a, e = self.client("rollout", w)
            argv = [f"{BIN}/grpo-rollout", "--model", M, "--dataset", self.camp.dataset, "--worker-id", w,
                    "--seed", str(i + 1)] + ROLL + a
            self.roles[w] = Role(self, w, argv, e)
        a, e = self.client("rollout", "eval")
        argv = [f"{BIN}/grpo-rollout", "--model", M, "--eval", "--eval-dataset", self.camp.evalset, "--worker-id",
                "ev", "--max-new-tokens", "4", "--max-outage", "300"] + a
        self.roles["eval"] = Role(self, "eval", argv, e)

    # --- the store, as the campaign sees it (not through the proxies) --------
    def list_keys(self, prefix):
        if self.backend == "file":
            out = []
            base = os.path.join(self.bucket, prefix)
            for dp, _, fs in os.walk(base):
                for f in fs:
                    if f.startswith(".pail"):
                        continue
                    out.append(os.path.relpath(os.path.join(dp, f), self.bucket))
            return sorted(out)
        r = self.camp.s3.list_objects_v2
        keys, token = [], None
        while True:
            kw = {"Bucket": "chaos", "Prefix": f"{self.prefix}/runs/r1/{prefix}"}
            if token:
                kw["ContinuationToken"] = token
            resp = r(**kw)
            keys += [o["Key"][len(f"{self.prefix}/runs/r1/"):] for o in resp.get("Contents", [])]
            if not resp.get("IsTruncated"):
                return sorted(keys)
            token = resp["NextContinuationToken"]

    def get_obj(self, key):
        """(bytes, sha256 metadata or None) of a key, straight from the store."""
        if self.backend == "file":
            path = os.path.join(self.bucket, key)
            data = open(path, "rb").read()
            meta = None
            try:
                meta = json.loads(os.getxattr(path, "user.pail.meta"))
            except OSError:
                side = os.path.join(os.path.dirname(path), ".pail-meta." + os.path.basename(path))
                if os.path.exists(side):
                    meta = json.load(open(side))
            return data, (meta or {}).get("meta", {}).get("pail-sha256")
        o = self.camp.s3.get_object(Bucket="chaos", Key=f"{self.prefix}/runs/r1/{key}")
        return o["Body"].read(), o.get("Metadata", {}).get("pail-sha256")

    def landed_time(self, key):
        """When an object landed: its file's mtime, or its S3 LastModified (unix seconds)."""
        if self.backend == "file":
            return os.stat(os.path.join(self.bucket, key)).st_mtime
        o = self.camp.s3.head_object(Bucket="chaos", Key=f"{self.prefix}/runs/r1/{key}")
        return o["LastModified"].timestamp()

    def note_landed(self, key):
        if invariants.SHARD.match(key):
            try:
                self.landed[key] = self.landed_time(key)
            except Exception:
                pass  # deleted since (gc): landed long before the end

    def put_raw(self, key, data, sha):
        """Overwrites an object behind pail's back, keeping its sha256 metadata (damage)."""
        if self.backend == "file":
            path = os.path.join(self.bucket, key)
            st = os.stat(path)
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(data)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        else:
            self.camp.s3.put_object(Bucket="chaos", Key=f"{self.prefix}/runs/r1/{key}", Body=data,
                                    Metadata={"pail-sha256": sha} if sha else {})

    def mirror(self):
        """Copies every shard not yet archived (as first seen) into the archive."""
        try:
            keys = [k for k in self.list_keys("") if invariants.SHARD.match(k) or invariants.ADAPTER.match(k) or
                    invariants.STATE.match(k) or k.startswith("eval/v")]
        except Exception:
            return
        for k in keys:
            dst = os.path.join(self.archive, k)
            if os.path.exists(dst) or k in self.corrupted:
                continue
            try:
                data, sha = self.get_obj(k)
            except Exception:
                continue
            if sha is None or hashlib.sha256(data).hexdigest() != sha:
                continue  # mid-publish (file://: metadata not yet there) or damaged: next pass
            invariants.write_archived(dst, data, sha)
            self.note_landed(k)

    # --- faults ----------------------------------------------------------------
    def fault(self, f):
        kind = f["kind"]
        key = ":".join([kind] + [str(f[k]) for k in ("role", "mode", "what") if k in f])  # the class counted
        if kind == "disk_full" and self.backend == "s3":
            key += ":spool"
        self.faults[key] = self.faults.get(key, 0) + 1
        role = self.roles.get(f.get("role"))
        if kind in ("kill9", "term"):
            if not role.alive():
                self.faults[key] -= 1
                return
            role.expect_exit = kind
            role.signal(signal.SIGKILL if kind == "kill9" else signal.SIGTERM)
            if role.name == "trainer" and kind == "kill9":
                self.pending_trainer_kill = time.monotonic()
        elif kind == "stop":
            if not role.alive():
                self.faults[key] -= 1
                return
            role.signal(signal.SIGSTOP)
            role.stopped_until = time.monotonic() + f["secs"]
        elif kind == "relay_restart":
            self.relay.kill()
            self.relay.wait()
            self.relay_down_until = time.monotonic() + f["secs"]
        elif kind == "relay_term":  # a clean stop: in-flight requests end, then back on the same port
            self.relay.send_signal(signal.SIGCONT)  # a frozen relay (relay_stop) first thaws
            self.relay.terminate()
            try:
                self.relay.wait(30)
            except subprocess.TimeoutExpired:
                self.findings.append("grpo-relay did not exit within 30 s of SIGTERM")
                self.relay.kill()
                self.relay.wait()
            self.checks += 1
            self.relay_down_until = time.monotonic() + f["secs"]
        elif kind == "relay_stop":  # frozen: connections stay open, nothing answers
            self.relay.send_signal(signal.SIGSTOP)
            self.later(f["secs"], lambda: self.relay.send_signal(signal.SIGCONT))
        elif kind == "relay_hup":
            self.relay.send_signal(signal.SIGHUP)
        elif kind == "upstream":
            self.up_proxy.set(f["mode"])
            self.later(f["secs"], lambda: self.up_proxy.set("ok"))
        elif kind == "net":
            p = self.proxies[f["role"]]
            p.set(f["mode"], f.get("arg", 0))
            self.later(f["secs"], lambda p=p: p.set("ok"))
        elif kind == "gc":
            # The archive first: the replay needs every state and shard gc deletes.
            self.mirror()
            # In the background: the loop must go on (a relay restart in progress
            # is finished by the loop; gc waits for it like any client).
            a, e = self.client("operator", "ctl")
            self.extra("gc", [f"{BIN}/grpo-ctl", "gc"] + a[1:2] + a[2:] + ["--keep-versions", "8"], e, 120)
        elif kind == "twin":
            a, e = self.client("trainer", "twin")
            argv = [f"{BIN}/grpo-train", "--model", self.camp.model, "--steps", str(STEPS)] + TRAIN + a
            self.extra("twin", argv, e, f["secs"])
        elif kind == "dup":
            a, e = self.client("rollout", "dup")
            argv = list(self.roles["w1"].argv)
            i = argv.index("--run")
            argv = argv[:i] + a
            self.extra("dup-w1", argv, e, f["secs"])
        elif kind == "corrupt":
            self.corrupt(f)
        elif kind == "resume_adapter":  # damaged while the trainer is down: the restart must go on
            tr = self.roles["trainer"]
            tr.expect_exit = "kill9"
            tr.signal(signal.SIGKILL)
            if tr.proc:
                tr.proc.wait()
            self.pending_trainer_kill = time.monotonic()
            self.corrupt({"what": "adapter", "how": f["how"]})
        elif kind == "disk_full":
            self.disk_full(f["secs"])
        elif kind == "skew":
            a, e = self.client("rollout", "dup")
            argv = list(self.roles["w2"].argv)
            argv = argv[:argv.index("--run")] + a
            argv[argv.index("--worker-id") + 1] = "skewed"
            e = dict(e, LD_PRELOAD=self.camp.faketime, FAKETIME=f["offset"], FAKETIME_DONT_RESET="1")
            self.extra("skewed", argv, e, f["secs"])

    def note_ctl(self, what, r):
        with open(os.path.join(self.dir, f"{what}.log"), "a") as fh:
            fh.write(f"--- exit {r.returncode}\n{r.stdout}{r.stderr}")
        if r.returncode != 0:
            self.findings.append(f"grpo-ctl {what} during the run exited {r.returncode}: "
                                 f"{(r.stderr.strip().splitlines() or [''])[-1][:200]}")

    def later(self, secs, fn, moot=None):
        """Runs fn in secs; dropped sooner once moot() is true (a helper process that ended by itself)."""
        self.timers.append((time.monotonic() + secs, fn, moot))

    def extra(self, name, argv, env, secs):
        # Each extra its own log: two twins a second apart appended to one file, and the
        # first one's refusal was judged by the second one's last line (an info line).
        n = sum(1 for x in os.listdir(self.dir) if x == f"{name}.log" or x.startswith(f"{name}."))
        path = os.path.join(self.dir, f"{name}.log" if n == 0 else f"{name}.{n}.log")
        f = open(path, "a")
        p = subprocess.Popen(argv, stdout=f, stderr=f, env=env, cwd=self.dir)
        f.close()
        p.pail_log = path
        self.extras.append((name, p))
        # The kill is moot once the process ends: a pending one would hold the round open (a 120 s
        # gc timer kept a fast trainer publishing until the bucket's tmpfs was full).
        self.later(secs, lambda: p.poll() is None and p.kill(), moot=lambda: p.poll() is not None)

    def corrupt(self, f):
        what = f["what"]
        if what == "shard":
            keys = [k for k in self.list_keys("rollouts/") if k not in self.corrupted]
            if not keys:
                return
            k = keys[-1]
            self.mirror()  # the good copy first: the trainer may have read it already
        elif what == "adapter":
            keys = self.list_keys("adapters/")
            keys = [k for k in keys if k.endswith(".h5")]
            if not keys:
                return
            k = keys[-1]
        elif what == "progress":
            k = "trainer/progress.json"
            try:
                self.put_raw(k, b'{"step": 3, "ver', None)
            except Exception:
                pass
            return
        else:
            return
        try:
            data, sha = self.get_obj(k)
        except Exception:
            return
        if not data:
            return
        self.corrupted.add(k)
        if f["how"] == "truncate":
            bad = data[: len(data) // 2]
        else:
            i = self.rng.randrange(len(data))
            bad = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
        self.put_raw(k, bad, sha)

    def disk_full(self, secs):
        """Fills the tmpfs under the file:// bucket, or under the relay's multipart spool, for secs."""
        if not self.mount:
            return
        path = os.path.join(self.mount, ".pail-chaos-filler")  # .pail*: never listed
        subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", "count=512"], capture_output=True)  # to the brim
        self.later(secs, lambda: os.path.exists(path) and os.remove(path))

    # --- resume faults: damage then restart, expect a one-line refusal ----------
    def resume_refusal(self, what):
        """Kills the trainer, damages its newest state or run.json, restarts it and
        expects a one-line refusal naming the key; then restores the object."""
        tr = self.roles["trainer"]
        tr.expect_exit = "kill9"
        tr.signal(signal.SIGKILL)
        if tr.proc:
            tr.proc.wait()
        # A twin trainer still running (its kill timer cannot fire while the refused start
        # below blocks the loop) would publish past the damaged state and the start would not
        # refuse: it goes first (seed 11 round 33).
        for name, p in self.extras:
            if name == "twin" and p.poll() is None:
                p.kill()
                p.wait()
        if self.relay_down_until:  # the refused start below runs in the loop: the relay must be up
            self.start_relay()
            self.relay_down_until = None
        elif self.backend == "s3":
            self.relay.send_signal(signal.SIGCONT)  # and not frozen (relay_stop)
        if what == "state":
            states = [k for k in self.list_keys("trainer/") if k.startswith("trainer/state-v")]
            if not states:
                return
            key = states[-1]
        else:
            key = "run.json"
        data, sha = self.get_obj(key)
        bad = data[: len(data) // 2] if what == "runjson" else data[:100] + b"garbage" + data[107:]
        self.put_raw(key, bad, sha)
        if self.backend == "s3":  # damaged behind the relay: a copy it cached (it verified) would hide it
            self.relay.send_signal(signal.SIGCONT)
            self.relay.kill()
            self.relay.wait()
            self.start_relay()
        self.faults[f"resume_{what}"] = self.faults.get(f"resume_{what}", 0) + 1
        r = subprocess.run(self.trainer_argv, capture_output=True, text=True, env=tr.env, cwd=self.dir, timeout=300)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        last = lines[-1] if lines else ""
        self.checks += 1
        pat = {"state": r"state-v\d{8}\.h5.*sha256.*--resume-from", "runjson": r"run\.json"}[what]
        if r.returncode != 1 or not re.search(pat, last):
            self.findings.append(f"damaged {key} before a resume: exit {r.returncode}, last line: {last[:300]}")
        self.refusals.append(last)
        self.put_raw(key, data, sha)  # restored: the run goes on

    # --- the round ---------------------------------------------------------------
    def run(self):
        self.setup()
        self.make_roles()
        self.timers, self.extras, self.refusals = [], [], []
        self.pending_trainer_kill = None
        self.relay_down_until = None
        sched = make_schedule(self.rng, self.backend, bool(self.mount), self.camp.faketime)
        log(f"round {self.index} seed {self.seed} backend {self.backend}: " +
            ", ".join(f"{x['at']:.1f}s {x['kind']}" + (f":{x['role']}" if 'role' in x else "") +
                      (f":{x['mode']}" if 'mode' in x else "") + (f":{x['what']}" if 'what' in x else "")
                      for x in sched))
        for r in self.roles.values():
            r.start(self.skew_env(r))
        deadline = time.monotonic() + self.camp.round_limit
        self.settle, self.stopping = None, False
        sched = list(sched)
        last_mirror = 0
        stuck = False
        while True:
            now = time.monotonic()
            el = now - self.t0
            if now > deadline:
                stuck = True
                break
            tr = self.roles["trainer"]
            if tr.done:
                break
            if not sched and not self.timers and not self.stopping and self.relay_down_until is None and not any(
                    r.stopped_until for r in self.roles.values()):
                if self.settle is None:
                    self.settle = (now, self.n_adapters())
                elif self.n_adapters() >= self.settle[1] + 2:
                    self.stop_run()
                elif now - self.settle[0] > SETTLE:
                    stuck = True
                    break
            while sched and sched[0]["at"] <= el:
                x = sched.pop(0)
                if x["kind"] in ("resume_state", "resume_runjson"):
                    self.resume_refusal(x["kind"][7:])
                    tr.restart_at = time.monotonic()
                else:
                    self.fault(x)
            self.timers = [t for t in self.timers if not (t[2] and t[2]())]
            for t in [t for t in self.timers if t[0] <= now]:
                self.timers.remove(t)
                t[1]()
            if self.relay_down_until and now >= self.relay_down_until:
                self.start_relay()
                self.relay_down_until = None
                self.relay_up_at = time.monotonic()
                self.measure_relay_recovery()
            self.supervise(now)
            if self.backend == "s3" and self.relay.poll() is None:
                self.sample_rss()
            if now - last_mirror > 0.3:
                self.mirror()
                self.recoveries(now)
                last_mirror = now
            time.sleep(0.05)
        self.finish(stuck)

    def kill_all(self):
        """On the way out (a finished round, SIGTERM, ^C): no process of the round outlives it."""
        procs = [r.proc for r in getattr(self, "roles", {}).values() if r.proc] + \
            [p for _, p in getattr(self, "extras", [])] + ([self.relay] if getattr(self, "relay", None) else [])
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except ProcessLookupError:
                    pass
                p.wait()
        if self.mount:
            subprocess.run(["umount", "-l", self.mount], capture_output=True)
            self.mount = None

    def n_adapters(self):
        try:
            return len([k for k in self.list_keys("adapters/") if k.endswith(".h5")])
        except Exception:
            return -1

    def stop_run(self):
        """grpo-ctl stop: the trainer publishes what it trained and exits 0, the workers exit 0."""
        self.stopping = True
        a, e = self.client("operator", "ctl")
        r = subprocess.run([f"{BIN}/grpo-ctl", "stop", a[1]] + a[2:] + ["--reason", "chaos round over"],
                           capture_output=True, text=True, env=e, timeout=300)
        self.note_ctl("stop", r)

    def skew_env(self, role):
        return {}

    def supervise(self, now):
        for r in self.roles.values():
            if r.stopped_until and now >= r.stopped_until:
                r.signal(signal.SIGCONT)
                r.stopped_until = None
            if r.proc is not None and r.proc.poll() is not None and r.restart_at is None and not r.done:
                rc = r.proc.returncode
                exp = r.expect_exit
                r.exits.append((rc, exp, r.last_line()))
                r.expect_exit = None
                if rc == 0 and self.stopping:
                    r.done = True
                    continue
                if exp is None and not (rc == 1 and "already published with different content" in r.last_line()):
                    self.findings.append(f"{r.name} exited {rc} unasked: {r.last_line()[:300]}")
                r.restart_at = now + self.rng.uniform(0.1, 1.0)
            if r.restart_at is not None and now >= r.restart_at and not r.done:
                r.restart_at = None
                r.start(self.skew_env(r))
                if r.name == "trainer" and self.pending_trainer_kill:
                    self.trainer_restarted(self.pending_trainer_kill)
                    self.pending_trainer_kill = None
        for name, p in list(self.extras):
            if p.poll() is not None:
                self.extras.remove((name, p))
                self.extra_exited(name, p.returncode, p.pail_log)

    # What an extra process must end with: killed by the campaign at the end
    # of its time, or a clean exit, or the one-line refusal its fault calls for.
    EXTRA_OK = {"twin": r"already published with different content|another writer|control/stop",
                "dup-w1": r"already published with different content|another (worker|writer)|same worker id",
                "skewed": r"RequestTimeTooSkewed: x-amz-date \d{8}T\d{6}Z is more than 15 minutes from the "
                          r"relay's clock"}

    def extra_exited(self, name, rc, path):
        lines = [l for l in open(path, errors="replace").read().splitlines() if l.strip()]
        last = lines[-1] if lines else ""
        self.checks += 1
        if name == "gc":  # must finish, within 120 s
            if rc != 0:
                self.findings.append(f"grpo-ctl gc during the run: exit {rc}: {last[:300]}")
            return
        if rc in (0, -signal.SIGKILL) or (rc == 1 and re.search(self.EXTRA_OK[name], last)):
            if rc == 1:
                self.refusals.append(last)
            return
        self.findings.append(f"{name} (fault) ended with exit {rc}: {last[:300]}")

    def trainer_restarted(self, killed_at):
        """Recovery after a trainer kill: kill -> next adapter version in the store."""
        try:
            n0 = len([k for k in self.list_keys("adapters/") if k.endswith(".h5")])
        except Exception:
            return
        self.watch.append(("trainer_kill", killed_at, n0))

    def measure_relay_recovery(self):
        """Recovery after a relay restart: back up -> the next object any role writes."""
        try:
            n0 = len(self.list_keys(""))
        except Exception:
            return
        self.watch.append(("relay_restart", self.relay_up_at, n0))

    def recoveries(self, now):
        for w in list(self.watch):
            kind, t, n0 = w
            try:
                keys = self.list_keys("adapters/" if kind == "trainer_kill" else "")
            except Exception:
                continue
            n = len([k for k in keys if k.endswith(".h5")]) if kind == "trainer_kill" else len(keys)
            if n > n0:
                self.recovery[kind].append(now - t)
                self.watch.remove(w)

    def sample_rss(self):
        try:
            for line in open(f"/proc/{self.relay.pid}/status"):
                if line.startswith("VmRSS:"):
                    self.relay_rss.append(int(line.split()[1]))
        except OSError:
            pass

    def finish(self, stuck):
        for r in self.roles.values():
            if r.stopped_until:
                r.signal(signal.SIGCONT)
        for name, p in self.extras:
            if p.poll() is None:
                p.kill()
                p.wait()
        if stuck:
            self.findings.append(f"stuck: no 2 new versions within {SETTLE} s of the last fault, or the round past "
                                 f"{self.camp.round_limit} s (trainer's last line: "
                                 f"{self.roles['trainer'].last_line()[:200]})")
        # Workers: SIGTERM, and they must exit within 60 s (no wait without a deadline).
        for r in self.roles.values():
            if r.name != "trainer":
                r.signal(signal.SIGTERM)
        end = time.monotonic() + 60
        for r in self.roles.values():
            if r.proc is None:
                continue
            try:
                r.proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.findings.append(f"{r.name} did not exit within 60 s of SIGTERM")
                r.proc.kill()
                r.proc.wait()
            rc = r.proc.returncode
            if r.restart_at is not None:  # killed by a fault just before the end, not restarted yet: expected
                continue
            if r.name != "trainer" and rc not in (0,):
                self.findings.append(f"{r.name}: exit {rc} after SIGTERM: {r.last_line()[:200]}")
        self.checks += 4
        self.mirror()
        if self.backend == "s3":
            self.relay.terminate()
            try:
                self.relay.wait(10)
            except subprocess.TimeoutExpired:
                self.relay.kill()
        try:
            invariants.check_round(self)
        finally:
            self.kill_all()


class Campaign:
    def __init__(self, a):
        self.work = a.work or tempfile.mkdtemp(prefix="pail-chaos-")
        os.makedirs(self.work, exist_ok=True)
        self.round_limit = a.round_limit
        self.host = ProxyHost()
        self.model = os.path.join(self.work, "model")
        if not os.path.exists(os.path.join(self.model, "config.json")):
            subprocess.run([f"{BIN}/grpo-ctl", "init-model", "--out", self.model, "--shape", "tiny", "--vocab",
                            "257", "--tokenizer", f"{ROOT}/data/tokenizers/bytes", "--dtype", "f32"],
                           check=True, capture_output=True)
        rows = open(f"{ROOT}/data/addition/train.jsonl").read().splitlines()
        self.dataset = os.path.join(self.work, "train.jsonl")
        open(self.dataset, "w").write("\n".join(rows[:64]) + "\n")
        self.evalset = os.path.join(self.work, "eval.jsonl")
        open(self.evalset, "w").write("\n".join(rows[64:68]) + "\n")
        self.faketime = next(iter(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")), None)
        self.moto = None
        self.s3 = None

    def start_s3(self):
        if self.s3:
            return
        import boto3
        from botocore.config import Config
        py = os.path.dirname(sys.executable)
        self.moto_port = free_port()
        self.moto = subprocess.Popen([f"{py}/moto_server", "-H", "127.0.0.1", "-p", str(self.moto_port)],
                                     stdout=open(os.path.join(self.work, "moto.log"), "a"), stderr=subprocess.STDOUT)
        if not wait_port(self.moto_port, 60):
            raise SystemExit("moto did not start")
        self.s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.moto_port}", region_name="us-east-1",
                               aws_access_key_id=UPSTREAM[0], aws_secret_access_key=UPSTREAM[1],
                               config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 10}))
        self.s3.create_bucket(Bucket="chaos")
        self.tls = os.path.join(self.work, "tls")
        os.makedirs(self.tls, exist_ok=True)
        subprocess.run(["bash", "-c", f'source "{ROOT}/tests/integration/lib_relay.sh"; relay_tls "{self.tls}"'],
                       check=True)
        self.keys = os.path.join(self.work, "keys")
        with open(self.keys, "w") as f:
            f.write("# ACCESS_KEY_ID SECRET ROLE [PREFIX]\n")
            for role, (ak, sk) in KEYS.items():
                f.write(f"{ak} {sk} {role}{'' if role == 'operator' else ' runs/r1'}\n")

    def close(self):
        rnd = getattr(self, "current", None)
        if rnd is not None:
            rnd.kill_all()
        if self.moto:
            self.moto.terminate()
            self.moto.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--round", type=int, default=None, help="run only this round (replays it)")
    ap.add_argument("--backends", default="file,s3")
    ap.add_argument("--work", default=None)
    ap.add_argument("--round-limit", type=float, default=400, help="seconds before a round counts as stuck")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # -> the finally below: nothing left running
    camp = Campaign(a)
    backends = a.backends.split(",")
    log(f"chaos: seed {a.seed}, {a.rounds} rounds, backends {','.join(backends)}, work {camp.work}; "
        f"faketime {'yes' if camp.faketime else 'no (clock-skew faults skipped)'}")
    rounds = [a.round] if a.round is not None else range(a.rounds)
    totals = {"rounds": 0, "checks": 0, "failed_rounds": 0, "faults": {}, "relay_restart": [], "trainer_kill": [],
              "relay_rss_kb": 0, "findings": [], "shards": {}}
    t0 = time.monotonic()
    try:
        for i in rounds:
            rseed = int(hashlib.sha256(f"{a.seed}:{i}".encode()).hexdigest()[:12], 16)
            backend = backends[i % len(backends)]
            if backend == "s3":
                camp.start_s3()
            rnd = Round(camp, i, rseed, backend)
            camp.current = rnd
            try:
                rnd.run()
            except Exception as e:  # the runner's own failure is a failed round too
                import traceback
                traceback.print_exc()
                rnd.findings.append(f"runner: {type(e).__name__}: {e}")
            totals["rounds"] += 1
            totals["checks"] += rnd.checks
            for k, v in rnd.faults.items():
                totals["faults"][k] = totals["faults"].get(k, 0) + v
            for k, v in getattr(rnd, "shard_figures", {}).items():
                totals["shards"][k] = totals["shards"].get(k, 0) + v
            totals["relay_restart"] += rnd.recovery["relay_restart"]
            totals["trainer_kill"] += rnd.recovery["trainer_kill"]
            totals["relay_rss_kb"] = max([totals["relay_rss_kb"]] + rnd.relay_rss)
            status = "ok" if not rnd.findings else "FAIL"
            log(f"round {i} {status}: {rnd.checks - len(rnd.findings)}/{rnd.checks} checks, "
                f"faults {sum(rnd.faults.values())}, {time.monotonic() - rnd.t0:.0f} s"
                + (f"; replay: --seed {a.seed} --round {i}" if rnd.findings else ""))
            seen = {}
            for f in rnd.findings:
                seen[f] = seen.get(f, 0) + 1
            for f, n in seen.items():
                log(f"  FAIL  {f}" + (f" (x{n})" if n > 1 else ""))
            if rnd.findings:
                totals["failed_rounds"] += 1
                totals["findings"] += [f"round {i}: {f}" for f in rnd.findings]
            elif not a.keep:
                shutil.rmtree(rnd.dir, ignore_errors=True)
    finally:
        camp.close()

    def pct(xs, q):
        if not xs:
            return "-"
        xs = sorted(xs)
        return f"{xs[min(len(xs) - 1, int(q * len(xs)))]:.2f}"
    log(f"chaos summary: {totals['rounds']} rounds in {time.monotonic() - t0:.0f} s, "
        f"{totals['checks'] - len(totals['findings'])}/{totals['checks']} invariant checks passed, "
        f"{totals['failed_rounds']} rounds failed")
    log(f"  faults: {sum(totals['faults'].values())} in all: " +
        ", ".join(f"{k} {v}" for k, v in sorted(totals["faults"].items()) if v > 0))
    log("  shards: " + ", ".join(f"{k} {v}" for k, v in sorted(totals["shards"].items())))
    for k in ("relay_restart", "trainer_kill"):
        xs = totals[k]
        log(f"  recovery after {k.replace('_', ' ')}: n={len(xs)} p50 {pct(xs, 0.5)} s, p99 {pct(xs, 0.99)} s")
    if totals["relay_rss_kb"]:
        log(f"  relay RSS max {totals['relay_rss_kb'] / 1024:.1f} MiB")
    if not a.keep and totals["failed_rounds"] == 0 and a.work is None:
        shutil.rmtree(camp.work, ignore_errors=True)
    sys.exit(1 if totals["failed_rounds"] else 0)


if __name__ == "__main__":
    main()
