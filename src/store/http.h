// Thin libcurl layer for the s3 backend: one reusable easy handle (keep-alive
// across requests), peer verification always on, bodies from memory or a file
// range, responses into a Buf, a file descriptor or a running sha256. It
// reports transport failures as XferResult and never retries: store_s3.c does.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <curl/curl.h>
#include "core/buf.h"
#include "core/sha256.h"
#include "store/retry.h"
#include "store/store.h"

typedef struct {
    CURL *curl;             // owned; one per Store (not thread-safe, like Store)
    char *ca_bundle;        // owned, NULL = system trust store
    int timeout_s;          // connect timeout and stall limit
} HttpClient;

typedef struct {
    const char *method;            // GET HEAD PUT POST DELETE
    const char *url;               // complete URL, already encoded
    struct curl_slist *headers;    // every header to send (borrowed)
    const uint8_t *body;           // request body from memory, or
    int body_fd;                   // from this file (>= 0) at body_off
    uint64_t body_off, body_len;
    Buf *sink;                     // 2xx response body appended here, or
    int sink_fd;                   // written to this fd (>= 0), or
    Sha256 *sink_hash;             // hashed (non-NULL); none of them = discarded
    int extra_timeout_s;           // added to the stall limit (relay long-poll)
} HttpRequest;

typedef struct {
    XferResult xfer;
    char xfer_msg[CURL_ERROR_SIZE + 64];  // curl's description when xfer != XFER_OK
    long status;
    Buf err_body;                  // non-2xx body, first 64 KiB (owned)
    char etag[80];                 // quotes stripped
    int64_t content_length;        // -1 when absent
    uint64_t total_size;           // from Content-Range "bytes a-b/total", else content_length
    int64_t last_modified;         // unix seconds, 0 when absent
    bool relay;                    // x-pail-relay: 1
    int nmeta;
    StoreMeta meta[STORE_MAX_META];
    int meta_dropped;              // x-amz-meta-* headers beyond STORE_MAX_META
    uint64_t received;             // body bytes delivered to the sink
    int resends;                   // times libcurl rewound the body and sent the request again
                                   // within this perform (a reused connection had died): an
                                   // earlier copy may have reached the server
} HttpResponse;

int http_client_init(HttpClient *c, const char *ca_bundle, int timeout_s, PailErr *err);
void http_client_free(HttpClient *c);
// Runs one request. Returns 0 when an HTTP response arrived (any status), -1 on
// a transport failure (resp->xfer / xfer_msg say which). resp is reset first;
// free it with http_response_free. A body can be sent more than once (see
// resends): libcurl retries a request whose reused connection died unanswered.
int http_perform(HttpClient *c, const HttpRequest *req, HttpResponse *resp);
void http_response_free(HttpResponse *r);
