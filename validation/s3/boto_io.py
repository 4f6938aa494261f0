"""boto3 as an independent S3 client for pail's cross-client tests.
  boto_io.py put BUCKET KEY FILE | get BUCKET KEY FILE | head BUCKET KEY | ls BUCKET PREFIX
Endpoint and credentials from the AWS_* environment. head prints JSON with
ETag, ContentLength and Metadata. Uploads use boto3's managed transfer
(multipart above 8 MiB)."""
import json
import sys

import boto3

s3 = boto3.client("s3")
op = sys.argv[1]
if op == "put":
    s3.upload_file(sys.argv[4], sys.argv[2], sys.argv[3])
elif op == "get":
    s3.download_file(sys.argv[2], sys.argv[3], sys.argv[4])
elif op == "head":
    h = s3.head_object(Bucket=sys.argv[2], Key=sys.argv[3])
    print(json.dumps({"ETag": h["ETag"], "ContentLength": h["ContentLength"], "Metadata": h["Metadata"]}))
elif op == "ls":
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[2], Prefix=sys.argv[3])
    for page in pages:
        for o in page.get("Contents", []):
            print(o["Key"], o["Size"])
else:
    sys.exit(f"boto_io.py: unknown op {op}")
