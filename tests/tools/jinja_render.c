// Dev driver for the chat-template interpreter: `jinja_render TEMPLATE.jinja VARS.json`
// renders the template with the JSON object's keys as globals and prints the output to
// stdout; on failure prints the error to stderr and exits 1. With --spans, also prints the
// {% generation %} byte spans to stderr, one "begin end" a line.
// `jinja_render --cases CASES.jsonl [--now UNIX]`: each line {"template": T, "vars": {...}} is
// parsed and rendered on its own; prints one JSON line per case, {"out": TEXT} or {"error": MSG}
// (validation/tokenizer/jinja_semantics.py compares them with jinja2). --now fixes strftime_now.
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

// One case of --cases: parse, render, and one JSON line on stdout.
static void run_case(json_t *c, int64_t now, int lineno) {
    json_t *tj = json_object_get(c, "template"), *vars = json_object_get(c, "vars");
    json_t *res = json_object();
    if (!json_is_string(tj) || !json_is_object(vars)) {
        json_object_set_new(res, "error",
                            json_sprintf("case line %d: needs a string 'template' and an object 'vars'", lineno));
    } else {
        PailErr err = {0};
        JinjaTemplate *t;
        Buf out = {0};
        JinjaLimits lim = JINJA_LIMITS_DEFAULT;
        lim.now = now;
        if (jinja_parse(&t, json_string_value(tj), json_string_length(tj), "t", &err) < 0) {
            json_object_set_new(res, "error", json_string(err.msg));
        } else {
            if (jinja_render(t, vars, &lim, &out, NULL, &err) < 0) json_object_set_new(res, "error", json_string(err.msg));
            else {
                json_t *text = json_stringn(out.data ? (char *)out.data : "", out.len);
                json_object_set_new(res, text ? "out" : "error", text ? text : json_string("output is not valid UTF-8"));
            }
            jinja_free(t);
        }
        buf_free(&out);
    }
    char *line = json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (line) printf("%s\n", line);
    free(line);
    json_decref(res);
}

static int run_cases(const char *path, int64_t now) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot read\n", path);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        json_error_t je;
        json_t *c = json_loads(line, JSON_ALLOW_NUL, &je);
        if (!c) {
            fprintf(stderr, "%s:%d: %s\n", path, lineno, je.text);
            free(line);
            fclose(f);
            return 1;
        }
        run_case(c, now, lineno);
        json_decref(c);
    }
    free(line);
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "--cases")) {
        int64_t now = INT64_MIN;
        if (argc == 5 && !strcmp(argv[3], "--now")) now = strtoll(argv[4], NULL, 10);
        else if (argc != 3) {
            fprintf(stderr, "usage: jinja_render --cases CASES.jsonl [--now UNIX]\n");
            return 2;
        }
        return run_cases(argv[2], now);
    }
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
