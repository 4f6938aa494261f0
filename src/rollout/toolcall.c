// Tool-call parsing for the Hermes / Qwen and Llama 3 families (toolcall.h, doc/tool-calls.md).
// Works on (pointer, length) spans of the caller's text; jansson decodes each call's JSON, with
// JSON_DISABLE_EOF_CHECK where the end of a call is only known once its JSON is read.
#define _GNU_SOURCE  // memmem
#include "rollout/toolcall.h"
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define TC_OPEN "<tool_call>"
#define TC_CLOSE "</tool_call>"
#define PY_TAG "<|python_tag|>"

typedef struct {
    const char *p;
    size_t n;
} Span;

int tool_format_parse(const char *s, ToolFormat *out, PailErr *err) {
    if (s && !strcmp(s, "none")) *out = TOOL_FORMAT_NONE;
    else if (s && (!strcmp(s, "hermes") || !strcmp(s, "qwen"))) *out = TOOL_FORMAT_HERMES;
    else if (s && !strcmp(s, "llama3")) *out = TOOL_FORMAT_LLAMA3;
    else return err_set(err, PAIL_ERR_INVALID, "tool-call format '%s' is unknown: use none, hermes (or qwen) or llama3",
                        s ? s : "(null)");
    return 0;
}

const char *tool_format_name(ToolFormat f) {
    return f == TOOL_FORMAT_HERMES ? "hermes" : f == TOOL_FORMAT_LLAMA3 ? "llama3" : "none";
}

ToolFormat tool_format_detect(const char *t) {
    if (!t) return TOOL_FORMAT_NONE;
    if (strstr(t, TC_OPEN)) return TOOL_FORMAT_HERMES;
    if (strstr(t, PY_TAG) || strstr(t, "ipython")) return TOOL_FORMAT_LLAMA3;
    return TOOL_FORMAT_NONE;
}

// ---- spans ----

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static Span trim(Span s) {
    while (s.n && is_ws(*s.p)) s.p++, s.n--;
    while (s.n && is_ws(s.p[s.n - 1])) s.n--;
    return s;
}

static bool starts(Span s, const char *lit) {
    size_t k = strlen(lit);
    return s.n >= k && !memcmp(s.p, lit, k);
}

static const char *find(Span s, const char *lit) { return memmem(s.p, s.n, lit, strlen(lit)); }

static Span from(Span s, const char *q) { return (Span){q, (size_t)(s.p + s.n - q)}; }

// Generation stops on these (eos / eot ids); with special tokens kept they end the text.
static Span strip_end_markers(Span s) {
    static const char *const marks[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end_of_text|>"};
    for (bool again = true; again;) {
        again = false;
        s = trim(s);
        for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
            size_t k = strlen(marks[i]);
            if (s.n >= k && !memcmp(s.p + s.n - k, marks[i], k)) s.n -= k, again = true;
        }
    }
    return s;
}

// A leading <think>...</think> block. Templates that put "<think>\n" in the generation prompt
// (QwQ, DeepSeek-R1) leave only the closing tag in the generated text: then everything before
// it is the reasoning. An unclosed block (generation cut off) is all reasoning.
static void split_think(Span s, Span *think, Span *rest) {
    *think = (Span){s.p, 0};
    *rest = s;
    const char *close = find(s, "</think>");
    if (starts(s, "<think>")) {
        Span in = from(s, s.p + 7);
        const char *c = find(in, "</think>");
        *think = c ? (Span){in.p, (size_t)(c - in.p)} : in;
        *rest = c ? from(s, c + 8) : (Span){s.p + s.n, 0};
    } else if (close && !memmem(s.p, (size_t)(close - s.p), "<think>", 7)) {
        *think = (Span){s.p, (size_t)(close - s.p)};
        *rest = from(s, close + 8);
    }
}

// ---- call objects ----

