# Oracle comparison for pail's tokenizer: the Hugging Face tokenizers library encodes the
# corpus (add_special_tokens=False) and transformers' apply_chat_template renders the
# conversations; pail's `grpo-ctl tokenize/detokenize` must agree on every item.
# Usage: validate.py --ctl BIN/grpo-ctl --work DIR --dir NAME=TOKENIZER_DIR [--dir ...]
# Prints one line per check and "tokenizer-validate: N passed, N failed"; exit 1 on any failure.
import argparse, json, math, os, subprocess, sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

passed = failed = 0


def report(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)


def write_jsonl(path, items):
    with open(path, "w", encoding="utf-8") as f:
        for x in items:
            f.write(json.dumps(x, ensure_ascii=False) + "\n")


def run_ctl(args):
    p = subprocess.run(args, capture_output=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} exited {p.returncode}: {p.stderr.decode(errors='replace').strip()}")
    return [json.loads(line) for line in p.stdout.decode("utf-8").split("\n") if line]  # not splitlines: U+2028 is text


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare_lists(name, what, inputs, want, got, show=3):
    if len(want) != len(got):
        report(False, f"{name} {what}: pail gave {len(got)} results for {len(want)} inputs")
        return
    bad = [i for i in range(len(want)) if want[i] != got[i]]
    report(not bad, f"{name} {what}: {len(want) - len(bad)}/{len(want)} equal")
    for i in bad[:show]:
        w, g = want[i], got[i]
        if isinstance(w, list):
            p = first_diff(w, g)
            print(f"    input {i} {json.dumps(inputs[i], ensure_ascii=False)[:120]}\n"
                  f"      first difference at position {p}: oracle {w[p:p + 8]} pail {g[p:p + 8]}")
        else:
            p = first_diff(w, g)
            print(f"    input {i}: first difference at char {p}: oracle {json.dumps(w[p:p + 40], ensure_ascii=False)} "
                  f"pail {json.dumps(g[p:p + 40], ensure_ascii=False)}")


def ignore_merges_probes(tj, tok, limit=300):
    """Vocab tokens whose text BPE would split without ignore_merges: the strings where
    that flag changes the ids (ordinary text rarely hits them)."""
    with open(tj, encoding="utf-8") as f:
        j = json.load(f)
    if not j["model"].get("ignore_merges"):
        return []
    j["model"]["ignore_merges"] = False
    plain = Tokenizer.from_str(json.dumps(j))
    words = [tok.decode([i]) for i in range(len(j["model"]["vocab"]))]
    words = [w for w in words if w and "\ufffd" not in w]
    a = tok.encode_batch(words, add_special_tokens=False)
    b = plain.encode_batch(words, add_special_tokens=False)
    return [w for w, x, y in zip(words, a, b) if x.ids != y.ids][:limit]


def check_dir(ctl, work, name, d, texts, convs):
    tj = os.path.join(d, "tokenizer.json")
    tok = Tokenizer.from_file(tj)
    probes = ignore_merges_probes(tj, tok)
    if probes:
        ppath = os.path.join(work, f"{name}.probes.jsonl")
        write_jsonl(ppath, probes)
        want = [e.ids for e in tok.encode_batch(probes, add_special_tokens=False)]
        got = run_ctl([ctl, "tokenize", "--tokenizer", tj, "--jsonl", ppath])
        compare_lists(name, f"ignore_merges probes ({len(probes)} vocab words BPE alone would split)", probes, want, got)
    want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    inp = os.path.join(work, "corpus.jsonl")
    got = run_ctl([ctl, "tokenize", "--tokenizer", tj, "--jsonl", inp])
    compare_lists(name, f"encode ({len(texts)} strings, {sum(map(len, want))} ids)", texts, want, got)
    # decode(encode(s)) == normalize(s): the library's own normalizer is the reference
    norm = [tok.normalizer.normalize_str(s) if tok.normalizer else s for s in texts]
    ids_path = os.path.join(work, f"{name}.ids.jsonl")
    write_jsonl(ids_path, got if len(got) == len(texts) else want)
    dec = run_ctl([ctl, "detokenize", "--tokenizer", tj, "--jsonl", ids_path])
    tjson = json.load(open(tj, encoding="utf-8"))
    # only ByteLevel gives back the normalized text; the SentencePiece decoders drop the marker
    if ('"add_prefix_space": true' not in json.dumps(tjson.get("pre_tokenizer"))
            and (tjson.get("decoder") or {}).get("type") == "ByteLevel"):
        compare_lists(name, "decode(encode(s)) == normalize(s)", texts, norm, dec)
    lib_dec = tok.decode_batch(want, skip_special_tokens=False)
    compare_lists(name, "decode == library decode", texts, lib_dec, dec)
    lib_dec = tok.decode_batch(want, skip_special_tokens=True)
    dec = run_ctl([ctl, "detokenize", "--tokenizer", tj, "--jsonl", ids_path, "--skip-special"])
    compare_lists(name, "decode --skip-special == library decode(skip_special_tokens=True)", texts, lib_dec, dec)
    if not os.path.exists(os.path.join(d, "tokenizer_config.json")):
        return
    # chat rendering against transformers
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(d)
    cpath = os.path.join(work, "convs.jsonl")
    for gen in (True, False):
        flag = [] if gen else ["--generation-prompt=false"]
        want_txt = [hf.apply_chat_template(c, tokenize=False, add_generation_prompt=gen) for c in convs]
        got_txt = run_ctl([ctl, "tokenize", "--tokenizer", tj, "--chat-jsonl", cpath, "--print-text"] + flag)
        compare_lists(name, f"chat text add_generation_prompt={gen} ({len(convs)} conversations)", convs, want_txt, got_txt)
        want_ids = [tok.encode(t, add_special_tokens=False).ids for t in want_txt]
        got_ids = run_ctl([ctl, "tokenize", "--tokenizer", tj, "--chat-jsonl", cpath] + flag)
        compare_lists(name, f"chat ids add_generation_prompt={gen}", convs, want_ids, got_ids)
    if "enable_thinking" in (hf.chat_template or ""):
        want_txt = [hf.apply_chat_template(c, tokenize=False, add_generation_prompt=True, enable_thinking=False) for c in convs]
        got_txt = run_ctl([ctl, "tokenize", "--tokenizer", tj, "--chat-jsonl", cpath, "--print-text", "--thinking=false"])
        compare_lists(name, "chat text enable_thinking=False", convs, want_txt, got_txt)


