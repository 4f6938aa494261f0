// SHA-256 on OpenSSL's EVP: one-shot, streaming and whole-file, as lowercase hex.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

typedef struct Sha256 Sha256;  // opaque streaming context
Sha256 *sha256_new(void);
void sha256_update(Sha256 *s, const void *data, size_t len);
void sha256_final_hex(Sha256 *s, char hex[65]);  // also frees s
void sha256_final_raw(Sha256 *s, uint8_t out[32]);  // also frees s
void sha256_hex(const void *data, size_t len, char hex[65]);
void sha256_raw(const void *data, size_t len, uint8_t out[32]);
int sha256_file_hex(const char *path, char hex[65], PailErr *err);
void hex_encode(const uint8_t *in, size_t len, char *out);  // out holds 2*len+1
// HMAC-SHA256 (for SigV4 key derivation and signatures).
void hmac_sha256(const void *key, size_t keylen, const void *data, size_t len, uint8_t out[32]);
