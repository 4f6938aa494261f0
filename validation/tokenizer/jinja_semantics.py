# jinja2's semantics, case by case: every case of jinja_cases.py (a template and its variables)
# is rendered by jinja2 in transformers' own environment (chat_template_utils'
# _compile_jinja_template: ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
# loopcontrols, {% generation %}, its tojson, raise_exception, strftime_now, dict, namespace;
# jinja2's default Undefined) and by pail's interpreter (tests/tools/jinja_render --cases). A case
# passes when both render the same text or both raise (at compile or render time); messages are
# not compared. A case in jinja_cases.REFUSED (outside pail's subset) passes when pail raises
# while jinja2 renders. strftime_now sees one fixed instant on both sides (TZ=UTC).
#
# Usage: jinja_semantics.py --render BUILD/tools/jinja_render [--random N [--seed S]] [--show]
# Prints one PASS/FAIL row per group of cases, each differing case (template, vars it changes,
# both results), and "jinja2 semantics: N/M cases as jinja2 (R rendered identically, E refused by
# both, U outside pail's subset and refused by it)";
# exits 1 on any difference. --show prints every case's two results.
import argparse
import calendar
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["TZ"] = "UTC"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
time.tzset()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import jinja_cases  # noqa: E402

CHAT_TIME = _dt.datetime(2026, 3, 7, 12, 34, 56)


class FixedDatetime(_dt.datetime):
    """transformers' strftime_now calls datetime.now(): this one always answers CHAT_TIME."""

    @classmethod
    def now(cls, tz=None):
        return CHAT_TIME if tz is None else CHAT_TIME.replace(tzinfo=_dt.timezone.utc).astimezone(tz)


def case_vars(extra):
    v = dict(jinja_cases.VARS)
    for k, val in extra.items():
        if val is jinja_cases.UNSET:
            v.pop(k, None)
        else:
            v[k] = val
    return v


def cases():
    for group, items in jinja_cases.CASES:
        for c in items:
            tpl, extra = (c, {}) if isinstance(c, str) else c
            yield group, tpl, extra, case_vars(extra)


def jinja2_render(tpl, v):
    import transformers.utils.chat_template_utils as ctu
    ctu.datetime = FixedDatetime
    try:
        return ("ok", ctu._compile_jinja_template(tpl).render(**v))
    except Exception as e:  # compile or render: jinja2 refuses the case
        return ("err", f"{type(e).__name__}: {e}")


def pail_render(tool, all_cases):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for _, tpl, _, v in all_cases:
            f.write(json.dumps({"template": tpl, "vars": v}) + "\n")
        path = f.name
    try:
        now = calendar.timegm(CHAT_TIME.timetuple())
        p = subprocess.run([tool, "--cases", path, "--now", str(now)], capture_output=True, timeout=120)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        sys.exit(f"{tool} exited {p.returncode}: {p.stderr.decode(errors='replace').strip()}")
    lines = p.stdout.decode("utf-8").splitlines()
    if len(lines) != len(all_cases):
        sys.exit(f"{tool}: {len(lines)} results for {len(all_cases)} cases")
    res = []
    for line in lines:
        r = json.loads(line)
        res.append(("ok", r["out"]) if "out" in r else ("err", r["error"]))
    return res


# Random cases (jinja_random.py) may hit what pail refuses by design (complex numbers, unbounded
# integers, a few format-spec corners); they fail only when pail renders something else than jinja2,
# or renders where jinja2 raises, or when pail refuses more than this share of a group.
RANDOM_MAX_REFUSED = 0.08


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--render", required=True, help="tests/tools/jinja_render, built")
    ap.add_argument("--show", action="store_true", help="print both results of every case")
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="also N random cases of each grammar of jinja_random.py")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random cases")
    a = ap.parse_args()
    all_cases = list(cases())
    if a.random:
        import jinja_random
        all_cases += jinja_random.cases(a.random, a.seed)
    ours = pail_render(a.render, all_cases)
    groups, order = {}, []
    n_ok = n_rendered = n_refused = n_refused_pail = 0
    refused_random = {}
    for (group, tpl, extra, v), mine in zip(all_cases, ours):
        ref = jinja2_render(tpl, v)
        if group.startswith("random: "):
            if ref[0] == "ok" and (" at 0x" in ref[1] or "<generator object" in ref[1]):
                ref = mine = ("ok", "(an object's address: not compared)")
            if ref[0] == "ok" and mine[0] == "err":  # a refusal: allowed, counted
                refused_random[group] = refused_random.get(group, 0) + 1
                same = True
                n_refused_pail += 1
            else:
                same = ref == mine if ref[0] == "ok" else mine[0] == "err"
        elif tpl in jinja_cases.REFUSED:  # jinja2 renders it, pail refuses it
            same = ref[0] == "ok" and mine[0] == "err"
            n_refused_pail += same
        else:
            same = ref == mine if ref[0] == "ok" else mine[0] == "err"
        if group not in groups:
            groups[group] = []
            order.append(group)
        shown_extra = {k: ("<undefined>" if val is jinja_cases.UNSET else val) for k, val in extra.items()}
        if group.startswith("random: "):
            shown_extra = v
        if not same:
            groups[group].append((tpl, shown_extra, ref, mine))
        else:
            n_ok += 1
            n_rendered += ref[0] == "ok" and mine[0] == "ok"
            n_refused += ref[0] == "err"
        if a.show:
            print(f"{'  ' if same else '!!'} {tpl!r} {shown_extra if shown_extra else ''}\n     jinja2: {ref!r}\n     pail:   {mine!r}")
    failed = False
    for group in order:
        diffs = groups[group]
        n = sum(1 for c in all_cases if c[0] == group)
        refused = refused_random.get(group, 0)
        too_many = refused > RANDOM_MAX_REFUSED * n
        failed |= bool(diffs) or too_many
        note = f" ({refused} refused by pail, at most {RANDOM_MAX_REFUSED:.0%} allowed)" if group.startswith("random: ") else ""
        print(f"{'FAIL' if diffs or too_many else 'PASS'} {group}: {n - len(diffs)}/{n} cases as jinja2{note}")
        for tpl, extra, ref, mine in diffs:
            print(f"  template {tpl!r}" + (f" with {json.dumps(extra, ensure_ascii=False)}" if extra else ""))
            print(f"    jinja2: {ref[0]} {ref[1]!r}")
            print(f"    pail:   {mine[0]} {mine[1]!r}")
    print(f"jinja2 semantics: {n_ok}/{len(all_cases)} cases as jinja2 ({n_rendered} rendered identically, "
          f"{n_refused} refused by both, {n_refused_pail} outside pail's subset and refused by it)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
