// Chat templates pail renders natively (see chat.h). Each renderer follows its Jinja
// template line by line for conversations without tools; the oracle comparison in
// validation/tokenizer/ checks them against transformers' apply_chat_template.
#include <stdlib.h>
#include <string.h>
#include "core/sha256.h"
#include "tokenizer/chat.h"

static const struct {
    const char *sha256;
    ChatKind kind;
    const char *what;
} known[] = {
    // Qwen3 (tokenizer_config.json as published for Qwen3; validation/tokenizer/templates/qwen3.jinja)
    {"87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5", CHAT_QWEN3, "Qwen3"},
    // Qwen2-style ChatML with "You are a helpful assistant." (templates/chatml.jinja)
    {"f0206845c9ebc3abb4735d44f286eb81ce99238ad2accc710c6fc60e6cb8ccc8", CHAT_CHATML, "ChatML"},
    // Llama 3 (as published for Meta-Llama-3; templates/llama3.jinja)
    {"b48c47f6443892716176eb200bf4ef108f64e06ca26ed0fa8ebc0a4b3992fcb2", CHAT_LLAMA3, "Llama 3"},
};

ChatKind chat_template_detect(const char *text, size_t len) {
    char hex[65];
    sha256_hex(text, len, hex);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(hex, known[i].sha256)) return known[i].kind;
    return CHAT_NONE;
}

const char *chat_kind_name(ChatKind k) {
    switch (k) {
    case CHAT_CHATML: return "chatml";
    case CHAT_QWEN3: return "qwen3";
    case CHAT_LLAMA3: return "llama3";
    case CHAT_PLAIN: return "plain";
    default: return "none";
    }
}

void chat_template_free(ChatTemplate *t) {
    free(t->bos_token);
    free(t->plain_format);
    memset(t, 0, sizeof *t);
}

int chat_template_load(ChatTemplate *out, const char *path, const char *prompt_format, PailErr *err) {
    memset(out, 0, sizeof *out);
    if (prompt_format) {
        if (!strstr(prompt_format, "{prompt}"))
            return err_set(err, PAIL_ERR_INVALID, "--prompt-format \"%s\" has no {prompt}", prompt_format);
        out->kind = CHAT_PLAIN;
        out->plain_format = strdup(prompt_format);
        out->bos_token = strdup("");
        if (!out->plain_format || !out->bos_token) { chat_template_free(out); return err_set(err, PAIL_ERR_NOMEM, "out of memory"); }
        return 0;
    }
    json_error_t je;
    json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);  // model_max_length can be 1e30
    if (!cfg) return err_set(err, PAIL_ERR_INVALID, "%s: cannot read as JSON (line %d: %s)", path, je.line, je.text);
    json_t *ct = json_object_get(cfg, "chat_template");
    if (json_is_array(ct)) {  // [{name, template}, ...]: the "default" one
        json_t *pick = NULL;
        for (size_t i = 0; i < json_array_size(ct); i++) {
            json_t *e = json_array_get(ct, i), *nm = json_object_get(e, "name");
            if (json_is_string(nm) && !strcmp(json_string_value(nm), "default")) pick = json_object_get(e, "template");
        }
        ct = pick;
    }
    if (!json_is_string(ct)) {
        json_decref(cfg);
        return err_set(err, PAIL_ERR_NOT_FOUND, "%s: no chat_template; give --prompt-format \"...{prompt}...\"", path);
    }
    sha256_hex(json_string_value(ct), json_string_length(ct), out->sha256);
    out->kind = chat_template_detect(json_string_value(ct), json_string_length(ct));
    if (out->kind == CHAT_NONE) {
        int rc = err_set(err, PAIL_ERR_UNSUPPORTED,
                         "%s: chat_template (sha256 %.16s...) is not one pail renders (Qwen3, ChatML, Llama 3; "
                         "see doc/tokenizer.md); give --prompt-format \"...{prompt}...\" instead", path, out->sha256);
        json_decref(cfg);
        return rc;
    }
    json_t *bos = json_object_get(cfg, "bos_token");
    if (json_is_object(bos)) bos = json_object_get(bos, "content");
    out->bos_token = strdup(json_is_string(bos) ? json_string_value(bos) : "");
    json_decref(cfg);
    if (!out->bos_token) { chat_template_free(out); return err_set(err, PAIL_ERR_NOMEM, "out of memory"); }
    return 0;
}

