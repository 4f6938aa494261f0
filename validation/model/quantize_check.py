"""pail's quantizer (kernels/quantize.c, run by build/tools/quantize_rows) against
two independent references, byte for byte: gguf-py's gguf.quants.quantize (numpy;
it quantizes Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 and raises NotImplementedError for
the K-quants) and llama.cpp's own quantize_row_<type>_ref (the C harness that
validation/model/llamacpp_quant/build.sh builds from the pinned llama.cpp), for
every type. The rows: seeded random rows of several distributions and scales,
plus edge rows (all zero, constant, one non-zero, +a/-a ties, exact grid points
and halfway points, tiny, subnormal, huge up to FLT_MAX, positive-only, sparse).
With --isa, pail's other code paths (PAIL_KERNELS_ISA: the K-quants' AVX2 and
scalar make_qkx2_quants) must write the same bytes. Prints one line per
comparison, PASS or FAIL; exit 1 on any FAIL.

  quantize_check.py --tool build/tools/quantize_rows [--harness PATH] --work DIR [--rows N] [--seed S] [--isa scalar]
"""
import argparse
import subprocess
import sys
import time

import numpy as np

TYPES = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"]
GGUF_PY = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_1": "Q4_1", "q5_0": "Q5_0", "q5_1": "Q5_1"}
ROW = 1024  # 32 blocks of 32, 4 of 256
BLOCK = {t: 256 if t.endswith("_k") else 32 for t in TYPES}
BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24, "q4_k": 144, "q5_k": 176, "q6_k": 210}


