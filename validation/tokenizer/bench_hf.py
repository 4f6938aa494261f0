# The reference half of bench/bench_tokenizer.c: writes a few MB of mixed documents
# (prose, code, the multilingual comparison corpus) as length-prefixed UTF-8 to OUT,
# encodes them with the tokenizers library on one thread (encode per document, and
# encode_batch with RAYON_NUM_THREADS=1) and prints one JSON line: MB/s, id count and
# the sha256 of all ids as int32 little-endian, so the C side can check equality first.
# Usage: bench_hf.py TOKENIZER_JSON OUT [MB]
import os
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
import hashlib, json, random, struct, sys, time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def documents(mb):
    rnd = random.Random(7)
    prose = corpus._local_text("/usr/share/doc/**/*", 400, rnd)
    code = corpus._local_text("/usr/lib/python3*/**/*.py", 200, rnd) or prose
    multi = corpus.texts()
    docs, total = [], 0
    while total < mb << 20:
        r = rnd.random()
        if r < 0.55:
            d = corpus._slice(rnd, prose, 500, 4000)
        elif r < 0.85:
            d = corpus._slice(rnd, code, 500, 4000)
        else:
            d = "\n".join(rnd.choice(multi) for _ in range(20))
        docs.append(d)
        total += len(d.encode("utf-8"))
    return docs, total


def best_of(n, fn):
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    path, out = sys.argv[1], sys.argv[2]
    mb = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    docs, nbytes = documents(mb)
    with open(out, "wb") as f:
        for d in docs:
            b = d.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b)
    tok = Tokenizer.from_file(path)
    encs = [tok.encode(d, add_special_tokens=False).ids for d in docs]
    h = hashlib.sha256()
    n = 0
    for ids in encs:
        h.update(struct.pack(f"<{len(ids)}i", *ids))
        n += len(ids)
    t_loop = best_of(2, lambda: [tok.encode(d, add_special_tokens=False) for d in docs])
    t_batch = best_of(2, lambda: tok.encode_batch(docs, add_special_tokens=False))
    print(json.dumps({"docs": len(docs), "bytes": nbytes, "ids": n, "sha256": h.hexdigest(),
                      "encode_mbs": nbytes / t_loop / 1e6, "encode_batch_1thread_mbs": nbytes / t_batch / 1e6}))


if __name__ == "__main__":
    main()
