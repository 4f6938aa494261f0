// libFuzzer target for grpo-relay's request handling on hostile input (`make
// fuzz`, then build/fuzz/fuzz_relay tests/fuzz/corpus/relay): routing of
// method + URI + Host, SigV4 verification, the key file parser, the role
// policy, aws-chunked bodies, the CompleteMultipartUpload parser, the XML
// writers and continuation tokens. Input: flags byte, then "METHOD\nURI\nHOST\nname:value\n...\n\nBODY".
// With flag 1 the harness signs the request itself, and verification must then
// succeed (sign/verify agree on any canonicalization). Not part of CI.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/sha256.h"
#include "core/timeutil.h"
#include "relay/keys.h"
#include "relay/request.h"
#include "relay/xmlout.h"
#include "store/sigv4.h"

static const char KEYS[] = "AKTRAINER trainer-secret-0123456789 trainer runs/r1\n"
                           "AKOPERATOR operator-secret-0123456789 operator\n";

static char *take_line(const uint8_t **p, const uint8_t *end) {
    const uint8_t *s = *p, *nl = memchr(s, '\n', (size_t)(end - s));
    size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
    char *out = malloc(n + 1);
    memcpy(out, s, n);
    out[n] = 0;
    *p = nl ? nl + 1 : end;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static RelayKeys keys;
    static int init;
    PailErr err = {0};
    if (!init) {
        if (relay_keys_parse(&keys, KEYS, strlen(KEYS), "fuzz", &err) < 0) abort();
        init = 1;
    }
    if (size < 1) return 0;
    // The whole input as a key file (it must never crash, whatever it says).
    RelayKeys k2;
    if (relay_keys_parse(&k2, (const char *)data, size, "fuzz", &err) == 0) relay_keys_free(&k2);

    uint8_t flags = data[0];
    const uint8_t *p = data + 1, *end = data + size;
    char *method = take_line(&p, end), *uri = take_line(&p, end), *host = take_line(&p, end);
    enum { MAXH = 16 };
    SigV4Header h[MAXH + 4];
    char *hn[MAXH], *hv[MAXH];
    int nh = 0;
    while (p < end && nh < MAXH) {
        char *line = take_line(&p, end);
        if (!line[0]) {
            free(line);
            break;
        }
        char *colon = strchr(line, ':');
        if (!colon) {
            free(line);
            continue;
        }
        *colon = 0;
        hn[nh] = line;
        hv[nh] = colon + 1;
        h[nh] = (SigV4Header){hn[nh], hv[nh]};
        nh++;
    }
    const uint8_t *body = p;
    size_t blen = (size_t)(end - p);

    RelayRoute rt;
    RelayFail fail;
    int rc = relay_route_parse(method, uri, host, "pail", &rt, &fail, &err);
    if (rc < 0 && (fail.status < 400 || !fail.code[0])) abort();
    if (rc == 0 && rt.key[0]) {
        if (store_key_check(rt.key, &err) < 0) abort();  // routing only hands out valid keys
        for (int r = 0; r < 4; r++)
            for (int a = 0; a < 3; a++) relay_policy_allows((RelayRole)r, (flags & 2) ? "runs/r1" : "", a, rt.key, NULL);
    }
    if (rc == 0) relay_policy_allows_list("runs/r1", rt.prefix);

    // Authentication: as received, or (flag 1) signed here first.
    char amz[17], hash[65];
    sigv4_amz_date(amz, time_unix_s());
    sha256_hex(body, blen, hash);
    int n = nh;
    Buf authz = {0};
    bool sign = (flags & 1) && rc == 0 && rt.path[0];
    const char *qm = strchr(uri, '?');
    if (sign) {
        // Only well-formed header names take part (SigV4 lists them joined by ';').
        int m = 0;
        for (int i = 0; i < n; i++) {
            bool okname = hn[i][0] != 0;
            for (const char *c = hn[i]; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-')) okname = false;
            if (okname && strcmp(hn[i], "host") && strcmp(hn[i], "x-amz-date") && strcmp(hn[i], "x-amz-content-sha256") &&
                strcmp(hn[i], "authorization"))
                h[m++] = h[i];
        }
        n = m;
        h[n++] = (SigV4Header){"host", host};
        h[n++] = (SigV4Header){"x-amz-date", amz};
        h[n++] = (SigV4Header){"x-amz-content-sha256", hash};
        SigV4Request sr = {.method = method, .path = rt.path, .query = qm ? qm + 1 : NULL, .headers = h,
                           .nheaders = n, .payload_hash = hash};
        char sig[65];
        if (sigv4_sign(&sr, (flags & 4) ? "AKOPERATOR" : "AKTRAINER",
                       (flags & 4) ? "operator-secret-0123456789" : "trainer-secret-0123456789", amz, "us-east-1",
                       "s3", sig, &authz, &err) == 0)
            h[n++] = (SigV4Header){"authorization", (const char *)authz.data};
        else
            sign = false;
    }
    RelayAuthIn ai = {.method = method, .path = rt.path[0] ? rt.path : "/", .query = qm ? qm + 1 : NULL,
                      .headers = h, .nheaders = n, .tls = flags & 8, .now = time_unix_s()};
    const RelayKey *who = NULL;
    char ph[72];
    int arc = relay_auth_verify(&keys, &ai, &who, ph, &fail, &err);
    if (sign && arc != 0) {
        fprintf(stderr, "signed request refused: %s\n", err.msg);
        abort();
    }
    if (arc == 0) {
        if (!who) abort();
        if (relay_payload_check(ph, body, blen, &fail, &err) != 0 && sign) abort();
    }
    buf_free(&authz);

    // Bodies: aws-chunked, CompleteMultipartUpload.
    Buf dec = {0};
    if (relay_aws_chunked_decode(body, blen, &dec, &fail, &err) == 0 && dec.len > blen) abort();
    buf_free(&dec);
    RelayPart *parts = NULL;
    int np = 0;
    if (relay_xml_parse_complete((const char *)body, blen, &parts, &np, &fail, &err) == 0) {
        for (int i = 1; i < np; i++)
            if (parts[i].number <= parts[i - 1].number) abort();
        free(parts);
    }
    // XML writers with hostile keys: the listing of the route with the URI as a key.
    if (rc == 0) {
        StoreList l = {0};
        store_list_push(&l, uri, blen, 0, host);
        store_list_push_prefix(&l, host);
        l.truncated = flags & 16;
        Buf x = {0};
        relay_xml_list(&x, "pail", &rt, &l);
        relay_xml_error(&x, "Code", uri, host, "id");
        buf_free(&x);
        store_list_free(&l);
    }
    // Continuation tokens: encode/decode round trip, hostile decode.
    char tok[8192], back[4096];
    if (strlen(uri) < 3000 && relay_token_encode(uri, tok, sizeof tok) == 0) {
        if (relay_token_decode(tok, back, sizeof back) != 0 || strcmp(back, uri)) abort();
    }
    relay_token_decode(host, back, sizeof back);
    for (int i = 0; i < nh; i++) free(hn[i]);
    free(method);
    free(uri);
    free(host);
    return 0;
}
