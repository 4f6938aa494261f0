"""Reads a pail rollout shard with h5py (an independent HDF5 reader) and checks
the layout of doc/formats.md: attributes, dataset dtypes and shapes, offsets;
for version 2 the multi-turn completion mask (environment tokens have log-prob
0) and the turns (at least 1 for a completion with tokens).
Usage: read_shard_h5py.py SHARD.h5   (exit 1 with a message on any mismatch)"""
import sys

import h5py
import numpy as np


def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


with h5py.File(sys.argv[1], "r") as f:
    a = f.attrs
    assert s(a["format"]) == "pail.rollout", a["format"]
    version = int(a["format_version"])
    assert version in (1, 2), version
    for k in ("run_id", "worker_id", "base_sha256", "tokenizer_sha256"):
        assert isinstance(s(a[k]), str)
    for k in ("adapter_version", "created_unix", "top_k", "max_new_tokens", "seed"):
        assert np.issubdtype(np.asarray(a[k]).dtype, np.integer), k
    for k in ("temperature", "top_p", "min_p"):
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
    lp = f["logprobs"][:]
    assert (lp <= 0).all()
    extra = ""
    if version >= 2:
        for name, (dt, shape) in {"completion_mask": ("uint8", (co[-1],)), "turns": ("int32", (N,))}.items():
            assert f[name].dtype == np.dtype(dt) and f[name].shape == shape, (name, f[name].dtype, f[name].shape)
        m, turns = f["completion_mask"][:], f["turns"][:]
        assert np.isin(m, (0, 1)).all(), "completion_mask outside {0, 1}"
        assert (lp[m == 0] == 0).all(), "an environment token has a log-prob other than 0"
        lens = np.diff(co)
        assert (turns >= np.where(lens > 0, 1, 0)).all(), turns
        extra = f" model tokens {int(m.sum())}/{len(m)} turns={turns.tolist()}"
    print(f"h5py: {sys.argv[1]}: version {version} P={P} N={N} G={G} components={names}{extra} ok")