def random_rows(rng, n):
    """n rows: each a distribution and a scale (10^-4 .. 10^3) chosen at random."""
    rows = np.empty((n, ROW), np.float32)
    for i in range(n):
        scale = 10.0 ** rng.uniform(-4, 3)
        kind = i % 6
        if kind == 0:
            r = rng.standard_normal(ROW)
        elif kind == 1:
            r = rng.uniform(-1, 1, ROW)
        elif kind == 2:
            r = rng.standard_t(3, ROW)  # heavy tails: an outlier sets a block's scale
        elif kind == 3:
            r = rng.standard_normal(ROW) + rng.uniform(-2, 2)  # offset: min > 0 or max < 0 groups
        elif kind == 4:
            r = rng.laplace(size=ROW) * (rng.uniform(size=ROW) < 0.3)  # sparse
        else:  # blocks of very different scales within a 256-block
            r = rng.standard_normal(ROW) * np.repeat(10.0 ** rng.uniform(-3, 0, ROW // 16), 16)
        rows[i] = (r * scale).astype(np.float32)
    return rows


def edge_rows(rng):
    """Rows that reach the branches: zero and constant groups, ties, grid points, extremes."""
    out = []

    def add(r):
        out.append(np.asarray(r, np.float32).reshape(ROW))

    add(np.zeros(ROW))
    for c in (1.0, -1.0, 0.3, -7.25, 1e-3, 65504.0, -1e5):
        add(np.full(ROW, c))
    one = np.zeros(ROW)
    one[::37] = 1.0
    add(one)
    add(-one)
    ties = np.zeros(ROW)
    ties[0::2], ties[1::2] = 2.0, -2.0  # |max| tie: the first one wins
    add(ties)
    add(-ties)
    for q in (15, 31, 127, 63):  # integers on a grid, and halfway between its points
        g = rng.integers(-q, q + 1, ROW).astype(np.float64)
        add(g * 0.01)
        add((g + 0.5) * 0.01)
        add(np.abs(g) * 0.125)
    for mag in (1e-30, 1e-20, 1e-10, 1e-6, 1e4, 1e6, 1e10, 1e20, 1e30, 3.4e38):
        r = np.clip(rng.standard_normal(ROW) * mag, -3.4e38, 3.4e38)
        add(r)
        add(np.abs(r))
    add(rng.standard_normal(ROW) * 1e-40)  # subnormal: 1/d overflows in the 32-block types
    add(np.linspace(-1, 1, ROW))
    add(np.linspace(0.5, 1, ROW))  # all positive: the K-quants' min is 0
    add(np.linspace(-1, -0.5, ROW))
    mixed = rng.standard_normal(ROW)
    mixed[:16] = 0  # a zero group inside a non-zero 256-block (Q6_K's 16-groups, Q4_K's scale 0)
    mixed[32:64] = 1e-9
    add(mixed)
    steps = np.repeat(10.0 ** np.arange(-8, 8, 0.25), 16)[:ROW]  # groups of rising scale
    add(steps * rng.choice([-1, 1], ROW))
    return np.stack(out)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")


def zero_sign_only(t, got, want):
    """The number of blocks that differ only in the sign of a zero fp16 d (or m of
    Q4_1 / Q5_1): both are the value 0 and dequantize alike; -1 if any other byte differs."""
    g = got.reshape(-1, BYTES[t]).copy()
    w = want.reshape(-1, BYTES[t]).copy()
    bad = (g != w).any(axis=1)
    for off in ((0, 2) if t in ("q4_1", "q5_1") else (0,)):
        for x in (g, w):
            z = (x[:, off] == 0) & ((x[:, off + 1] & 0x7F) == 0)
            x[z, off + 1] = 0
    return -1 if (g != w).any() else int(bad.sum())


def first_diff(t, got, want):
    bb = BYTES[t]
    g = got.reshape(-1, bb)
    w = want.reshape(-1, bb)
    bad = np.nonzero((g != w).any(axis=1))[0]
    b = int(bad[0])
    per_row = ROW // BLOCK[t]
    return (f"{len(bad)} of {len(g)} blocks differ; first: row {b // per_row} block {b % per_row}: "
            f"pail {g[b].tobytes().hex()} reference {w[b].tobytes().hex()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--harness", default="")
    ap.add_argument("--work", required=True)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--isa", action="append", default=[], help="also run the tool with PAIL_KERNELS_ISA=ISA")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    rows = np.concatenate([random_rows(rng, a.rows), edge_rows(rng)])
    finite = np.isfinite(rows).all()
    assert finite, "the generator made a non-finite row"
    nedge = len(rows) - a.rows
    src = f"{a.work}/rows.f32"
    rows.tofile(src)
    keep = np.ones(len(rows), bool)  # gguf-py takes every row, up to 3.4e38 and subnormals
    fail = 0
    import gguf  # noqa: E402 (the venv's, pinned in validation/requirements.txt)
    for t in TYPES:
        t0 = time.time()
        out = f"{a.work}/pail.{t}"
        run([a.tool, t, src, out])
        got = np.fromfile(out, np.uint8).reshape(len(rows), -1)
        secs = time.time() - t0
        for isa in a.isa if t in ("q4_k", "q5_k") else []:  # pail's other paths (PAIL_KERNELS_ISA): the same bytes
            run(["env", f"PAIL_KERNELS_ISA={isa}", a.tool, t, src, f"{out}.{isa}"])
            other = np.fromfile(f"{out}.{isa}", np.uint8).reshape(len(rows), -1)
            if np.array_equal(got, other):
                print(f"PASS {t}: PAIL_KERNELS_ISA={isa} writes the same bytes as the default path")
            else:
                fail += 1
                print(f"FAIL {t}: PAIL_KERNELS_ISA={isa} differs from the default path: {first_diff(t, other, got)}")
        if t in GGUF_PY:
            with np.errstate(all="ignore"):
                want = gguf.quants.quantize(rows[keep], gguf.GGMLQuantizationType[GGUF_PY[t]]).reshape(int(keep.sum()), -1)
            n = int(keep.sum())
            zeros = zero_sign_only(t, got[keep], want)
            if zeros >= 0:
                print(f"PASS {t}: byte-equal to gguf.quants.quantize on {n} rows of {ROW} "
                      f"({n * ROW // BLOCK[t]} blocks; {a.rows} random, {n - a.rows} edge; pail {secs:.2f}s)"
                      + (f", but for {zeros} blocks whose fp16 d or m is a zero of the other sign (gguf-py's "
                         "numpy min / argmax picks another of the block's zeros than llama.cpp's loop)" if zeros else ""))
            else:
                fail += 1
                print(f"FAIL {t} against gguf-py: {first_diff(t, got[keep], want)}")
        if a.harness:
            ref = f"{a.work}/llamacpp.{t}"
            run([a.harness, t, src, ref])
            want = np.fromfile(ref, np.uint8).reshape(len(rows), -1)
            if np.array_equal(got, want):
                print(f"PASS {t}: byte-equal to llama.cpp's quantize_row_{t.replace('_k', '_K')}_ref on {len(rows)} rows "
                      f"of {ROW} ({len(rows) * ROW // BLOCK[t]} blocks; {a.rows} random, {nedge} edge)")
            else:
                fail += 1
                print(f"FAIL {t} against llama.cpp: {first_diff(t, got, want)}")
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
