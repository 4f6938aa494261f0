"""Reads a pail rollout shard with h5py (an independent HDF5 reader) and checks
the layout of doc/formats.md: attributes, dataset dtypes and shapes, offsets.
Usage: read_shard_h5py.py SHARD.h5   (exit 1 with a message on any mismatch)"""
import sys

import h5py
import numpy as np


def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


with h5py.File(sys.argv[1], "r") as f:
    a = f.attrs
    assert s(a["format"]) == "pail.rollout", a["format"]
    assert int(a["format_version"]) == 1
    for k in ("run_id", "worker_id", "base_sha256", "tokenizer_sha256"):
        assert isinstance(s(a[k]), str)
    for k in ("adapter_version", "created_unix", "top_k", "max_new_tokens", "seed"):
        assert np.issubdtype(np.asarray(a[k]).dtype, np.integer), k
    for k in ("temperature", "top_p"):
        assert np.issubdtype(np.asarray(a[k]).dtype, np.floating), k
    po, co = f["prompt_offsets"][:], f["completion_offsets"][:]
    P, N = len(po) - 1, len(co) - 1
    want = {"prompt_ids": ("int32", (po[-1],)), "prompt_offsets": ("int64", (P + 1,)),
            "prompt_index": ("int64", (P,)), "completion_ids": ("int32", (co[-1],)),
            "completion_offsets": ("int64", (N + 1,)), "group": ("int32", (N,)),
            "logprobs": ("float32", (co[-1],)), "rewards": ("float32", (N,)),
            "reward_valid": ("uint8", (N,)), "finish_reason": ("uint8", (N,))}
    for name, (dt, shape) in want.items():
        d = f[name]
        assert d.dtype == np.dtype(dt), (name, d.dtype)
        assert d.shape == shape, (name, d.shape, shape)
    rc = f["reward_components"]
    assert rc.dtype == np.float32 and rc.shape[0] == N
    names = [s(x) for x in rc.attrs["names"]]
    assert len(names) == rc.shape[1], names
    g = f["group"][:]
    G = N // P
    assert (g == np.arange(N) // G).all()
    assert (f["logprobs"][:] <= 0).all()
    print(f"h5py: {sys.argv[1]}: P={P} N={N} G={G} components={names} ok")