// A JSON string of s, invalid UTF-8 (a multi-byte character cut by the token limit) replaced by
// U+FFFD, since jansson refuses it. NULL only when out of memory.
static json_t *json_text(Span s) {
    char *o = malloc(s.n * 3 + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < s.n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t m = utf8proc_iterate((const utf8proc_uint8_t *)s.p + i, (utf8proc_ssize_t)(s.n - i), &c);
        if (m > 0) memcpy(o + k, s.p + i, (size_t)m), k += (size_t)m, i += (size_t)m;
        else memcpy(o + k, "\xEF\xBF\xBD", 3), k += 3, i++;
    }
    json_t *j = json_stringn(o, k);
    free(o);
    return j;
}

// Appends {"error": msg, "raw": raw}. 0 / -1 out of memory.
__attribute__((format(printf, 3, 4))) static int add_error(json_t *calls, Span raw, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *c = msg; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    json_t *e = json_object();
    if (!e || json_object_set_new(e, "error", json_string(msg)) || json_object_set_new(e, "raw", json_text(trim(raw))))
        return json_decref(e), -1;
    return json_array_append_new(calls, e);
}

// Checks one decoded call (steals obj) and appends it or its error; *good counts the good ones.
static int add_call(json_t *calls, json_t *obj, Span raw, int *good) {
    json_t *name = json_object_get(obj, "name");
    const char *akey = json_object_get(obj, "arguments") ? "arguments" : "parameters";
    json_t *args = json_object_get(obj, akey);
    // json_is_object() is a macro that evaluates its argument twice: decode first.
    json_t *dec = json_is_string(args) ? json_loadb(json_string_value(args), json_string_length(args), 0, NULL) : NULL;
    static const char *const kinds[] = {"an object", "an array", "a string", "a number", "a number", "true", "false", "null"};
    int rc;
    if (!json_is_object(obj))
        rc = add_error(calls, raw, "the call is %s, not a JSON object", kinds[json_typeof(obj)]);
    else if (!name)
        rc = add_error(calls, raw, "no \"name\"");
    else if (!json_is_string(name))
        rc = add_error(calls, raw, "\"name\" is %s, not a string", kinds[json_typeof(name)]);
    else if (!json_string_length(name))
        rc = add_error(calls, raw, "\"name\" is empty");
    else if (json_is_string(args) && !json_is_object(dec))
        rc = add_error(calls, raw, "\"%s\" is a string that does not hold a JSON object", akey);
    else if (args && !json_is_null(args) && !json_is_object(args) && !json_is_string(args))
        rc = add_error(calls, raw, "\"%s\" is %s, not an object", akey, kinds[json_typeof(args)]);
    else {
        json_t *a = dec ? json_incref(dec) : json_is_object(args) ? json_incref(args) : json_object();
        json_t *c = json_pack("{s:O, s:o}", "name", name, "arguments", a);
        rc = c ? json_array_append_new(calls, c) : -1;
        if (!rc) ++*good;
    }
    json_decref(dec);
    json_decref(obj);
    return rc;
}

// ---- the families ----

typedef struct {
    char *s;  // room for the whole text
    size_t n;
} Text;

static void text_add(Text *t, Span s) { memcpy(t->s + t->n, s.p, s.n), t->n += s.n; }

// <tool_call>JSON</tool_call> blocks anywhere in body; the text around them is content.
static int parse_hermes(Span body, json_t *calls, Text *content, int *good) {
    for (;;) {
        const char *open = find(body, TC_OPEN);
        if (!open) return text_add(content, body), 0;
        text_add(content, (Span){body.p, (size_t)(open - body.p)});
        Span in = trim(from(body, open + strlen(TC_OPEN)));
        // Read the JSON first: a "</tool_call>" inside one of its strings must not end the call.
        json_error_t je;
        json_t *obj = json_loadb(in.p, in.n, JSON_DISABLE_EOF_CHECK, &je);
        Span after = obj ? trim(from(in, in.p + je.position)) : in;
        const char *close = obj && starts(after, TC_CLOSE) ? after.p : find(in, TC_CLOSE);
        if (!close) {
            json_decref(obj);
            return add_error(calls, in, "unclosed " TC_OPEN " (no " TC_CLOSE " after it)");
        }
        Span raw = {in.p, (size_t)(close - in.p)};
        int rc;
        if (obj && close == after.p) {
            rc = add_call(calls, obj, raw, good);
        } else {
            json_decref(obj);
            json_decref(json_loadb(raw.p, raw.n, 0, &je));  // the error within the block's own text
            rc = add_error(calls, raw, "bad JSON at character %d: %s", je.position, je.text);
        }
        if (rc) return -1;
        body = from(body, close + strlen(TC_CLOSE));
    }
}

