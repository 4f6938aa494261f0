"""llama.cpp's vocabulary tests (models/ggml-vocab-NAME.gguf with .inp / .out, in the llama.cpp
tree that PyPI's llama-cpp-python sdist bundles): each .out line holds the ids the model's own
Hugging Face tokenizer gives for one .inp case (encode(text, add_special_tokens=False)), so they
check pail's GGUF import against the model, not against transformers' GGUF loader.

  cases INP                       the cases, one JSON string a line (for grpo-ctl tokenize --jsonl)
  check INP OUT PAIL_IDS TOKJSON [NAME]  prints PASS/FAIL NAME: pail's ids against the model's on every
                                  case, and the tokenizers library's on pail's tokenizer.json
  gguf TOKJSON PRE OUT.gguf       a model's byte-level tokenizer.json written as a vocab-only GGUF the
                                  way llama.cpp's converter writes it (tokens by id, added tokens as
                                  text, CONTROL when special or looking special, else USER_DEFINED)
  corpus OUT.jsonl                validation/tokenizer's corpus, one JSON string a line
  check-corpus TOKJSON PAIL_IDS NAME CORPUS.jsonl  PASS/FAIL: pail's ids on the corpus against the tokenizers
                                  library's on the model's own tokenizer.json
"""
import json
import os
import sys

SEP = "\n__ggml_vocab_test__\n"


def cases(inp):
    text = open(inp, encoding="utf-8", newline="").read()
    parts = text.split(SEP)
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def write_gguf(tj, pre, out):
    import gguf
    j = json.load(open(tj, encoding="utf-8"))
    vocab, added = j["model"]["vocab"], j["added_tokens"]
    n = max(list(vocab.values()) + [a["id"] for a in added]) + 1
    tokens, types = [f"[PAD{i}]" for i in range(n)], [4] * n
    for t, i in vocab.items():
        tokens[i], types[i] = t, 1
    for a in added:
        t = a["content"]
        looks = (t.startswith("<|") and t.endswith("|>")) or (t.startswith("<｜") and t.endswith("｜>"))
        tokens[a["id"]], types[a["id"]] = t, 3 if a["special"] or looks else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    w = gguf.GGUFWriter(out, "llama")
    w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre(pre)
    w.add_token_list(tokens); w.add_token_types(types); w.add_token_merges(merges)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def main():
    cmd = sys.argv[1]
    if cmd == "gguf":
        write_gguf(*sys.argv[2:5])
        return 0
    if cmd == "corpus":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import corpus
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            for t in corpus.texts():
                f.write(json.dumps(t, ensure_ascii=False) + "\n")
        return 0
    if cmd == "check-corpus":
        from tokenizers import Tokenizer
        texts = [json.loads(l) for l in open(sys.argv[5] if len(sys.argv) > 5 else "/dev/null", encoding="utf-8")]
        tj, pail_ids, name = sys.argv[2:5]
        got = [json.loads(l) for l in open(pail_ids, encoding="utf-8") if l.strip()]
        want = [e.ids for e in Tokenizer.from_file(tj).encode_batch(texts, add_special_tokens=False)]
        diff = [i for i in range(len(texts)) if i >= len(got) or got[i] != want[i]]
        print(f"{'PASS' if not diff and len(got) == len(texts) else 'FAIL'} {name}: pail's ids equal the tokenizers "
              f"library's on the model's own tokenizer.json for {len(texts) - len(diff)}/{len(texts)} corpus strings")
        for i in diff[:3]:
            print(f"    {texts[i][:40]!r}: model {want[i][:12]} pail {got[i][:12] if i < len(got) else None}")
        return 1 if diff else 0
    if cmd == "cases":
        for t in cases(sys.argv[2]):
            print(json.dumps(t, ensure_ascii=False))
        return 0
    inp, out, pail_ids, tj = sys.argv[2:6]
    name = sys.argv[6] if len(sys.argv) > 6 else os.path.basename(inp)[len("ggml-vocab-"):-len(".gguf.inp")]
    texts = cases(inp)
    want = [[int(x) for x in line.split()] for line in open(out, encoding="utf-8").read().split("\n")[:len(texts)]]
    got = [json.loads(l) for l in open(pail_ids, encoding="utf-8") if l.strip()]
    if len(want) != len(texts) or len(got) != len(texts):
        print(f"FAIL {name}: {len(texts)} cases, {len(want)} expected id lines, pail gave {len(got)}")
        return 1
    from tokenizers import Tokenizer
    lib = Tokenizer.from_file(tj)
    libids = [e.ids for e in lib.encode_batch(texts, add_special_tokens=False)]
    diff = [i for i in range(len(texts)) if got[i] != want[i]]
    ldiff = [i for i in range(len(texts)) if libids[i] != got[i]]
    ok = not diff and not ldiff
    print(f"{'PASS' if ok else 'FAIL'} {name}: pail's ids equal the model's on {len(texts) - len(diff)}/{len(texts)} "
          f"llama.cpp vocab cases; the tokenizers library on pail's tokenizer.json equals pail on "
          f"{len(texts) - len(ldiff)}/{len(texts)}")
    for i in diff[:4]:
        print(f"    {texts[i][:40]!r}: model {want[i][:12]} pail {got[i][:12]}")
    for i in ldiff[:2]:
        print(f"    {texts[i][:40]!r}: library {libids[i][:12]} pail {got[i][:12]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
