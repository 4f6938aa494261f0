// Request routing and authentication for the relay, on plain data (no libevent
// here, so the fuzz target and the unit tests drive it directly): which S3
// operation a method + URI + Host names, with decoded, validated keys and query
// parameters; and SigV4 verification against the key file.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "relay/keys.h"
#include "store/sigv4.h"
#include "store/store.h"

typedef enum {
    OP_NONE = 0,
    OP_HEALTH,       // GET /-/health
    OP_LIST_BUCKETS, // GET / (ListBuckets: our one bucket)
    OP_HEAD_BUCKET,
    OP_LOCATION,     // GET ?location
    OP_LIST,         // ListObjectsV2 (list-type=2) or V1 (marker)
    OP_GET,
    OP_HEAD,
    OP_PUT,
    OP_DELETE,
    OP_MP_CREATE,    // POST ?uploads
    OP_MP_PART,      // PUT ?partNumber&uploadId
    OP_MP_COMPLETE,  // POST ?uploadId
    OP_MP_ABORT,     // DELETE ?uploadId
} RelayOp;

// An S3 error answer: HTTP status and S3 code ("AccessDenied", ...).
typedef struct {
    int status;
    char code[48];
} RelayFail;

typedef struct {
    RelayOp op;
    char bucket[256];
    char path[2 * STORE_MAX_KEY + 8];  // decoded path as signed ("/bucket/key" or "/key")
    char key[STORE_MAX_KEY + 1];       // decoded object key ("" for bucket operations)
    // ListObjects
    bool list_v2;
    char prefix[STORE_MAX_KEY + 1], start_after[STORE_MAX_KEY + 1];
    char token[STORE_MAX_KEY + 64];      // the backend's continuation token (decoded)
    char token_raw[2 * STORE_MAX_KEY];   // as the client sent it (base64url of token)
    char delimiter[16];
    int max_keys;                      // 1..1000
    int wait_s;                        // x-pail-wait (0 = none)
    bool encoding_url;                 // encoding-type=url
    // multipart
    char upload_id[128];
    int part_number;
} RelayRoute;

// Parses method + raw URI ("/path?query", as on the wire) + Host. `bucket` is the
// one bucket the relay serves (path-style "/bucket/key" or virtual-host
// "bucket.host"). Keys are percent-decoded once and then checked with
// store_key_check, so "%2e%2e", NUL and control characters are refused.
// Returns 0, or -1 with fail (status + S3 code) and err (the reason).
int relay_route_parse(const char *method, const char *uri, const char *host, const char *bucket,
                      RelayRoute *out, RelayFail *fail, PailErr *err);
const char *relay_op_name(RelayOp op);
// Continuation tokens are the backend's, wrapped in base64url (the file store's
// may hold bytes XML cannot carry). Encode: 0 / -1 (too long). Decode: -1 when
// s is not a token this relay could have issued.
int relay_token_encode(const char *tok, char *out, size_t cap);
int relay_token_decode(const char *s, char *out, size_t cap);

typedef struct {
    const char *method;
    const char *path;            // decoded path (RelayRoute.path)
    const char *query;           // raw query string (may be NULL)
    const SigV4Header *headers;  // everything received
    int nheaders;
    bool tls;                    // UNSIGNED-PAYLOAD is accepted over TLS only
    int64_t now;                 // unix seconds
} RelayAuthIn;

// Verifies the Authorization header (AWS4-HMAC-SHA256): known key id, date within
// 15 minutes, scope date = x-amz-date's date, service s3, signature. On success
// *who points into keys and payload_hash gets x-amz-content-sha256 (a hex hash,
// UNSIGNED-PAYLOAD or STREAMING-UNSIGNED-PAYLOAD-TRAILER), which the caller
// checks against the body with relay_payload_check. Never logs or echoes secrets.
int relay_auth_verify(const RelayKeys *keys, const RelayAuthIn *in, const RelayKey **who, char payload_hash[72],
                      RelayFail *fail, PailErr *err);
// Checks a hex payload hash against body; the unsigned forms pass. 0 / -1 (400
// XAmzContentSHA256Mismatch).
int relay_payload_check(const char *payload_hash, const uint8_t *body, size_t len, RelayFail *fail, PailErr *err);
// The same for a body hashed as it arrived (hex: its sha256).
int relay_payload_check_digest(const char *payload_hash, const char *hex, RelayFail *fail, PailErr *err);
// Decodes an aws-chunked body (STREAMING-UNSIGNED-PAYLOAD-TRAILER, as botocore
// sends over TLS) into out, checking x-amz-checksum-crc32 when it is the trailer.
// 0 / -1 (400 InvalidRequest / BadDigest).
int relay_aws_chunked_decode(const uint8_t *body, size_t len, Buf *out, RelayFail *fail, PailErr *err);
// The same, handing the decoded bytes to sink (0 / -1) as they are found.
typedef int (*RelaySink)(void *ctx, const uint8_t *p, size_t n);
int relay_aws_chunked_decode_to(const uint8_t *body, size_t len, RelaySink sink, void *ctx, RelayFail *fail,
                                PailErr *err);
// The header value by case-insensitive name, or NULL.
const char *relay_header(const SigV4Header *h, int n, const char *name);
