"""Runs a trainer command until it exits 0, sending it kill -9 at chosen
points: right after a trainer state, an adapter or a metrics object appears
(the windows between the commit's writes), or at a random time. Usage:
kill_trainer.py RUN_DIR KILLS SEED -- COMMAND...   Prints how many kills landed
where; exits with the last run's status."""
import os
import random
import signal
import subprocess
import sys
import time

run_dir, kills, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cmd = sys.argv[sys.argv.index("--") + 1:]
rng = random.Random(seed)


def count(sub, prefix):
    try:
        return sum(1 for n in os.listdir(os.path.join(run_dir, sub)) if n.startswith(prefix))
    except FileNotFoundError:
        return 0


where = {}
done = 0
rc = 1
for attempt in range(kills * 3 + 1):
    log = open(os.path.join(os.path.dirname(run_dir), "killed.log"), "a")
    p = subprocess.Popen(cmd, stderr=log)
    if done >= kills:
        rc = p.wait()
        break
    point = rng.choice(["state", "adapter", "metrics", "time"])
    sub, prefix = {"state": ("trainer", "state-v"), "adapter": ("adapters", "v"),
                   "metrics": ("metrics", "step-"), "time": (None, None)}[point]
    base = count(sub, prefix) if sub else 0
    deadline = time.monotonic() + (rng.uniform(0.005, 0.08) if point == "time" else 30)
    while p.poll() is None and time.monotonic() < deadline:
        if sub and count(sub, prefix) > base:
            time.sleep(rng.uniform(0, 0.002))
            break
        time.sleep(0.0005)
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
        p.wait()
        done += 1
        where[point] = where.get(point, 0) + 1
    else:
        rc = p.returncode
        break
print(f"{done} kill -9s ({', '.join(f'{k}: {v}' for k, v in sorted(where.items()))}), last run exit {rc}")
sys.exit(rc)
