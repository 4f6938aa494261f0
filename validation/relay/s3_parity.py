#!/usr/bin/env python3
"""S3 semantics of grpo-relay against an independent reference, moto's S3
server: the same boto3 calls go to both and their results must agree (keys,
common prefixes, truncation and pagination, ranges, conditional requests,
create-only puts, error codes). Usage:
  s3_parity.py RELAY_URL RELAY_CA RELAY_AK RELAY_SK MOTO_URL [PREFIX]
The relay serves bucket 'pail' (keys under PREFIX, default runs/r1/parity/, writable by the key
given); moto gets bucket 'parity'. Prints one line per comparison; exit 1 on any
difference."""
import sys
import boto3, botocore
from botocore.config import Config

relay_url, ca, ak, sk, moto_url = sys.argv[1:6]
cfg = Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1})
relay = boto3.client("s3", endpoint_url=relay_url, verify=ca, aws_access_key_id=ak, aws_secret_access_key=sk,
                     region_name="us-east-1", config=cfg)
moto = boto3.client("s3", endpoint_url=moto_url, aws_access_key_id="x", aws_secret_access_key="y",
                    region_name="us-east-1", config=cfg)
moto.create_bucket(Bucket="parity")
sides = [(relay, "pail"), (moto, "parity")]
P = sys.argv[6] if len(sys.argv) > 6 else "runs/r1/parity/"
fails = 0


def call(c, fn, **kw):
    try:
        r = getattr(c, fn)(**kw)
        r.pop("ResponseMetadata", None)
        if "Body" in r:
            r["Body"] = r["Body"].read()
        return ("ok", r)
    except botocore.exceptions.ClientError as e:
        return ("error", e.response["Error"].get("Code"), e.response["ResponseMetadata"]["HTTPStatusCode"])


def same(desc, fn, pick, **kw):
    global fails
    out = []
    for c, b in sides:
        out.append(pick(call(c, fn, Bucket=b, **kw)))
    ok = out[0] == out[1]
    fails += not ok
    print(("  same  " if ok else "  DIFF  ") + desc + ("" if ok else f"\n        relay: {out[0]}\n        moto:  {out[1]}"))


def listing(r):
    if r[0] != "ok":
        return r
    d = r[1]
    return ([c["Key"] for c in d.get("Contents", [])], [p["Prefix"] for p in d.get("CommonPrefixes", [])],
            d.get("IsTruncated"), d.get("KeyCount"))


keys = ["metrics/a.json", "metrics/b.json", "metrics/sub/c.json", "trainer/x y.json", "trainer/z+q.json",
        "trainer/ünï.json", "workers/w1.json", "workers/w2.json", "workers/w3.json", "run.json"]
for c, b in sides:
    for k in keys:
        c.put_object(Bucket=b, Key=P + k, Body=("body of " + k).encode(), Metadata={"pail-sha256": "m-" + str(len(k))})
    c.put_object(Bucket=b, Key=P + "trainer/empty", Body=b"")

same("list all", "list_objects_v2", listing, Prefix=P)
same("list with delimiter", "list_objects_v2", listing, Prefix=P, Delimiter="/")
same("list sub-prefix with delimiter", "list_objects_v2", listing, Prefix=P + "metrics/", Delimiter="/")
same("list start-after", "list_objects_v2", listing, Prefix=P, StartAfter=P + "trainer/x y.json")
same("list max-keys 3", "list_objects_v2", listing, Prefix=P, MaxKeys=3)
same("list max-keys 2 with delimiter", "list_objects_v2", listing, Prefix=P, Delimiter="/", MaxKeys=2)
same("list of nothing", "list_objects_v2", listing, Prefix=P + "nothing/")
same("list v1 with marker", "list_objects", lambda r: r if r[0] != "ok" else (
    [c["Key"] for c in r[1].get("Contents", [])], r[1].get("IsTruncated")), Prefix=P, Marker=P + "run.json")


def pages(c, b, **kw):
    out = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=b, **kw):
        out += [x["Key"] for x in page.get("Contents", [])] + ["/" + x["Prefix"] for x in page.get("CommonPrefixes", [])]
    return out


for kw in ({"Prefix": P, "PaginationConfig": {"PageSize": 2}},
           {"Prefix": P, "Delimiter": "/", "PaginationConfig": {"PageSize": 1}}):
    a, m = pages(relay, "pail", **kw), pages(moto, "parity", **kw)
    ok = a == m
    fails += not ok
    print(("  same  " if ok else "  DIFF  ") + f"paginated {kw}" + ("" if ok else f"\n        relay: {a}\n        moto:  {m}"))

body = lambda r: r if r[0] != "ok" else (r[1]["Body"], r[1].get("ContentLength"), r[1].get("ContentRange"),
                                         r[1].get("Metadata"))
same("get", "get_object", body, Key=P + "trainer/x y.json")
same("get empty object", "get_object", body, Key=P + "trainer/empty")
same("get range 2-5", "get_object", body, Key=P + "run.json", Range="bytes=2-5")
same("get range open end", "get_object", body, Key=P + "run.json", Range="bytes=3-")
same("get suffix range", "get_object", body, Key=P + "run.json", Range="bytes=-4")
same("get range past the end", "get_object", body, Key=P + "run.json", Range="bytes=5-1000")
same("get unsatisfiable range", "get_object", body, Key=P + "run.json", Range="bytes=1000-2000")
same("get missing key", "get_object", body, Key=P + "nope")
same("head", "head_object", lambda r: r if r[0] != "ok" else (r[1]["ContentLength"], r[1]["Metadata"]),
     Key=P + "workers/w1.json")
same("head missing key", "head_object", lambda r: r, Key=P + "nope")
etags = [c.head_object(Bucket=b, Key=P + "run.json")["ETag"] for c, b in sides]
for (c, b), e in zip(sides, etags):
    pass
res = [call(c, "get_object", Bucket=b, Key=P + "run.json", IfNoneMatch=e) for (c, b), e in zip(sides, etags)]
ok = [r[0] for r in res] == ["error", "error"] and res[0][2] == res[1][2] == 304
fails += not ok
print(("  same  " if ok else "  DIFF  ") + f"conditional get with the current etag: {res[0]} / {res[1]}")
same("conditional get with another etag", "get_object", body, Key=P + "run.json", IfNoneMatch='"abc"')
same("create-only put on an existing key", "put_object", lambda r: r if r[0] != "ok" else "ok",
     Key=P + "run.json", Body=b"x", IfNoneMatch="*")
same("create-only put on a new key", "put_object", lambda r: r if r[0] != "ok" else "ok",
     Key=P + "trainer/new.json", Body=b"x", IfNoneMatch="*")
same("get after the refused create-only put", "get_object", body, Key=P + "run.json")
same("delete", "delete_object", lambda r: r[0], Key=P + "workers/w3.json")
same("delete a missing key", "delete_object", lambda r: r[0], Key=P + "workers/none.json")
same("list after delete", "list_objects_v2", listing, Prefix=P + "workers/")
print(f"s3_parity: {fails} difference(s)")
sys.exit(1 if fails else 0)
