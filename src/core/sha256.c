// SHA-256 and HMAC-SHA256 through OpenSSL 3 EVP (no hand-written crypto).
#include "core/sha256.h"
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct Sha256 { EVP_MD_CTX *ctx; };

Sha256 *sha256_new(void) {
    Sha256 *s = malloc(sizeof *s);
    if (!s) return NULL;
    s->ctx = EVP_MD_CTX_new();
    if (!s->ctx || EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(s->ctx);
        free(s);
        return NULL;
    }
    return s;
}

void sha256_update(Sha256 *s, const void *data, size_t len) {
    if (len) EVP_DigestUpdate(s->ctx, data, len);
}

void sha256_final_raw(Sha256 *s, uint8_t out[32]) {
    unsigned int n = 32;
    EVP_DigestFinal_ex(s->ctx, out, &n);
    EVP_MD_CTX_free(s->ctx);
    free(s);
}

void hex_encode(const uint8_t *in, size_t len, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * len] = 0;
}

void sha256_final_hex(Sha256 *s, char hex[65]) {
    uint8_t raw[32];
    sha256_final_raw(s, raw);
    hex_encode(raw, 32, hex);
}

void sha256_raw(const void *data, size_t len, uint8_t out[32]) {
    unsigned int n = 32;
    EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

void sha256_hex(const void *data, size_t len, char hex[65]) {
    uint8_t raw[32];
    sha256_raw(data, len, raw);
    hex_encode(raw, 32, hex);
}

int sha256_file_hex(const char *path, char hex[65], PailErr *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, PAIL_ERR_IO, "%s: %s", path, strerror(errno));
    Sha256 *s = sha256_new();
    if (!s) { fclose(f); return err_set(err, PAIL_ERR_NOMEM, "sha256: out of memory"); }
    static __thread char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sha256_update(s, buf, n);
    int bad = ferror(f);
    fclose(f);
    sha256_final_hex(s, hex);
    if (bad) return err_set(err, PAIL_ERR_IO, "%s: read error", path);
    return 0;
}

void hmac_sha256(const void *key, size_t keylen, const void *data, size_t len, uint8_t out[32]) {
    unsigned int n = 32;
    HMAC(EVP_sha256(), key, (int)keylen, data, len, out, &n);
}
