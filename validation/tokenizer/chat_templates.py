# Oracle comparison for pail's chat-template interpreter: every real chat template in
# ../shared/reference/chat-templates/ renders the conversations of chat_conversations.py
# byte for byte as transformers' apply_chat_template renders them, with and without the
# generation prompt and with the template variables each template reads. A case where
# transformers raises (raise_exception's TemplateError or any other exception) is a refusal,
# and passes only when pail refuses it too.
#
# Each template gets a tokenizer folder as a user would have it: the published Qwen3
# tokenizer.json, a tokenizer_config.json setting only the bos/eos tokens MANIFEST.tsv
# gives for the model (as strings, or for every other template as AddedToken objects, the
# form older configs use), and the template as chat_template.jinja (the way transformers 5
# saves it); transformers loads it with AutoTokenizer, pail with --tokenizer-config/--chat-template.
# strftime_now sees one fixed instant on both sides (--chat-time; TZ=UTC).
#
# Usage: chat_templates.py --ctl BIN/grpo-ctl [--reference DIR] [--work DIR] [--json OUT]
#        chat_templates.py --reference-only   (what transformers renders and refuses, no pail)
# Prints one PASS/FAIL row per template, the first difference of each failing template, and
# "chat templates: N/44 templates fully identical, M cases, ..."; exits 1 on any difference.
import argparse
import datetime as _dt
import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

os.environ["TZ"] = "UTC"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
time.tzset()
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import chat_conversations  # noqa: E402

CHAT_TIME = _dt.datetime(2026, 3, 7, 12, 34, 56)
CONTEXT = 60  # characters shown each side of a first difference
SHOW = 3  # differing cases named per template


class FixedDatetime(_dt.datetime):
    """transformers' strftime_now calls datetime.now(): this one always answers CHAT_TIME."""

    @classmethod
    def now(cls, tz=None):
        return CHAT_TIME if tz is None else CHAT_TIME.replace(tzinfo=_dt.timezone.utc).astimezone(tz)


def read_manifest(folder):
    rows = {}
    with open(os.path.join(folder, "MANIFEST.tsv"), encoding="utf-8") as f:
        head = f.readline().rstrip("\n").split("\t")
        for line in f:
            if line.strip():
                r = dict(zip(head, line.rstrip("\n").split("\t")))
                rows[r["name"]] = r
    return rows


def token_or_none(s):
    return None if s == "null" else s


def template_globals(src, env):
    """The names a template reads that nothing in it sets first (jinja2.meta), so the
    template variables worth passing it."""
    import jinja2.meta
    return jinja2.meta.find_undeclared_variables(env.parse(src))


def flag_sets(src, env):
    """[(label, add_generation_prompt, kwargs)]: both generation prompts, alone and with
    each template variable of chat_conversations.KWARGS the template reads."""
    names = template_globals(src, env)
    kw = [{}] + [k for var, ks in chat_conversations.KWARGS.items() if var in names for k in ks]
    out = []
    for k in kw:
        for gen in (True, False):
            label = f"gen={'true' if gen else 'false'}" + (f" {json.dumps(k, ensure_ascii=False)}" if k else "")
            out.append((label, gen, k))
    return out


def added_token(s):
    """A special token as older tokenizer_config.json files write it (Llama 2, Mistral v0.1)."""
    if s is None:
        return None
    return {"__type": "AddedToken", "content": s, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False}


def make_folder(work, name, man, src_path, qwen_json, token_form="string"):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    link = os.path.join(d, "tokenizer.json")
    if not os.path.lexists(link):
        os.symlink(os.path.abspath(qwen_json), link)
    wrap = added_token if token_form == "AddedToken" else (lambda s: s)
    cfg = {"bos_token": wrap(token_or_none(man["bos_token"])), "eos_token": wrap(token_or_none(man["eos_token"]))}
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False)
    with open(src_path, "rb") as fi, open(os.path.join(d, "chat_template.jinja"), "wb") as fo:
        fo.write(fi.read())
    return d


# ---- the reference side (runs in pool workers forked after transformers is imported) ----

def reference_render(job):
    """(name, folder, rows, flagsets) -> (name, {label: [("ok", text) | ("err", message)]}, seconds);
    the results are an error message instead when transformers cannot load the folder."""
    name, d, rows, fsets = job
    from transformers import AutoTokenizer
    t0 = time.time()
    try:
        tok = AutoTokenizer.from_pretrained(d)
    except Exception as e:  # the folder itself: a failure of the check, not a refusal
        return name, f"AutoTokenizer.from_pretrained({d}): {type(e).__name__}: {e}", time.time() - t0
    out = {}
    for label, gen, kw in fsets:
        res = []
        for row in rows:
            msgs, tools = (row, None) if isinstance(row, list) else (row["messages"], row.get("tools"))
            try:
                text = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=gen, **kw)
                res.append(("ok", text))
            except Exception as e:  # a refusal: jinja2's TemplateError from raise_exception, or any other
                res.append(("err", f"{type(e).__name__}: {e}"))
        out[label] = res
    return name, out, time.time() - t0


