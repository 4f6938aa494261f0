// grpo-relay: the HTTPS bucket gateway. Until the relay lands (issue:
// grpo-relay), it parses its flags and --help, and refuses to run.
#include <stdio.h>
#include "core/flags.h"

int main(int argc, char **argv) {
    char *listen = NULL, *root = NULL, *upstream = NULL, *keys = NULL, *cert = NULL, *key = NULL;
    bool http;
    Flag fl[] = {
        {"listen", FLAG_STRING, &listen, "127.0.0.1:9000", 1, 0, "HOST:PORT to listen on"},
        {"root", FLAG_STRING, &root, NULL, 1, 0, "serve a local folder as the bucket"},
        {"upstream", FLAG_STRING, &upstream, NULL, 1, 0, "serve an upstream s3://bucket/prefix"},
        {"keys", FLAG_STRING, &keys, NULL, 1, 0, "key file: ACCESS_KEY_ID SECRET ROLE [PREFIX] per line"},
        {"cert", FLAG_STRING, &cert, NULL, 1, 0, "TLS certificate (PEM)"},
        {"key", FLAG_STRING, &key, NULL, 1, 0, "TLS private key (PEM)"},
        {"http", FLAG_BOOL, &http, "false", 1, 0, "plain HTTP (loopback addresses only)"},
    };
    int n = sizeof fl / sizeof fl[0];
    PailErr err = {0};
    int rc = flags_parse(fl, n, argc, argv, NULL, NULL, &err);
    if (rc == FLAGS_HELP) {
        flags_usage(stdout, "grpo-relay --listen HOST:PORT (--root DIR | --upstream s3://B/P) --keys FILE [flags]",
                    "HTTPS S3 gateway for a pail run (not implemented yet).", fl, n);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "grpo-relay: %s\n", err.msg);
        return 2;
    }
    fprintf(stderr, "grpo-relay: not implemented yet: the relay is not built in this version of pail\n");
    flags_free(fl, n);
    return 1;
}