int chat_messages_from_json(json_t *arr, ChatMessage **msgs, int *n, PailErr *err) {
    *msgs = NULL;
    *n = 0;
    if (!json_is_array(arr)) return err_set(err, PAIL_ERR_INVALID, "messages: not a JSON array");
    size_t k = json_array_size(arr);
    ChatMessage *m = calloc(k ? k : 1, sizeof *m);
    if (!m) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *e = json_array_get(arr, i), *r = json_object_get(e, "role"), *c = json_object_get(e, "content");
        if (!json_is_string(r) || !json_is_string(c)) {
            free(m);
            return err_set(err, PAIL_ERR_INVALID, "messages[%zu]: needs \"role\" and \"content\" strings", i);
        }
        m[i].role = json_string_value(r);
        m[i].content = json_string_value(c);
    }
    *msgs = m;
    *n = (int)k;
    return 0;
}

// ---- Python str helpers the templates use

// str.isspace(): White_Space plus U+001C..U+001F (Python counts bidi B/S characters).
static bool py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static size_t dec1(const uint8_t *s, size_t len, uint32_t *cp) {
    uint8_t c = s[0];
    size_t n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (n > len) n = 1;
    *cp = n == 1 ? c : n == 2 ? (uint32_t)(c & 0x1f) : n == 3 ? (uint32_t)(c & 0x0f) : (uint32_t)(c & 0x07);
    for (size_t i = 1; i < n; i++) *cp = *cp << 6 | (s[i] & 0x3f);
    return n;
}

typedef struct {
    const char *p;
    size_t len;
} Str;

static Str str_of(const char *s) { return (Str){s, strlen(s)}; }

static Str py_strip(Str s) {  // str.strip() (Jinja's trim)
    const uint8_t *p = (const uint8_t *)s.p;
    size_t a = 0, b = s.len;
    while (a < b) {
        uint32_t cp;
        size_t n = dec1(p + a, b - a, &cp);
        if (!py_space(cp)) break;
        a += n;
    }
    while (b > a) {
        size_t q = b - 1;
        while (q > a && (p[q] & 0xc0) == 0x80) q--;
        uint32_t cp;
        dec1(p + q, b - q, &cp);
        if (!py_space(cp)) break;
        b = q;
    }
    return (Str){s.p + a, b - a};
}

static Str lstrip_nl(Str s) { while (s.len && s.p[0] == '\n') { s.p++; s.len--; } return s; }
static Str rstrip_nl(Str s) { while (s.len && s.p[s.len - 1] == '\n') s.len--; return s; }

static const char *find(Str s, const char *needle) {
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= s.len; i++)
        if (!memcmp(s.p + i, needle, nl)) return s.p + i;
    return NULL;
}

static const char *find_last(Str s, const char *needle) {
    size_t nl = strlen(needle);
    for (size_t i = s.len + 1; i-- > 0;)
        if (i + nl <= s.len && !memcmp(s.p + i, needle, nl)) return s.p + i;
    return NULL;
}

static bool starts(Str s, const char *x) { size_t n = strlen(x); return s.len >= n && !memcmp(s.p, x, n); }
static bool ends(Str s, const char *x) { size_t n = strlen(x); return s.len >= n && !memcmp(s.p + s.len - n, x, n); }

static int put(Buf *b, const char *s) { return buf_append(b, s, strlen(s)); }
static int puts_(Buf *b, Str s) { return buf_append(b, s.p, s.len); }

// ---- renderers

static int render_chatml(const ChatMessage *m, int n, const ChatOptions *o, Buf *b) {
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 && strcmp(m[0].role, "system"))
            rc |= put(b, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n");
        rc |= put(b, "<|im_start|>") | put(b, m[i].role) | put(b, "\n") | put(b, m[i].content) | put(b, "<|im_end|>\n");
    }
    if (o->add_generation_prompt) rc |= put(b, "<|im_start|>assistant\n");
    return rc;
}