def init_reference():
    import transformers.utils.chat_template_utils as ctu
    ctu.datetime = FixedDatetime
    from transformers.utils.chat_template_utils import _compile_jinja_template
    return _compile_jinja_template("").environment


# ---- the pail side ----

def pail_render(ctl, d, rows_path, n, gen, kw):
    """pail's output for each row: ("ok", text) or ("err", message); a run that fails as a
    whole (exit status, wrong line count) refuses every row with its stderr."""
    args = [ctl, "tokenize", "--tokenizer-config", os.path.join(d, "tokenizer_config.json"),
            "--chat-template", os.path.join(d, "chat_template.jinja"), "--chat-jsonl", rows_path,
            "--print-text", "--keep-going", "--chat-time", CHAT_TIME.strftime("%Y-%m-%dT%H:%M:%S")]
    if not gen:
        args.append("--generation-prompt=false")
    if kw:
        args += ["--chat-template-kwargs", json.dumps(kw, ensure_ascii=False)]
    try:
        p = subprocess.run(args, capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        return [("err", "pail: timed out after 120 s")] * n, "timed out after 120 s"
    stderr = p.stderr.decode("utf-8", errors="replace").strip()
    if p.returncode != 0:
        msg = f"exited {p.returncode}: {(stderr.splitlines() or [''])[0][:300]}"
        return [("err", "pail " + msg)] * n, msg
    lines = [x for x in p.stdout.decode("utf-8", errors="replace").split("\n") if x]  # not splitlines: U+2028
    if len(lines) != n:
        msg = f"printed {len(lines)} lines for {n} rows"
        return [("err", "pail " + msg)] * n, msg
    out = []
    for line in lines:
        try:
            v = json.loads(line)
        except ValueError:
            out.append(("err", f"pail printed a line that is not JSON: {line[:100]!r}"))
            continue
        if isinstance(v, str):
            out.append(("ok", v))
        elif isinstance(v, dict) and "error" in v:
            out.append(("err", str(v["error"])))
        else:
            out.append(("err", f"pail printed neither a string nor {{\"error\"}}: {line[:100]!r}"))
    return out, None


# ---- comparison and report ----

def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def diff_lines(want, got):
    p = first_diff(want, got)
    lo = max(0, p - CONTEXT)
    return (p, [f"      offset {p} of transformers' {len(want)} characters, pail's {len(got)}:",
                f"      transformers: {want[lo:p]!r} | {want[p:p + CONTEXT]!r}",
                f"      pail:         {got[lo:p]!r} | {got[p:p + CONTEXT]!r}"])


def classify(want, got):
    (wk, wv), (gk, gv) = want, got
    if wk == "ok" and gk == "ok":
        return "identical" if wv == gv else "differ"
    if wk == "err" and gk == "err":
        return "refused_both"
    return "pail_refuses" if wk == "ok" else "pail_renders"


def compare_template(name, ref, mine, names):
    counts = {"cases": 0, "identical": 0, "refused_both": 0, "differ": 0, "pail_refuses": 0, "pail_renders": 0}
    cases, firsts = [], {}  # case name -> its first difference
    for label, want_rows in ref.items():
        got_rows = mine[label]
        for cname, want, got in zip(names, want_rows, got_rows):
            st = classify(want, got)
            counts["cases"] += 1
            counts[st] += 1
            case = {"case": cname, "flags": label, "status": st}
            if want[0] == "err":
                case["transformers_error"] = want[1]
            if got[0] == "err":
                case["pail_error"] = got[1]
            if st == "differ":
                p, _ = diff_lines(want[1], got[1])
                case.update(offset=p, transformers=want[1], pail=got[1])
            elif st == "pail_refuses":
                case["transformers"] = want[1]
            elif st == "pail_renders":
                case["pail"] = got[1]
            cases.append(case)
            if st not in ("identical", "refused_both") and cname not in firsts:
                firsts[cname] = (case, want, got)
    return counts, cases, list(firsts.values())


def describe_first(case, want, got):
    st = case["status"]
    head = f"    first difference: case {case['case']} ({case['flags']}): "
    if st == "differ":
        p, lines = diff_lines(want[1], got[1])
        return [head + f"texts differ at offset {p}"] + lines
    if st == "pail_refuses":
        return [head + f"pail refuses: {got[1][:200]!r}", f"      transformers renders {want[1][:120]!r}..."]
    return [head + f"transformers refuses ({want[1][:200]!r}) but pail renders {got[1][:120]!r}"]


def main():
    ap = argparse.ArgumentParser(description="pail's chat templates against transformers' apply_chat_template")
    ap.add_argument("--ctl", help="grpo-ctl to check (required unless --reference-only)")
    ap.add_argument("--reference", default=os.environ.get("PAIL_REFERENCE_DIR", os.path.join(ROOT, "..", "shared", "reference")),
                    help="the reference folder (chat-templates/, tokenizers/qwen3/); default ../shared/reference")
    ap.add_argument("--work", help="folder for the tokenizer folders and rows (default: a temporary one)")
    ap.add_argument("--json", help="write the machine-readable report here")
    ap.add_argument("--only", action="append", default=[], help="templates whose name contains this (repeatable)")
    ap.add_argument("--reference-only", action="store_true", help="transformers alone: what it renders and refuses")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="reference worker processes")
    a = ap.parse_args()
    if not a.reference_only and not a.ctl:
        ap.error("give --ctl BIN/grpo-ctl, or --reference-only")
    tdir = os.path.join(a.reference, "chat-templates")
    qwen = os.path.join(a.reference, "tokenizers", "qwen3", "tokenizer.json")
    if not (os.path.isfile(os.path.join(tdir, "MANIFEST.tsv")) and os.path.isfile(qwen)):
        print(f"SKIP chat templates: {tdir} or {qwen} absent (the reference data is not part of a clone)")
        return 0
    t0 = time.time()
    manifest = read_manifest(tdir)
    names = sorted(n for n in manifest if not a.only or any(o in n for o in a.only))
    cases = chat_conversations.cases()
    case_names = [n for n, _ in cases]
    with tempfile.TemporaryDirectory(prefix="pail-chat-") as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        rows_path = os.path.join(work, "rows.jsonl")
        with open(rows_path, "w", encoding="utf-8") as f:
            for _, row in cases:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        with open(rows_path, encoding="utf-8") as f:  # both sides read the same bytes
            rows = [json.loads(line) for line in f.read().split("\n") if line]
        env = init_reference()  # imports transformers and fixes the clock before the workers fork
        import jinja2
        import transformers
        jobs, meta = [], {}
        for i, n in enumerate(names):
            src_path = os.path.join(tdir, n + ".jinja")
            with open(src_path, "rb") as f:
                raw = f.read()
            # both ways configs write special tokens: a string, or (every other template) an AddedToken object
            form = "AddedToken" if i % 2 else "string"
            d = make_folder(work, n, manifest[n], src_path, qwen, form)
            fsets = flag_sets(raw.decode("utf-8"), env)
            meta[n] = {"folder": d, "flagsets": fsets, "sha256_16": hashlib.sha256(raw).hexdigest()[:16],
                       "special_token_form": form,
                       "manifest_sha256_16": manifest[n].get("sha256_16"),
                       "bos_token": token_or_none(manifest[n]["bos_token"]),
                       "eos_token": token_or_none(manifest[n]["eos_token"])}
            jobs.append((n, d, rows, fsets))
        ctx = multiprocessing.get_context("fork")
        pool = ctx.Pool(max(1, a.jobs))
        pending = pool.imap_unordered(reference_render, jobs)
        mine, run_errors = {}, {}
        if not a.reference_only:  # pail runs while the workers render
            for n in names:
                d = meta[n]["folder"]
                mine[n] = {}
                for label, gen, kw in meta[n]["flagsets"]:
                    mine[n][label], err = pail_render(a.ctl, d, rows_path, len(rows), gen, kw)
                    if err:
                        run_errors.setdefault(n, []).append(f"{label}: {err}")
        ref, ref_secs = {}, {}
        for n, out, secs in pending:
            ref[n], ref_secs[n] = out, secs
        pool.close()
        pool.join()
    report = {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
              "chat_time": CHAT_TIME.isoformat(), "tz": "UTC", "ctl": a.ctl, "reference_only": a.reference_only,
              "conversations": len(cases), "templates": []}
    load_errors = {n: ref[n] for n in names if isinstance(ref[n], str)}
    for n, e in load_errors.items():
        print(f"FAIL {n}: {e}")
    names = [n for n in names if n not in load_errors]
    if a.reference_only:
        rc = reference_summary(names, ref, meta, case_names, report, t0)
    else:
        rc = comparison_summary(names, ref, ref_secs, mine, run_errors, meta, case_names, report, t0)
    report["load_errors"] = load_errors
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(report, f, ensure_ascii=False, indent=1)
    return 1 if rc or load_errors else 0


