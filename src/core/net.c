// See net.h.
#include "core/net.h"
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <openssl/err.h>

bool net_is_loopback(const char *host) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return false;
    bool ok = true;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            uint32_t ip = ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr);
            if ((ip >> 24) != 127) ok = false;
        } else if (a->ai_family == AF_INET6) {
            if (!IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr)) ok = false;
        } else {
            ok = false;
        }
    }
    freeaddrinfo(res);
    return ok;
}

int net_split_listen(const char *s, const char *flag, char *host, size_t cap, int *port, PailErr *err) {
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s) return err_set(err, PAIL_ERR_INVALID, "%s '%s': want HOST:PORT", flag, s);
    size_t hl = (size_t)(colon - s);
    const char *h = s;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') h++, hl -= 2;
    if (hl >= cap) return err_set(err, PAIL_ERR_INVALID, "%s '%s': host too long", flag, s);
    memcpy(host, h, hl);
    host[hl] = 0;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || p < 0 || p > 65535)
        return err_set(err, PAIL_ERR_INVALID, "%s '%s': port must be 0..65535", flag, s);
    *port = (int)p;
    return 0;
}

static const char *ssl_reason(void) {
    const char *s = ERR_reason_error_string(ERR_get_error());
    return s ? s : "?";
}

int net_tls_server(const char *cert, const char *key, const char *cert_flag, const char *key_flag, SSL_CTX **out,
                   PailErr *err) {
    SSL_CTX *c = *out = SSL_CTX_new(TLS_server_method());
    if (!c) return err_set(err, PAIL_ERR_NOMEM, "SSL_CTX_new failed");
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION);
    SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    // TLS 1.2: forward-secret AEAD suites only.
    SSL_CTX_set_cipher_list(c, "ECDHE+AESGCM:ECDHE+CHACHA20");
    if (SSL_CTX_use_certificate_chain_file(c, cert) != 1)
        return err_set(err, PAIL_ERR_INVALID, "%s %s: cannot load the certificate chain (PEM): %s", cert_flag, cert,
                       ssl_reason());
    if (SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM) != 1)
        return err_set(err, PAIL_ERR_INVALID, "%s %s: cannot load the private key (PEM): %s", key_flag, key,
                       ssl_reason());
    if (SSL_CTX_check_private_key(c) != 1)
        return err_set(err, PAIL_ERR_INVALID, "%s %s does not match the certificate %s", key_flag, key, cert);
    return 0;
}

int net_reserve_fds(long need, const char *flag, PailErr *err) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return 0;  // (nothing to check against)
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)need) return 0;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)need)
        return err_set(err, PAIL_ERR_INVALID, "%s needs about %ld file descriptors and the limit is %llu (ulimit -Hn): "
                       "lower %s or raise the limit", flag, need, (unsigned long long)rl.rlim_max, flag);
    rl.rlim_cur = (rlim_t)need;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
        return err_set(err, PAIL_ERR_INVALID, "%s needs about %ld file descriptors and the limit (ulimit -n) cannot be "
                       "raised to it", flag, need);
    return 0;
}
