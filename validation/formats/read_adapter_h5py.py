"""Reads a pail adapter file with h5py and checks doc/formats.md's layout:
attributes, and layers/<i>/<module>/lora_A (R, in) / lora_B (out, R) float32.
Usage: read_adapter_h5py.py ADAPTER.h5"""
import sys

import h5py
import numpy as np


def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


with h5py.File(sys.argv[1], "r") as f:
    a = f.attrs
    assert s(a["format"]) == "pail.lora" and int(a["format_version"]) == 1
    R, L = int(a["rank"]), int(a["num_layers"])
    assert abs(float(a["scaling"]) - float(a["alpha"]) / R) < 1e-9 or int(a["use_rslora"])
    targets = [s(t) for t in a["target_modules"]]
    for k in ("version", "step", "created_unix"):
        assert np.issubdtype(np.asarray(a[k]).dtype, np.integer), k
    assert len(s(a["base_sha256"])) == 64
    for i in range(L):
        for m in targets:
            A, B = f[f"layers/{i}/{m}/lora_A"], f[f"layers/{i}/{m}/lora_B"]
            assert A.dtype == np.float32 and B.dtype == np.float32
            assert A.shape[0] == R and B.shape[1] == R, (i, m, A.shape, B.shape)
    print(f"h5py: {sys.argv[1]}: rank {R}, {L} layers, targets {targets} ok")
