// AWS Signature Version 4 (AWS4-HMAC-SHA256), one step per function, backend
// neutral: the s3 client (store_s3.c) signs with it and grpo-relay verifies
// incoming requests with the same code. Canonicalization is S3's: paths are
// URI-encoded once and never normalized (no "." / ".." / "//" folding).
// Not here: presigned URLs (query-string auth) and chunked (streaming) signing.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"
#include "core/err.h"

#define SIGV4_ALGORITHM "AWS4-HMAC-SHA256"
#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct {
    const char *name, *value;  // borrowed; any case, untrimmed
} SigV4Header;

typedef struct {
    const char *name, *value;  // borrowed, raw (not percent-encoded); value NULL = ""
} SigV4Param;

// The request as the signer sees it (all borrowed).
typedef struct {
    const char *method;        // "GET", "PUT", ...
    const char *path;          // raw, decoded path, e.g. "/bucket/my key"; encoded here
    const char *query;         // raw or percent-encoded query without '?', may be NULL
    const SigV4Header *headers;
    int nheaders;
    const char *payload_hash;  // lowercase hex sha256 of the body, or UNSIGNED-PAYLOAD
} SigV4Request;

// Parts of an Authorization header (strings owned by the struct).
typedef struct {
    char access_key[128];
    char date[9];              // YYYYMMDD from the credential scope
    char region[64];
    char service[64];
    char signed_headers[1024]; // "host;x-amz-date;..." as sent
    char signature[65];
} SigV4Auth;

// Appends UriEncode(s[0..n)) as S3 defines it: every byte except A-Za-z0-9-._~
// becomes %XX (upper-case hex); '/' is kept when keep_slash. 0 / -1 (no memory).
int sigv4_uri_encode(Buf *out, const char *s, size_t n, bool keep_slash);
// Decodes %XX escapes of s[0..n) into out ('+' stays '+'). -1 on a malformed escape.
int sigv4_uri_decode(Buf *out, const char *s, size_t n);

// Canonical query string from raw pairs: each name and value URI-encoded, pairs
// sorted by encoded name then value, joined "n=v&n=v" (a missing value gives "n=").
int sigv4_canonical_query_pairs(Buf *out, const SigV4Param *params, int n);
// The same from a query string as it arrives on the wire (decoded, then re-encoded).
int sigv4_canonical_query(Buf *out, const char *query, PailErr *err);

// CanonicalRequest (method, URI, query, headers, signed headers, payload hash).
// Header names are lower-cased, values trimmed with inner space runs collapsed,
// repeated names joined with ',' in order. Every header in req is signed; the
// "a;b;c" list is written to signed_headers (when non-NULL, size cap).
int sigv4_canonical_request(Buf *out, const SigV4Request *req, char *signed_headers, size_t cap,
                            PailErr *err);
// "YYYYMMDD/region/service/aws4_request" into out (cap >= 160).
void sigv4_scope(char *out, size_t cap, const char *date8, const char *region, const char *service);
// StringToSign: algorithm, amz_date (YYYYMMDDTHHMMSSZ), scope, hex(sha256(creq)).
int sigv4_string_to_sign(Buf *out, const char *amz_date, const char *region, const char *service,
                         const char *creq, size_t creq_len);
// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date8), region), service), "aws4_request").
void sigv4_signing_key(uint8_t key[32], const char *secret, const char *date8, const char *region,
                       const char *service);
// hex(HMAC(key, string_to_sign)).
void sigv4_signature(char hex[65], const uint8_t key[32], const char *sts, size_t sts_len);

// The whole chain for req: the signature over the headers in req, and (when
// authz != NULL) the Authorization header value. Returns 0 / -1.
int sigv4_sign(const SigV4Request *req, const char *access_key, const char *secret,
               const char *amz_date, const char *region, const char *service, char sig[65],
               Buf *authz, PailErr *err);

// Splits "AWS4-HMAC-SHA256 Credential=AK/date/region/service/aws4_request,
// SignedHeaders=a;b, Signature=hex" (spaces after commas optional). -1 with a
// message naming the malformed part (never echoing the signature).
int sigv4_parse_authorization(const char *value, SigV4Auth *out, PailErr *err);
// For a verifier: the signature the client should have sent. Uses only the
// headers named in signed_headers (each must be present, else -1 naming it);
// req->headers holds everything received.
int sigv4_expected_signature(const SigV4Request *req, const char *signed_headers,
                             const char *secret, const char *amz_date, const char *region,
                             const char *service, char sig[65], PailErr *err);
// Constant-time comparison of two hex signatures.
bool sigv4_signature_equal(const char *a, const char *b);
// "YYYYMMDDTHHMMSSZ" for a unix time (UTC).
void sigv4_amz_date(char out[17], int64_t unix_s);