def template_entry(n, meta, **kw):
    return dict({k: v for k, v in meta[n].items() if k not in ("folder", "flagsets")},
                name=n, flagsets=[f[0] for f in meta[n]["flagsets"]], **kw)


def reference_summary(names, ref, meta, case_names, report, t0):
    """--reference-only: what transformers renders and refuses, per template."""
    import transformers
    print(f"{'template':<48} {'cases':>5} {'renders':>7} {'refuses':>7}  first refusal")
    cases = refused = 0
    for n in names:
        errs = [(case_names[i], label, r[1]) for label in ref[n] for i, r in enumerate(ref[n][label]) if r[0] == "err"]
        total = sum(len(v) for v in ref[n].values())
        first = f"{errs[0][0]}: {errs[0][2][:70]}" if errs else ""
        print(f"{n:<48} {total:>5} {total - len(errs):>7} {len(errs):>7}  {first}")
        cases, refused = cases + total, refused + len(errs)
        report["templates"].append(template_entry(n, meta, cases=total, renders=total - len(errs), refuses=len(errs),
                                                  refusals=[{"case": c, "flags": fl, "transformers_error": m}
                                                            for c, fl, m in errs]))
    print(f"chat templates (transformers {transformers.__version__} alone): {len(names)} templates, "
          f"{cases} cases, {cases - refused} rendered, {refused} refused ({time.time() - t0:.1f} s)")
    report["summary"] = {"templates": len(names), "cases": cases, "refused": refused}
    return 0


