#!/usr/bin/env python3
"""An independent AWS SigV4 signer (hashlib/hmac only) for the relay tests:
sends one request with a chosen date, body and signed payload hash, so the
tests can make stale, tampered or unsigned requests that real clients refuse
to make. Prints "STATUS CODE" (the S3 error code, or '-') and, with
--print-body, the body. Usage:
  relay_sign.py METHOD URL AK SK [--body S] [--signed-body S] [--age SECONDS]
                [--unsigned] [--no-auth] [--header 'k: v'] [--print-body]
                [--timeout S] [--ca FILE]
"""
import argparse, datetime, hashlib, hmac, http.client, re, ssl, sys, time, urllib.parse


def sign(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("method"); ap.add_argument("url"); ap.add_argument("ak"); ap.add_argument("sk")
    ap.add_argument("--body", default=""); ap.add_argument("--signed-body")
    ap.add_argument("--age", type=int, default=0); ap.add_argument("--unsigned", action="store_true")
    ap.add_argument("--no-auth", action="store_true"); ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--print-body", action="store_true"); ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--ca")
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url)
    t = datetime.datetime.utcfromtimestamp(time.time() - a.age)
    amz = t.strftime("%Y%m%dT%H%M%SZ"); day = amz[:8]
    signed_body = a.body if a.signed_body is None else a.signed_body
    ph = "UNSIGNED-PAYLOAD" if a.unsigned else hashlib.sha256(signed_body.encode()).hexdigest()
    headers = {"host": u.netloc, "x-amz-date": amz, "x-amz-content-sha256": ph}
    for h in a.header:
        k, v = h.split(":", 1); headers[k.strip().lower()] = v.strip()
    # Canonical request (S3: the decoded path, URI-encoded once).
    path = u.path or "/"
    cpath = urllib.parse.quote(urllib.parse.unquote_to_bytes(path), safe="/-_.~")  # bytes: keys that are not UTF-8 too
    pairs = sorted((urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~"))
                   for k, v in urllib.parse.parse_qsl(u.query, keep_blank_values=True))
    cq = "&".join(f"{k}={v}" for k, v in pairs)
    names = sorted(headers)
    ch = "".join(f"{n}:{' '.join(headers[n].split())}\n" for n in names)
    sh = ";".join(names)
    creq = "\n".join([a.method, cpath, cq, ch, sh, ph])
    scope = f"{day}/us-east-1/s3/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(creq.encode()).hexdigest()])
    k = sign(sign(sign(sign(("AWS4" + a.sk).encode(), day), "us-east-1"), "s3"), "aws4_request")
    sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    if not a.no_auth:
        headers["authorization"] = f"AWS4-HMAC-SHA256 Credential={a.ak}/{scope}, SignedHeaders={sh}, Signature={sig}"
    ctx = ssl.create_default_context(cafile=a.ca) if u.scheme == "https" else None
    c = (http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=a.timeout) if ctx
         else http.client.HTTPConnection(u.hostname, u.port, timeout=a.timeout))
    c.request(a.method, path + ("?" + u.query if u.query else ""), body=a.body.encode() if a.body else None,
              headers=headers)
    r = c.getresponse()
    body = r.read().decode(errors="replace")
    m = re.search(r"<Code>([^<]*)</Code>", body)
    print(r.status, m.group(1) if m else "-", r.getheader("x-pail-relay", "0"))
    if a.print_body:
        print(body)


if __name__ == "__main__":
    sys.exit(main())