// Whether an untagged turn is a call: its first JSON object has "name" and "parameters" or
// "arguments", or it does not parse but opens with {"name" (a broken call, worth feedback).
static bool llama_is_call(Span s) {
    if (!starts(s, "{")) return false;
    json_t *o = json_loadb(s.p, s.n, JSON_DISABLE_EOF_CHECK, NULL);
    bool yes;
    if (o) yes = json_object_get(o, "name") && (json_object_get(o, "parameters") || json_object_get(o, "arguments"));
    else yes = starts(trim(from(s, s.p + 1)), "\"name\"");
    json_decref(o);
    return yes;
}

// JSON objects separated by ';' or whitespace; text after the last one is content.
static int parse_llama(Span body, json_t *calls, Text *content, int *good) {
    bool tagged = starts(body, PY_TAG);
    Span s = tagged ? trim(from(body, body.p + strlen(PY_TAG))) : body;
    if (!tagged && !llama_is_call(s)) return text_add(content, body), 0;
    if (tagged && !starts(s, "{"))
        return add_error(calls, s, "no JSON object after " PY_TAG " (built-in tool calls such as "
                                   "brave_search.call(...) are not parsed)");
    for (;;) {
        while (s.n && (is_ws(*s.p) || *s.p == ';')) s.p++, s.n--;
        if (!starts(s, "{")) return text_add(content, s), 0;
        json_error_t je;
        json_t *obj = json_loadb(s.p, s.n, JSON_DISABLE_EOF_CHECK, &je);
        if (!obj) return add_error(calls, s, "bad JSON at character %d: %s", je.position, je.text);
        if (add_call(calls, obj, (Span){s.p, (size_t)je.position}, good)) return -1;
        s = from(s, s.p + je.position);
    }
}

static char *dup_span(Span s) {
    char *o = malloc(s.n + 1);
    if (o) memcpy(o, s.p, s.n), o[s.n] = 0;
    return o;
}

int tool_calls_parse(ToolFormat f, const char *text, json_t **calls, char **content, char **reasoning, PailErr *err) {
    Span all = strip_end_markers((Span){text ? text : "", text ? strlen(text) : 0}), think, body;
    split_think(all, &think, &body);
    body = trim(body);
    *calls = json_array();
    *content = NULL;
    if (reasoning) *reasoning = dup_span(trim(think));
    Text t = {malloc(body.n + 1), 0};
    int good = 0, rc = !*calls || !t.s || (reasoning && !*reasoning) ? -1 : 0;
    if (!rc && f == TOOL_FORMAT_HERMES) rc = parse_hermes(body, *calls, &t, &good);
    else if (!rc && f == TOOL_FORMAT_LLAMA3) rc = parse_llama(body, *calls, &t, &good);
    else if (!rc) text_add(&t, body);
    if (!rc) *content = dup_span(trim((Span){t.s, t.n}));
    free(t.s);
    if (rc || !*content) {
        json_decref(*calls);
        *calls = NULL;
        free(*content);
        *content = NULL;
        if (reasoning) free(*reasoning), *reasoning = NULL;
        return err_set(err, PAIL_ERR_NOMEM, "tool calls: out of memory parsing a %zu-byte turn", all.n);
    }
    return good;
}