def gpt2_variants(work, dirs):
    """GPT-2's pipeline (no normalizer, ByteLevel with its own regex, with and without
    add_prefix_space) on the vocabulary of a built Qwen-style tokenizer."""
    out = []
    for name, d in dirs:
        if name != "qwen-built":
            continue
        j = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
        for prefix in (False, True):
            j["normalizer"] = None
            j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": True}
            vd = os.path.join(work, f"gpt2-style{'-prefix' if prefix else ''}")
            os.makedirs(vd, exist_ok=True)
            with open(os.path.join(vd, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False)
            out.append((os.path.basename(vd), vd))
    return out


def sp_variants(work, dirs):
    """More of the SentencePiece-era components on the vocabulary of the Mistral v3 file:
    Metaspace splitting on every marker with prepend_scheme always (older Llama/T5 files),
    a normalizer chain with a Regex Replace, Strip, Lowercase and NFKC, Split's merging
    behaviors, and a Unigram model over the same pieces with and without byte_fallback."""
    spec = {
        "metaspace-split-always": {
            "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]}},
        "sp-normalizer-chain": {
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFKC"}, {"type": "Strip", "strip_left": True, "strip_right": True}, {"type": "Lowercase"},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
                {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
            "pre_tokenizer": None,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}},  # stop > 0 panics the library on ""
    }
    for b in ("MergedWithPrevious", "MergedWithNext", "Contiguous"):  # Split's other behaviors
        spec[f"split-{b.lower()}"] = {
            "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
            "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\u2581|\\p{P}"}, "behavior": b, "invert": False}}
    for bf in (True, False):  # Unigram on the same pieces, scored -log(id + 2) (Zipf-like; sums of doubles)
        spec[f"unigram-{'fallback' if bf else 'unk'}"] = {
            "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]},
            "model": lambda j, bf=bf: {"type": "Unigram", "unk_id": 0, "byte_fallback": bf, "vocab": [
                [p, -math.log(i + 2)] for p, i in sorted(j["model"]["vocab"].items(), key=lambda x: x[1])]}}
    out = []
    for name, d in dirs:
        if name != "mistral-v3-metaspace":
            continue
        for vname, parts in spec.items():
            j = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
            j.update({k: v(j) if callable(v) else v for k, v in parts.items()})
            vd = os.path.join(work, vname)
            os.makedirs(vd, exist_ok=True)
            with open(os.path.join(vd, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False)
            out.append((vname, vd))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--dir", action="append", default=[], help="NAME=folder with tokenizer.json and tokenizer_config.json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    texts = corpus.texts()
    convs = corpus.conversations()
    write_jsonl(os.path.join(a.work, "corpus.jsonl"), texts)
    write_jsonl(os.path.join(a.work, "convs.jsonl"), convs)
    print(f"corpus: {len(texts)} strings, {sum(len(s) for s in texts)} characters; {len(convs)} conversations")
    dirs = [tuple(spec.split("=", 1)) for spec in a.dir]
    for name, d in dirs + gpt2_variants(a.work, dirs) + sp_variants(a.work, dirs):
        try:
            check_dir(a.ctl, a.work, name, d, texts, convs)
        except Exception as e:  # a crash of pail or the oracle is a failure of this folder, not of the run
            report(False, f"{name}: {type(e).__name__}: {e}")
    print(f"tokenizer-validate: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
