#!/usr/bin/env bash
# pail's HDF5 files open in the standard tools: a rollout shard (src/shard, a
# version-2 one with a multi-turn completion mask) and an adapter (src/lora)
# are read back by h5py (doc/formats.md) and by h5dump.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tests/check_shard" "$BUILD/tests/check_lora" >/dev/null || { bad "build"; finish; exit 1; }
check "write a sample shard" env PAIL_SHARD_SAMPLE="$WORK/shard.h5" "$ROOT/$BUILD/tests/check_shard"
check "h5py reads the shard layout" "$PY" "$ROOT/validation/formats/read_shard_h5py.py" "$WORK/shard.h5"
cp "$WORK/last.out" "$WORK/h5py.out"
check "...a version-2 shard with a multi-turn completion mask" \
  grep -q "version 2 .* model tokens 29/33 turns=\[1, 1, 1, 1, 2, 1, 1, 1, 1, 3, 1, 1\]" "$WORK/h5py.out"
check "h5dump reads every object" h5dump "$WORK/shard.h5"
check "...the mask among them" bash -c "h5dump -d completion_mask '$WORK/shard.h5' | grep -q 'H5T_STD_U8LE'"
check "write a sample adapter" env PAIL_ADAPTER_SAMPLE="$WORK/adapter.h5" "$ROOT/$BUILD/tests/check_lora"
check "h5py reads the adapter layout" "$PY" "$ROOT/validation/formats/read_adapter_h5py.py" "$WORK/adapter.h5"
check "h5dump reads the adapter" h5dump -H "$WORK/adapter.h5"
finish