static int render_qwen3(const ChatMessage *m, int n, const ChatOptions *o, Buf *b) {
    int rc = 0;
    if (!strcmp(m[0].role, "system"))
        rc |= put(b, "<|im_start|>system\n") | put(b, m[0].content) | put(b, "<|im_end|>\n");
    // last_query_index: the last user turn that is not a tool response
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        Str c = str_of(m[i].content);
        if (!strcmp(m[i].role, "user") && !(starts(c, "<tool_response>") && ends(c, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        const char *role = m[i].role;
        Str content = str_of(m[i].content);
        if (!strcmp(role, "user") || (!strcmp(role, "system") && i != 0)) {
            rc |= put(b, "<|im_start|>") | put(b, role) | put(b, "\n") | puts_(b, content) | put(b, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            Str reasoning = {"", 0};
            const char *close = find(content, "</think>");
            if (close) {
                // content.split('</think>')[-1].lstrip('\n')
                const char *lastc = find_last(content, "</think>") + strlen("</think>");
                Str after = lstrip_nl((Str){lastc, (size_t)(content.p + content.len - lastc)});
                // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
                Str before = rstrip_nl((Str){content.p, (size_t)(close - content.p)});
                const char *open = find_last(before, "<think>");
                if (open) {
                    open += strlen("<think>");
                    before = (Str){open, (size_t)(before.p + before.len - open)};
                }
                reasoning = lstrip_nl(before);
                content = after;
            }
            if (i > last_query && (i == n - 1 || reasoning.len)) {
                rc |= put(b, "<|im_start|>") | put(b, role) | put(b, "\n<think>\n") | puts_(b, rstrip_nl(lstrip_nl(reasoning))) |
                      put(b, "\n</think>\n\n") | puts_(b, lstrip_nl(content));
            } else {
                rc |= put(b, "<|im_start|>") | put(b, role) | put(b, "\n") | puts_(b, content);
            }
            rc |= put(b, "<|im_end|>\n");
        } else if (!strcmp(role, "tool")) {
            if (i == 0 || strcmp(m[i - 1].role, "tool")) rc |= put(b, "<|im_start|>user");
            rc |= put(b, "\n<tool_response>\n") | puts_(b, content) | put(b, "\n</tool_response>");
            if (i == n - 1 || strcmp(m[i + 1].role, "tool")) rc |= put(b, "<|im_end|>\n");
        }
        // the template renders nothing for other roles (and for a leading system, done above)
    }
    if (o->add_generation_prompt) {
        rc |= put(b, "<|im_start|>assistant\n");
        if (o->enable_thinking == 0) rc |= put(b, "<think>\n\n</think>\n\n");
    }
    return rc;
}

// The published Llama 3 template appends the assistant header whether or not
// add_generation_prompt is set; this follows the template.
static int render_llama3(const ChatMessage *m, int n, const char *bos, Buf *b) {
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0) rc |= put(b, bos);
        rc |= put(b, "<|start_header_id|>") | put(b, m[i].role) | put(b, "<|end_header_id|>\n\n") |
              puts_(b, py_strip(str_of(m[i].content))) | put(b, "<|eot_id|>");
    }
    return rc | put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static int render_plain(const char *fmt, const ChatMessage *m, int n, Buf *b, PailErr *err) {
    if (n != 1 || strcmp(m[0].role, "user"))
        return err_set(err, PAIL_ERR_INVALID, "chat: --prompt-format takes exactly one user message, got %d message(s)", n);
    int rc = 0;
    for (const char *p = fmt; *p;) {
        const char *q = strstr(p, "{prompt}");
        if (!q) { rc |= put(b, p); break; }
        rc |= buf_append(b, p, (size_t)(q - p)) | put(b, m[0].content);
        p = q + strlen("{prompt}");
    }
    return rc;
}

int chat_render(const ChatTemplate *t, const ChatMessage *msgs, int n, const ChatOptions *opt, Buf *out, PailErr *err) {
    int rc;
    switch (t->kind) {
    case CHAT_CHATML: rc = render_chatml(msgs, n, opt, out); break;
    case CHAT_QWEN3:  // the template reads messages[0]: Jinja fails on an empty list
        if (n == 0) return err_set(err, PAIL_ERR_INVALID, "chat: the Qwen3 template needs at least one message");
        rc = render_qwen3(msgs, n, opt, out);
        break;
    case CHAT_LLAMA3: rc = render_llama3(msgs, n, t->bos_token ? t->bos_token : "", out); break;
    case CHAT_PLAIN: if (render_plain(t->plain_format, msgs, n, out, err) < 0) return -1; rc = 0; break;
    default: return err_set(err, PAIL_ERR_INVALID, "chat: no chat template loaded");
    }
    return rc ? err_set(err, PAIL_ERR_NOMEM, "chat: out of memory") : 0;
}
