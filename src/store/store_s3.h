// Extras of the s3:// backend beyond the Store interface (store.h): used by
// grpo-ctl (init, doctor) and the tests. Each takes a Store opened on s3://.
#pragma once
#include "store/store.h"

// PUT /bucket (CreateBucket, with a LocationConstraint outside us-east-1).
// An existing bucket owned by the caller is not an error.
int store_s3_create_bucket(Store *st, PailErr *err);
// Does the endpoint honour create-only PUT (If-None-Match: *)? PUTs a probe key
// under the store's prefix twice with If-None-Match: *, then deletes it.
// Returns 1 when the second PUT was refused (412), 0 when the store overwrote
// the object (create-only is NOT safe there), -1 with err on failure.
int store_s3_probe_create_only(Store *st, PailErr *err);
// The next multipart part's size: what the observed upload throughput (bytes/s;
// 0: none yet, then max) sends in `seconds`, within [5 MiB, max] (max/8 when a
// test's max is under 5 MiB), at least what leaves the rest within S3's 10,000
// parts, at most 5 GiB, and at most `remaining` (the last part).
uint64_t s3_part_size(uint64_t max, double rate_bps, double seconds, uint64_t remaining, int parts_done);
