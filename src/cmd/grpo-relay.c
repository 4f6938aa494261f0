// grpo-relay: the HTTPS bucket gateway (doc/relay.md). Parses flags, opens the
// relay (src/relay/) and runs it until SIGTERM/SIGINT; SIGHUP reloads --keys.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "core/flags.h"
#include "core/log.h"
#include "relay/relay.h"

int main(int argc, char **argv) {
    char *listen = NULL, *root = NULL, *upstream = NULL, *bucket = NULL, *keys = NULL, *cert = NULL, *key = NULL;
    char *endpoint = NULL, *ca_bundle = NULL, *region = NULL, *spool = NULL, *access_log = NULL;
    bool http = false;
    long cache_bytes, stream_bytes, max_body, max_conns, max_header, idle_s, header_s, threads, max_wait;
    long max_uploads, uploads_per_key, trainer_uploads, spool_bytes, spool_per_key, trainer_spool;
    double poll_s, max_outage, upload_expiry, upload_lifetime, min_body_rate, body_window;
    long threads_per_key;
    double list_recheck;
    Flag fl[] = {
        {"listen", FLAG_STRING, &listen, "127.0.0.1:9000", 1, 0, "HOST:PORT to listen on (port 0: any free port)"},
        {"root", FLAG_STRING, &root, NULL, 1, 0, "serve a local folder as the bucket (file:// store)"},
        {"upstream", FLAG_STRING, &upstream, NULL, 1, 0, "serve an upstream s3://bucket/prefix (credentials: AWS_*)"},
        {"endpoint", FLAG_STRING, &endpoint, NULL, 1, 0, "upstream endpoint URL (default AWS_ENDPOINT_URL, else AWS S3)"},
        {"ca-bundle", FLAG_STRING, &ca_bundle, NULL, 1, 0, "CA bundle for the upstream (default AWS_CA_BUNDLE)"},
        {"region", FLAG_STRING, &region, NULL, 1, 0, "upstream region (default AWS_REGION)"},
        // Short, unlike the other tools' hour: a request held longer than the
        // clients' 30 s stall limit is resent by them while a backend thread
        // still retries the first copy; a 503 hands the waiting to the clients.
        {"max-outage", FLAG_DOUBLE, &max_outage, "20", 0.1, 1e7,
         "seconds an --upstream request is retried before the client gets 503 ServiceUnavailable (clients "
         "keep retrying under their own --max-outage); keep it under their 30 s stall limit"},
        {"bucket", FLAG_STRING, &bucket, "pail", 1, 0, "the bucket name clients address (path or virtual-host style)"},
        {"keys", FLAG_STRING, &keys, NULL, 1, 0, "key file: ACCESS_KEY_ID SECRET ROLE [PREFIX] per line; trainer and rollout need PREFIX, their run (SIGHUP reloads)"},
        {"cert", FLAG_STRING, &cert, NULL, 1, 0, "TLS certificate chain (PEM)"},
        {"key", FLAG_STRING, &key, NULL, 1, 0, "TLS private key (PEM)"},
        {"http", FLAG_BOOL, &http, "false", 1, 0, "plain HTTP instead of TLS (loopback addresses only)"},
        {"cache-bytes", FLAG_INT, &cache_bytes, "268435456", 0, 1e15, "LRU cache of immutable objects, bytes"},
        {"stream-bytes", FLAG_INT, &stream_bytes, "268435456", 1048576, 1e15,
         "object bytes read but not yet sent to clients, all connections together"},
        {"max-body-bytes", FLAG_INT, &max_body, "67108864", 1024, 5e9,
         "largest request body (PUT or one part); bodies stream to the spool, never whole in memory"},
        {"max-connections", FLAG_INT, &max_conns, "1024", 1, 1e6, "open connections at most"},
        {"max-header-bytes", FLAG_INT, &max_header, "16384", 1024, 1048576, "largest request header section"},
        {"idle-timeout", FLAG_INT, &idle_s, "60", 1, 3600, "seconds a connection may stall reading or writing"},
        {"header-timeout", FLAG_INT, &header_s, "30", 1, 3600,
         "seconds to deliver a request's header section (slowloris); a body goes by --min-body-rate"},
        {"min-body-rate", FLAG_DOUBLE, &min_body_rate, "32768", 1, 1e12,
         "bytes/s a request body must average over each --body-window, or the connection is closed"},
        {"body-window", FLAG_DOUBLE, &body_window, "20", 0.2, 3600, "seconds over which --min-body-rate is measured"},
        {"threads", FLAG_INT, &threads, "8", 1, 256, "backend worker threads"},
        {"threads-per-key", FLAG_INT, &threads_per_key, "0", 0, 256,
         "backend threads one access key may hold at once; keys are served round-robin (0: --threads minus a "
         "quarter, 6 of 8, so one key's requests never hold them all)"},
        {"list-recheck", FLAG_DOUBLE, &list_recheck, "1.0", 0.001, 3600,
         "--root: seconds between looks at a folder's mtime for the listing index (outside changes to --root "
         "show in listings within this; the relay's own writes at once)"},
        {"max-wait", FLAG_INT, &max_wait, "25", 1, 300, "cap on a long-poll's x-pail-wait seconds"},
        {"poll-interval", FLAG_DOUBLE, &poll_s, "1.0", 0.05, 60, "seconds between re-LISTs for parked long-polls"},
        {"spool", FLAG_STRING, &spool, NULL, 1, 0, "folder for multipart parts and request bodies as they arrive (default: a temp folder)"},
        {"max-uploads", FLAG_INT, &max_uploads, "1024", 2, 1e6, "multipart uploads in progress, all keys together"},
        {"max-uploads-per-key", FLAG_INT, &uploads_per_key, "64", 1, 1e6,
         "multipart uploads in progress per access key (more: 503 SlowDown)"},
        {"trainer-uploads", FLAG_INT, &trainer_uploads, "64", 1, 1e6,
         "of --max-uploads, how many only trainer keys may take (no worker key can keep the trainer from publishing)"},
        {"upload-expiry", FLAG_DOUBLE, &upload_expiry, "900", 1, 1e7,
         "seconds a multipart upload may sit idle before it is aborted and its spool files removed"},
        {"upload-lifetime", FLAG_DOUBLE, &upload_lifetime, "7200", 1, 1e7,
         "seconds a multipart upload may stay open from its creation, however active, before it is aborted"},
        {"spool-bytes", FLAG_INT, &spool_bytes, "17179869184", 2, 1e15,
         "bytes the spool may hold (parts, bodies arriving), all keys together (more: 503 SlowDown)"},
        {"spool-bytes-per-key", FLAG_INT, &spool_per_key, "4294967296", 1, 1e15,
         "bytes the spool may hold for one access key (more: 503 SlowDown)"},
        {"trainer-spool-bytes", FLAG_INT, &trainer_spool, "4294967296", 1, 1e15,
         "of --spool-bytes, how many only trainer keys may take (no worker key can keep the trainer from publishing)"},
        {"access-log", FLAG_STRING, &access_log, NULL, 1, 0, "append access-log lines here (default stdout)"},
    };
    int n = sizeof fl / sizeof fl[0];
    int rc = flags_cli("grpo-relay",
                       "grpo-relay --listen HOST:PORT (--root DIR | --upstream s3://B/P) --keys FILE --cert F --key F",
                       "HTTPS S3 gateway for pail runs: SigV4 keys with roles, a cache of immutable objects, "
                       "long-polls for new versions. See doc/relay.md.",
                       fl, n, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    PailErr err = {0};
    log_init("grpo-relay", LOG_INFO);
    flags_print(stderr, fl, n);
    // Each connection is a descriptor: lift the soft limit to the hard one.
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    FILE *alog = NULL;
    if (access_log && !(alog = fopen(access_log, "a"))) {
        fprintf(stderr, "grpo-relay: --access-log %s: cannot open for appending\n", access_log);
        flags_free(fl, n);
        return 2;
    }
    // Fully buffered: the relay flushes the access log every 200 ms, not per line.
    setvbuf(alog ? alog : stdout, NULL, _IOFBF, 1 << 16);
    StoreOptions so = {.endpoint = endpoint, .ca_bundle = ca_bundle, .region = region, .retry_seconds = max_outage};
    RelayConfig cfg = {.listen = listen, .root = root, .upstream = upstream, .upstream_opt = &so, .bucket = bucket,
                       .keys_path = keys, .cert = cert, .key = key, .http = http,
                       .cache_bytes = (uint64_t)cache_bytes, .stream_bytes = (uint64_t)stream_bytes, .max_body_bytes = (uint64_t)max_body,
                       .max_connections = max_conns, .max_header_bytes = max_header, .idle_timeout_s = (int)idle_s,
                       .header_timeout_s = (int)header_s, .threads = (int)threads,
                       .threads_per_key = (int)threads_per_key, .list_recheck_s = list_recheck, .max_wait_s = (int)max_wait,
                       .poll_interval_s = poll_s, .spool = spool, .max_uploads = (int)max_uploads,
                       .max_uploads_per_key = (int)uploads_per_key, .trainer_uploads = (int)trainer_uploads,
                       .upload_expiry_s = upload_expiry, .upload_lifetime_s = upload_lifetime,
                       .spool_bytes = (uint64_t)spool_bytes, .spool_bytes_per_key = (uint64_t)spool_per_key,
                       .trainer_spool_bytes = (uint64_t)trainer_spool, .min_body_rate = min_body_rate,
                       .body_window_s = body_window, .signals = true, .access_log = alog};
    Relay *r = NULL;
    if (relay_open(&r, &cfg, &err) < 0) {
        fprintf(stderr, "grpo-relay: %s\n", err.msg);
        flags_free(fl, n);
        return err.code == PAIL_ERR_INVALID ? 2 : 1;
    }
    log_info("relay: serving bucket '%s' from %s on %s://%s (port %d)", bucket, root ? root : upstream,
             http ? "http" : "https", listen, relay_port(r));
    rc = relay_run(r, &err);
    if (rc < 0) fprintf(stderr, "grpo-relay: %s\n", err.msg);
    else log_info("relay: stopped");
    relay_close(r);
    if (alog) fclose(alog);
    flags_free(fl, n);
    return rc < 0 ? 1 : 0;
}
