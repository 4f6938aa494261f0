#!/usr/bin/env bash
# LIST at scale and fairness (issue 43, item 4): 100k shard files under --root
# and 128 connections of the rollout key listing 1000-key pages of rollouts/ in
# a loop; meanwhile the trainer key's HEAD and PUT p99 must stay under 1 s.
# Before the listing index and the per-key share of the backend threads, each
# page walked and sorted the whole tree on one of 8 threads, and the trainer's
# requests queued behind 128 of them (each counted at its 5 s client timeout).
# Then the index against outside changes: a file put into --root behind the
# relay's back is listed within --list-recheck, one deleted is never listed.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_relay.sh"
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/relay_load" >/dev/null || exit 1
LOAD=$ROOT/$BUILD/tools/relay_load
# --root on tmpfs where there is one: 100k files are created in seconds there
# (minutes on a busy disk), and no inode writeback competes with the listings.
R=$WORK/root
if [ -d /dev/shm ] && SHM=$(mktemp -d /dev/shm/pail-relay-list-XXXXXX 2>/dev/null); then
  trap 'rm -rf "$SHM"; cleanup' EXIT
  rm -rf "$R" && ln -s "$SHM" "$R"
fi
check "100k empty shard files under --root" "$LOAD" populate "$R" runs/r1 100000
sed 's/^/        /' "$WORK/last.out"
sync -f "$R/"  # written back before the measurement: the load is the listings, not the disk
mkdir -p "$R/runs/r1/adapters"
echo 1 >"$R/runs/r1/adapters/LATEST"
start_relay --threads 8 --list-recheck 0.2 || exit 1
if "$LOAD" fair "$RELAY_URL" "$RELAY_CA" "$RO_AK" "$RO_SK" "$TR_AK" "$TR_SK" runs/r1 128 6 1000 >"$WORK/fair.out" 2>&1; then
  ok "trainer HEAD and PUT p99 < 1 s under 128 listing connections of the rollout key"
else
  bad "trainer HEAD and PUT p99 < 1 s under 128 listing connections of the rollout key"
fi
sed 's/^/        /' "$WORK/fair.out"
grep -q "listing index: 100001 keys" "$WORK/relay.log" && ok "the index read the 100001 keys at start" ||
  bad "the index read the 100001 keys at start: $(grep 'listing index' "$WORK/relay.log")"

relay_aws_env "$OP_AK" "$OP_SK"
PY=$(venv)/bin/python
lsout() { "$PY" - "$1" <<'PY'
import boto3, sys
s3 = boto3.client("s3")
keys = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket="pail", Prefix=sys.argv[1]):
    keys += [o["Key"] for o in page.get("Contents", [])]
print("\n".join(keys))
PY
}
if "$PY" -c "import boto3"; then
  lsout runs/r1/rollouts/v00000007/ >"$WORK/ls1"
  check "a version folder lists its 256 shards (boto3, paginated)" test "$(wc -l <"$WORK/ls1")" = 256
  touch "$R/runs/r1/rollouts/v00000007/outside-000001.h5"
  rm "$R/runs/r1/rollouts/v00000007/w3-000007.h5"
  lsout runs/r1/rollouts/v00000007/ >"$WORK/ls2"
  check "a file deleted behind the relay is never listed" bash -c "! grep -q w3-000007 '$WORK/ls2'"
  sleep 0.5
  lsout runs/r1/rollouts/v00000007/ >"$WORK/ls3"
  check "a file put behind the relay is listed within --list-recheck" grep -q outside-000001 "$WORK/ls3"
  lsout runs/r1/rollouts/v0000001 >"$WORK/all"
  (cd "$R/" && find runs/r1/rollouts -path 'runs/r1/rollouts/v0000001*' -type f | LC_ALL=C sort) >"$WORK/find"
  check "10 folders list as one sequence in byte order ($(wc -l <"$WORK/find") keys, 3 pages)" cmp "$WORK/all" "$WORK/find"
else
  bad "boto3 missing from the project venv"
fi
finish
