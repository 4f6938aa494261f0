// Listening servers (grpo-relay, grpo-rollout --serve): HOST:PORT parsing, the
// loopback test that decides where plain HTTP may listen, and one TLS server
// context (TLS 1.2-1.3, forward-secret AEAD suites only).
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <openssl/ssl.h>
#include "core/err.h"

// "HOST:PORT" or "[v6]:PORT" -> host (cap bytes), *port (0..65535). flag names
// the option in messages ("--listen").
int net_split_listen(const char *s, const char *flag, char *host, size_t cap, int *port, PailErr *err);
// Does every address host resolves to lie on loopback (127/8, ::1)?
bool net_is_loopback(const char *host);
// A server context from a PEM certificate chain and private key; the flags
// name the options in messages. *out: SSL_CTX_free it.
int net_tls_server(const char *cert, const char *key, const char *cert_flag, const char *key_flag, SSL_CTX **out,
                   PailErr *err);
// The process may hold need file descriptors: raises the soft RLIMIT_NOFILE
// (up to the hard one) when it is lower. -1 with err when the hard limit is
// lower; flag names the option that asks for them.
int net_reserve_fds(long need, const char *flag, PailErr *err);
