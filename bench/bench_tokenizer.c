// Tokenizer encode speed against the Hugging Face tokenizers library, in one run on the
// same documents (a few MB of prose, code and multilingual text written by
// validation/tokenizer/bench_hf.py), both on one thread. Validates first: pail's ids for
// every document must hash equal to the library's. Usage: bench_tokenizer [tokenizer.json]
// (default: the published Qwen3 file in ../shared/reference, else the locally built one).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "core/fsutil.h"
#include "core/sha256.h"
#include "tokenizer/tokenizer.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int run_line(const char *cmd, char *out, size_t cap) {  // first stdout line of cmd
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    out[0] = 0;
    char *ok = fgets(out, (int)cap, p);
    while (ok && fgetc(p) != EOF) {}
    int rc = pclose(p);
    if (!ok || rc != 0) return -1;
    out[strcspn(out, "\n")] = 0;
    return 0;
}

typedef struct {
    const char **doc;
    size_t *len;
    size_t n, bytes;
} Docs;

static double encode_all(Tokenizer *t, const Docs *d, TokenIds *ids, Sha256 *h, size_t *count) {
    PailErr err = {0};
    double t0 = now();
    for (size_t i = 0; i < d->n; i++) {
        ids->len = 0;
        if (tokenizer_encode(t, d->doc[i], d->len[i], ids, &err) < 0) {
            fprintf(stderr, "bench_tokenizer: document %zu: %s\n", i, err.msg);
            exit(1);
        }
        if (h) sha256_update(h, ids->data, ids->len * sizeof(int32_t));  // x86: little-endian int32
        if (count) *count += ids->len;
    }
    return now() - t0;
}

int main(int argc, char **argv) {
    char tok_path[4096], venv[4096], line[4096], cmd[8192];
    const char *ref = "../shared/reference/tokenizers/qwen3/tokenizer.json";
    if (argc > 1) snprintf(tok_path, sizeof tok_path, "%s", argv[1]);
    else if (access(ref, R_OK) == 0) snprintf(tok_path, sizeof tok_path, "%s", ref);
    else {
        if (run_line("bash validation/tokenizer/built.sh", line, sizeof line) < 0) {
            fprintf(stderr, "bench_tokenizer: no tokenizer: %s absent and validation/tokenizer/built.sh failed\n", ref);
            return 1;
        }
        snprintf(tok_path, sizeof tok_path, "%s/qwen/tokenizer.json", line);
    }
    if (run_line("bash mk/venv.sh", venv, sizeof venv) < 0) {
        fprintf(stderr, "bench_tokenizer: mk/venv.sh failed (the reference needs the test venv)\n");
        return 1;
    }
    char docs_path[] = "/tmp/pail-bench-tok-XXXXXX";
    int fd = mkstemp(docs_path);
    if (fd < 0) { perror("mkstemp"); return 1; }
    close(fd);
    snprintf(cmd, sizeof cmd, "'%s/bin/python' validation/tokenizer/bench_hf.py '%s' '%s' 4", venv, tok_path, docs_path);
    if (run_line(cmd, line, sizeof line) < 0) {
        fprintf(stderr, "bench_tokenizer: reference run failed: %s\n", cmd);
        unlink(docs_path);
        return 1;
    }
    json_error_t je;
    json_t *hf = json_loads(line, 0, &je);
    Buf raw = {0};
    PailErr err = {0};
    int rc = fs_read_file(docs_path, &raw, &err);
    unlink(docs_path);
    if (!hf || rc < 0) { fprintf(stderr, "bench_tokenizer: bad reference output: %s %s\n", line, err.msg); return 1; }
    Docs d = {0};
    size_t cap = 0;
    for (size_t off = 0; off + 4 <= raw.len;) {
        uint32_t n;
        memcpy(&n, raw.data + off, 4);
        if (d.n == cap) {
            cap = cap ? cap * 2 : 1024;
            d.doc = realloc(d.doc, cap * sizeof *d.doc);
            d.len = realloc(d.len, cap * sizeof *d.len);
        }
        d.doc[d.n] = (const char *)raw.data + off + 4;
        d.len[d.n++] = n;
        d.bytes += n;
        off += 4 + n;
    }
    Tokenizer *t;
    double t0 = now();
    if (tokenizer_load(&t, tok_path, &err) < 0) { fprintf(stderr, "bench_tokenizer: %s\n", err.msg); return 1; }
    double load_s = now() - t0;
    TokenIds ids = {0};
    Sha256 *h = sha256_new();
    size_t count = 0;
    double cold = encode_all(t, &d, &ids, h, &count);
    char hex[65];
    sha256_final_hex(h, hex);
    const char *want = json_string_value(json_object_get(hf, "sha256"));
    size_t want_n = (size_t)json_integer_value(json_object_get(hf, "ids"));
    if (!want || strcmp(hex, want) || count != want_n) {
        printf("FAIL tokenizer: pail's ids differ from the tokenizers library's on the bench documents "
               "(%zu ids vs %zu); see tests/integration/test_tokenizer.sh\n", count, want_n);
        return 1;
    }
    double warm = 1e30;
    for (int r = 0; r < 3; r++) {
        double s = encode_all(t, &d, &ids, NULL, NULL);
        if (s < warm) warm = s;
    }
    Buf out = {0};  // decode speed over the same ids, document by document
    double dec = 0;
    for (size_t i = 0; i < d.n; i++) {
        ids.len = 0;
        encode_all(t, &(Docs){d.doc + i, d.len + i, 1, d.len[i]}, &ids, NULL, NULL);
        buf_reset(&out);
        double s = now();
        tokenizer_decode(t, ids.data, ids.len, false, &out, &err);
        dec += now() - s;
    }
    double mb = (double)d.bytes / 1e6, hf_mbs = json_number_value(json_object_get(hf, "encode_mbs"));
    printf("tokenizer %s: %zu documents, %.1f MB, %zu ids; pail ids == library ids (sha256 %.16s)\n", tok_path, d.n, mb,
           count, hex);
    printf("  load            %.2f s\n", load_s);
    printf("  pail encode     %.1f MB/s warm cache, %.1f MB/s cold (1 thread)\n", mb / warm, mb / cold);
    printf("  HF tokenizers   %.1f MB/s encode, %.1f MB/s encode_batch (1 thread)\n", hf_mbs,
           json_number_value(json_object_get(hf, "encode_batch_1thread_mbs")));
    printf("  ratio pail/HF   %.2fx (warm vs encode)\n", mb / warm / hf_mbs);
    printf("  pail decode     %.1f MB/s of text\n", mb / dec);
    buf_free(&out);
    buf_free(&raw);
    token_ids_free(&ids);
    tokenizer_free(t);
    json_decref(hf);
    free(d.doc);
    free(d.len);
    return 0;
}
