"""llama.cpp's vocabulary tests (models/ggml-vocab-NAME.gguf with .inp / .out, in the llama.cpp
tree that PyPI's llama-cpp-python sdist bundles): each .out line holds the ids the model's own
Hugging Face tokenizer gives for one .inp case (encode(text, add_special_tokens=False)), so they
check pail's GGUF import against the model, not against transformers' GGUF loader.

  cases INP                       the cases, one JSON string a line (for grpo-ctl tokenize --jsonl)
  check INP OUT PAIL_IDS TOKJSON [NAME]  prints PASS/FAIL NAME: pail's ids against the model's on every
                                  case, and the tokenizers library's on pail's tokenizer.json
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


def main():
    cmd = sys.argv[1]
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
