"""GGUF files for tests/integration/test_gguf.sh, written with gguf-py's GGUFWriter,
and the checks against gguf-py and transformers.

  types OUT.gguf                 every tensor type pail reads, random values; K-quants as
                                 random blocks with finite fp16 scales (gguf-py cannot quantize them)
  check-dequant FILE.gguf DIR    DIR/<name>.f32 (pail's) bit-equal to gguf.quants.dequantize
  model OUT.gguf --arch A --qtype T   a tiny random llama / qwen2 / qwen3 model with a gpt2 tokenizer
"""
import argparse
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

QUANTIZED = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]
K_TYPES = [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]


def random_k_blocks(rng, qtype, n_blocks):
    """Random bytes with every fp16 field (d, dmin) set to a finite value."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    # byte offsets of the fp16 scales in each layout (gguf/quants.py)
    f16_at = {Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}[qtype]
    for off in f16_at:
        d = rng.uniform(-0.05, 0.05, size=n_blocks).astype(np.float16)
        b[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return b


def add(writer, name, data, qtype):
    """Adds a float32 array quantized by gguf-py (or raw K blocks)."""
    if qtype in (Q.F32, Q.F16):
        writer.add_tensor(name, data.astype(np.float32 if qtype == Q.F32 else np.float16))
    else:
        writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)


def cmd_types(a):
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(a.out, "llama")
    for qt in QUANTIZED:
        add(w, f"t.{qt.name}", rng.normal(0, 1, size=(3, 64)).astype(np.float32), qt)
    for qt in K_TYPES:
        w.add_tensor(f"t.{qt.name}", random_k_blocks(rng, qt, 6).reshape(2, -1), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cmd_check_dequant(a):
    r = gguf.GGUFReader(a.file)
    bad = 0
    for t in r.tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).ravel()
        got = np.fromfile(f"{a.dir}/{t.name}.f32", dtype=np.float32)
        same = got.shape == ref.shape and np.array_equal(got.view(np.uint32), ref.view(np.uint32))
        print(f"dequant {t.tensor_type.name:5s} {t.name}: {ref.size} values {'bit-equal' if same else 'DIFFER'}")
        bad += not same
    sys.exit(1 if bad else 0)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("types"); s.add_argument("out"); s.set_defaults(f=cmd_types)
    s = sub.add_parser("check-dequant"); s.add_argument("file"); s.add_argument("dir"); s.set_defaults(f=cmd_check_dequant)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
