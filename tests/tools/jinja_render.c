// Dev driver for the chat-template interpreter: `jinja_render TEMPLATE.jinja VARS.json`
// renders the template with the JSON object's keys as globals and prints the output to
// stdout; on failure prints the error to stderr and exits 1. With --spans, also prints the
// {% generation %} byte spans to stderr, one "begin end" a line.
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "tokenizer/jinja.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    Buf b = {0};
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (buf_append(&b, tmp, n) < 0) break;
    fclose(f);
    *len = b.len;
    if (!b.data && buf_append(&b, "", 0) < 0) return NULL;
    return (char *)b.data;
}

int main(int argc, char **argv) {
    bool spans = argc > 1 && !strcmp(argv[1], "--spans");
    if (argc != 3 + spans) {
        fprintf(stderr, "usage: jinja_render [--spans] TEMPLATE.jinja VARS.json\n");
        return 2;
    }
    const char *tpath = argv[1 + spans], *vpath = argv[2 + spans];
    size_t len;
    char *src = slurp(tpath, &len);
    if (!src) {
        fprintf(stderr, "%s: cannot read\n", tpath);
        return 1;
    }
    json_error_t je;
    json_t *vars = json_load_file(vpath, 0, &je);
    if (!vars) {
        fprintf(stderr, "%s:%d: %s\n", vpath, je.line, je.text);
        return 1;
    }
    const char *name = strrchr(tpath, '/') ? strrchr(tpath, '/') + 1 : tpath;
    PailErr err = {0};
    JinjaTemplate *t;
    if (jinja_parse(&t, src, len, name, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    Buf out = {0};
    JinjaSpans gen = {0};
    JinjaLimits lim = JINJA_LIMITS_DEFAULT;
    int rc = jinja_render(t, vars, &lim, &out, spans ? &gen : NULL, &err);
    if (rc < 0) {
        fprintf(stderr, "%s\n", err.msg);
    } else {
        fwrite(out.data, 1, out.len, stdout);
        for (int i = 0; i < gen.n; i++) fprintf(stderr, "%zu %zu\n", gen.spans[i].begin, gen.spans[i].end);
    }
    free(gen.spans);
    buf_free(&out);
    jinja_free(t);
    json_decref(vars);
    free(src);
    return rc < 0;
}
