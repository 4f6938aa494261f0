"""The figures of bench/vs_trl.sh from DIR/pail.json (grpo-train's metrics lines
and the run's wall clock) and DIR/trl.json (validation/bench/trl_grpo.py): wall
clock, trainer-only seconds per step, tokens per second, and both reward curves
side by side; writes DIR/vs_trl.json and DIR/vs_trl.csv. Either side may be
missing (PAIL_VS_TRL_SIDES). Usage: vs_trl_report.py DIR"""
import json
import os
import sys

d = sys.argv[1]


def load(name):
    p = os.path.join(d, name)
    return json.load(open(p)) if os.path.exists(p) else None


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


pail, trl = load("pail.json"), load("trl.json")
summary = {}
if pail:
    s = pail["steps"]
    comp = [st["completions/mean_length"] * st["groups"] * pail["group_size"] for st in s]
    summary["pail"] = {
        "wall_seconds": pail["wall_seconds"], "steps": len(s), "base_dtype": pail.get("dtype"),
        "trainer_seconds_per_step": mean([st["step_seconds"] for st in s]),
        "trainer_wait_seconds_per_step": mean([st["wait_seconds"] for st in s]),
        "trainer_tokens_per_second": sum(st["num_tokens"] for st in s) / sum(st["step_seconds"] for st in s),
        "completion_tokens": sum(comp),
        "completion_tokens_per_wall_second": sum(comp) / pail["wall_seconds"],
        "cpu_seconds": pail["cpu_seconds"]["trainer"] + pail["cpu_seconds"]["worker"],
        "cpu_seconds_trainer": pail["cpu_seconds"]["trainer"], "cpu_seconds_worker": pail["cpu_seconds"]["worker"],
        "load_start": pail.get("load_start"), "load_end": pail.get("load_end"),
        "staleness_mean": mean([st.get("staleness_mean") for st in s]),
        "reward": [st["reward"] for st in s],
    }
if trl:
    s = trl["steps"]
    train = [st.get("train_seconds") for st in s]
    summary["trl"] = {
        "wall_seconds": trl["wall_seconds"], "train_call_seconds": trl["train_call_seconds"], "steps": len(s),
        "versions": trl.get("versions"), "micro_batch": trl.get("micro_batch"),
        "cpu_seconds": trl.get("cpu_seconds"), "load_end": trl.get("load_end"),
        "step_seconds": mean([st.get("step_time") for st in s]),
        "generate_seconds_per_step": mean([st.get("generate_seconds") for st in s]),
        "trainer_seconds_per_step": mean(train),
        "trainer_tokens_per_second": sum(st["tokens"] for st in s) / sum(x for x in train if x is not None),
        "completion_tokens": sum(st["completion_tokens"] for st in s),
        "completion_tokens_per_wall_second": sum(st["completion_tokens"] for st in s) / trl["wall_seconds"],
        "reward": [st["reward"] for st in s],
    }


def f(x, fmt="%.1f"):
    return "-" if x is None else fmt % x


P, T = summary.get("pail", {}), summary.get("trl", {})
rows = [
    ("end-to-end wall clock, s", P.get("wall_seconds"), T.get("wall_seconds"), "%.1f"),
    ("CPU seconds (user + sys, all processes)", P.get("cpu_seconds"), T.get("cpu_seconds"), "%.1f"),
    ("trainer-only s/step", P.get("trainer_seconds_per_step"), T.get("trainer_seconds_per_step"), "%.2f"),
    ("trainer tokens/s (prompt + completion)", P.get("trainer_tokens_per_second"),
     T.get("trainer_tokens_per_second"), "%.0f"),
    ("completion tokens trained on", P.get("completion_tokens"), T.get("completion_tokens"), "%.0f"),
    ("  ... per wall-clock second", P.get("completion_tokens_per_wall_second"),
     T.get("completion_tokens_per_wall_second"), "%.1f"),
]
print(f"  {'':40s} {'pail':>10s} {'TRL':>10s}")
for name, p, t, fmt in rows:
    print(f"  {name:40s} {f(p, fmt):>10s} {f(t, fmt):>10s}")
if P:
    print(f"  pail trainer waiting for rollouts: {f(P['trainer_wait_seconds_per_step'], '%.2f')} s/step; "
          f"mean staleness {f(P['staleness_mean'], '%.2f')} versions (async: step k trains on groups "
          f"sampled by older adapters)")
if P:
    print(f"  pail CPU seconds: trainer {P['cpu_seconds_trainer']:.1f}, worker {P['cpu_seconds_worker']:.1f}; "
          f"load average {P['load_start']} at the start, {' '.join(P['load_end'] or [])} at the end")
if T:
    print(f"  TRL load average at the end: {' '.join(T['load_end'] or [])}")
    print(f"  TRL step {f(T['step_seconds'], '%.2f')} s = generation (+ rewards) "
          f"{f(T['generate_seconds_per_step'], '%.2f')} s + trainer {f(T['trainer_seconds_per_step'], '%.2f')} s "
          f"(micro-batch {T['micro_batch']} completions)")
n = max(len(P.get("reward", [])), len(T.get("reward", [])))
print(f"  mean reward per step:\n  {'step':>6s} {'pail':>8s} {'TRL':>8s}")
csv = ["step,pail_reward,trl_reward"]
for i in range(n):
    p = P["reward"][i] if i < len(P.get("reward", [])) else None
    t = T["reward"][i] if i < len(T.get("reward", [])) else None
    print(f"  {i + 1:6d} {f(p, '%.3f'):>8s} {f(t, '%.3f'):>8s}")
    csv.append(f"{i + 1},{'' if p is None else p},{'' if t is None else t}")
print(f"  {'mean':>6s} {f(mean(P.get('reward', [])), '%.3f'):>8s} {f(mean(T.get('reward', [])), '%.3f'):>8s}")
if P and T:
    r = P["wall_seconds"] / T["wall_seconds"]
    summary["wall_ratio_pail_over_trl"] = r
    print(f"end-to-end wall clock, {P['steps']} steps: pail {P['wall_seconds']:.1f} s, TRL {T['wall_seconds']:.1f} s: "
          f"{r:.2f}x (target <= 0.5x)")
json.dump(summary, open(os.path.join(d, "vs_trl.json"), "w"), indent=1)
open(os.path.join(d, "vs_trl.csv"), "w").write("\n".join(csv) + "\n")
print(f"  written: {os.path.join(d, 'vs_trl.json')}, {os.path.join(d, 'vs_trl.csv')}")
