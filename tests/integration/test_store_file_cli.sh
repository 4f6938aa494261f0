#!/usr/bin/env bash
# grpo-ctl on the file:// backend: round trips, listing, create-only and
# versioned publish, and its errors and exit codes.
source "$(dirname "$0")/lib.sh"
CTL="$BIN/grpo-ctl"
D="file://$WORK/bucket"
head -c 300000 /dev/urandom >"$WORK/a.bin"
check "put" "$CTL" put "$D/x/a.bin" "$WORK/a.bin"
check "get" "$CTL" get "$D/x/a.bin" "$WORK/a.out"
check "bytes identical" cmp "$WORK/a.bin" "$WORK/a.out"
check "stored as a plain file" cmp "$WORK/a.bin" "$WORK/bucket/x/a.bin"
"$CTL" ls --keys --recursive "$D/" >"$WORK/ls.txt"
check "ls shows the URL" grep -qx "$D/x/a.bin" "$WORK/ls.txt"
check "ls hides pail sidecars" bash -c "! grep -q '/\.pail' '$WORK/ls.txt'"
check "versioned publish" "$CTL" put --versioned "$D/adapters/v00000001.h5" "$WORK/a.bin"
expect_fail "versioned publish of other bytes" 1 "different content" "$CTL" put --versioned "$D/adapters/v00000001.h5" /etc/hostname
check "verified get" "$CTL" get --verify "$D/adapters/v00000001.h5" "$WORK/v1"
printf 'X' | dd of="$WORK/bucket/adapters/v00000001.h5" bs=1 seek=100 conv=notrunc status=none
expect_fail "verified get of a corrupted object" 1 "sha256" "$CTL" get --verify "$D/adapters/v00000001.h5" "$WORK/v1"
expect_fail "missing key" 1 "not found" "$CTL" get "$D/nothing" "$WORK/x"
expect_fail "relative file URL" 2 "absolute" "$CTL" get file://rel/x "$WORK/x"
expect_fail "key with .." 1 "'\.\.'" "$CTL" put "$D/../escape" "$WORK/a.bin"
expect_fail "missing local file" 1 "/no/such/file" "$CTL" put "$D/k" /no/such/file
expect_fail "no command" 2 "missing command" "$CTL"
check "--help exits 0" "$CTL" put --help
for t in grpo-train grpo-rollout grpo-relay; do
  check "$t --help" "$BIN/$t" --help
done
finish