def comparison_summary(names, ref, ref_secs, mine, run_errors, meta, case_names, report, t0):
    """One PASS/FAIL row per template, its first difference, the summary line; 1 on any difference."""
    tot = {"templates": len(names), "fully_identical": 0, "cases": 0, "identical": 0, "refused_both": 0,
           "differ": 0, "pail_refuses": 0, "pail_renders": 0}
    print(f"     {'template':<48} {'cases':>5} {'ident':>5} {'refused':>7} {'differ':>6} {'pail-refuses':>12}")
    for n in names:
        counts, tcases, firsts = compare_template(n, ref[n], mine[n], case_names)
        bad = counts["differ"] + counts["pail_refuses"] + counts["pail_renders"] + len(run_errors.get(n, []))
        for k in counts:
            tot[k] += counts[k]
        tot["fully_identical"] += not bad
        differ = counts["differ"] + counts["pail_renders"]
        print(f"{'PASS' if not bad else 'FAIL'} {n:<48} {counts['cases']:>5} {counts['identical']:>5} "
              f"{counts['refused_both']:>7} {differ:>6} {counts['pail_refuses']:>12}", flush=True)
        for e in run_errors.get(n, [])[:2]:
            print(f"    pail run: {e}")
        first_lines = describe_first(*firsts[0]) if firsts else []
        for line in first_lines:
            print(line)
        for f in firsts[1:SHOW]:  # the first difference of a few other cases, one line each
            print(describe_first(*f)[0].replace("first difference", "also differs", 1))
        if len(firsts) > SHOW:
            print(f"    ... and {len(firsts) - SHOW} more cases with differences (see the JSON report)")
        report["templates"].append(template_entry(n, meta, counts=counts, fully_identical=not bad,
                                                  pail_run_errors=run_errors.get(n, []),
                                                  reference_seconds=round(ref_secs[n], 2),
                                                  first_difference="\n".join(x.strip() for x in first_lines) or None,
                                                  cases=[c for c in tcases if c["status"] != "identical"]))
    d = tot["differ"] + tot["pail_refuses"] + tot["pail_renders"]
    tot["pail_runs_failed"] = sum(len(v) for v in run_errors.values())
    summary = (f"chat templates: {tot['fully_identical']}/{tot['templates']} templates fully identical, {tot['cases']} cases, "
               f"{tot['identical']} identical, {tot['refused_both']} refused by both, {d} differ")
    if d:
        summary += (f" ({tot['differ']} texts differ, {tot['pail_refuses']} pail refuses what transformers renders, "
                    f"{tot['pail_renders']} pail renders what transformers refuses)")
    if tot["pail_runs_failed"]:  # a run that failed as a whole refused every row: its "refused by both" mean nothing
        summary += f"; {tot['pail_runs_failed']} pail runs failed as a whole"
    print(summary + f" [{time.time() - t0:.1f} s]")
    report["summary"] = dict(tot, differ_total=d, line=summary)
    return 1 if d or tot["pail_runs_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
