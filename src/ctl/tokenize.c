// grpo-ctl tokenize / detokenize: the tokenizer from the command line, one text or whole
// JSON-lines files (datasets, the oracle comparison in validation/tokenizer/), and chat
// rendering of conversations through the model's template.
#define _GNU_SOURCE  // strptime
#include <jansson.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "ctl/ctl.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

static int ids_print(FILE *out, const TokenIds *ids, Buf *line) {
    buf_reset(line);
    buf_append(line, "[", 1);
    for (size_t i = 0; i < ids->len; i++) {  // by hand: printf per id dominated --jsonl on datasets
        char tmp[16];
        int n = 0;
        uint32_t v = (uint32_t)ids->data[i];  // ids are >= 0
        do tmp[n++] = (char)('0' + v % 10); while ((v /= 10));
        if (i) buf_append(line, ",", 1);
        while (n) buf_append(line, &tmp[--n], 1);
    }
    buf_append(line, "]\n", 2);
    return fwrite(line->data, 1, line->len, out) == line->len ? 0 : -1;
}

static int json_string_print(FILE *out, const char *s, size_t len) {
    json_t *j = json_stringn_nocheck(s ? s : "", len);  // an empty Buf has no data: an empty rendering
    char *txt = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    int rc = txt && fprintf(out, "%s\n", txt) >= 0 ? 0 : -1;
    free(txt);
    json_decref(j);
    return rc;
}

// Calls fn on every line of path as parsed JSON; stops at the first failure.
typedef int (*LineFn)(json_t *v, size_t lineno, void *ctx, PailErr *err);
static int jsonl_each(const char *path, LineFn fn, void *ctx, PailErr *err) {
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) return err_set(err, PAIL_ERR_IO, "%s: cannot open", path);
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (n && line[n - 1] == '\n') n--;
        json_error_t je;
        json_t *v = json_loadb(line, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!v) { rc = err_set(err, PAIL_ERR_INVALID, "%s:%zu: not JSON: %s", path, lineno, je.text); break; }
        rc = fn(v, lineno, ctx, err);
        json_decref(v);
        if (rc < 0) err_wrap(err, "%s:%zu", path, lineno);
    }
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

typedef struct {
    Tokenizer *tok;
    ChatTemplate chat;
    bool gen_prompt, print_text, skip_special, keep_going, add_special;
    TokenIds ids;
    Buf line, text;
} Ctx;

static int line_encode(json_t *v, size_t lineno, void *p, PailErr *err) {
    (void)lineno;
    Ctx *c = p;
    if (!json_is_string(v)) return err_set(err, PAIL_ERR_INVALID, "expected a JSON string");
    c->ids.len = 0;
    if ((c->add_special ? tokenizer_encode_text : tokenizer_encode)(c->tok, json_string_value(v), json_string_length(v),
                                                                     &c->ids, err) < 0)
        return -1;
    return ids_print(stdout, &c->ids, &c->line) < 0 ? err_set(err, PAIL_ERR_IO, "stdout: write failed") : 0;
}

// A row: a JSON array of messages, or {"messages": [...], "tools": [...]}.
static int line_chat(json_t *v, size_t lineno, void *p, PailErr *err) {
    (void)lineno;
    Ctx *c = p;
    json_t *msgs = v, *tools = NULL;
    if (json_is_object(v)) {
        msgs = json_object_get(v, "messages");
        tools = json_object_get(v, "tools");
    }
    buf_reset(&c->text);
    int rc = json_is_array(msgs) ? chat_render(&c->chat, msgs, tools, c->gen_prompt, &c->text, err)
                                 : err_set(err, PAIL_ERR_INVALID, "expected a JSON array of messages or {\"messages\": [...]}");
    if (rc < 0 && c->keep_going) {  // one line for the failed row; the run goes on
        json_t *e = json_pack("{s:s}", "error", err->msg);
        char *txt = e ? json_dumps(e, JSON_ENSURE_ASCII) : NULL;
        rc = txt && printf("%s\n", txt) >= 0 ? 0 : err_set(err, PAIL_ERR_IO, "stdout: write failed");
        free(txt);
        json_decref(e);
        err_clear(err);
        return rc;
    }
    if (rc < 0) return -1;
    if (c->print_text)
        return json_string_print(stdout, (const char *)c->text.data, c->text.len) < 0 ? err_set(err, PAIL_ERR_IO, "stdout: write failed") : 0;
    c->ids.len = 0;
    if (tokenizer_encode(c->tok, (const char *)c->text.data, c->text.len, &c->ids, err) < 0) return -1;
    return ids_print(stdout, &c->ids, &c->line) < 0 ? err_set(err, PAIL_ERR_IO, "stdout: write failed") : 0;
}

static int ids_from_json(json_t *v, TokenIds *ids, PailErr *err) {
    if (!json_is_array(v)) return err_set(err, PAIL_ERR_INVALID, "expected a JSON array of token ids");
    ids->len = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            return err_set(err, PAIL_ERR_INVALID, "ids[%zu] is not a token id", i);
        if (token_ids_push(ids, (int32_t)json_integer_value(e)) < 0) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    return 0;
}

static int line_decode(json_t *v, size_t lineno, void *p, PailErr *err) {
    (void)lineno;
    Ctx *c = p;
    if (ids_from_json(v, &c->ids, err) < 0) return -1;
    buf_reset(&c->line);
    buf_reset(&c->text);
    if (tokenizer_decode_text(c->tok, c->ids.data, c->ids.len, c->skip_special, &c->text, err) < 0) return -1;
    return json_string_print(stdout, (const char *)c->text.data, c->text.len) < 0 ? err_set(err, PAIL_ERR_IO, "stdout: write failed") : 0;
}

static void ctx_free(Ctx *c) {
    tokenizer_free(c->tok);
    chat_template_free(&c->chat);
    token_ids_free(&c->ids);
    buf_free(&c->line);
    buf_free(&c->text);
}

static int fail(const char *prog, const PailErr *err, Ctx *c) {
    fprintf(stderr, "%s: %s\n", prog, err->msg);
    ctx_free(c);
    return 1;
}

// --chat-time: "YYYY-MM-DDTHH:MM:SS" in local time (as Python's datetime.now() gives it), or @SECONDS.
static int chat_time_parse(const char *s, int64_t *out) {
    if (s[0] == '@') {
        char *end;
        long long v = strtoll(s + 1, &end, 10);
        if (end == s + 1 || *end) return -1;
        *out = v;
        return 0;
    }
    struct tm tm = {0};
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end || *end) return -1;
    tm.tm_isdst = -1;
    time_t t = mktime(&tm);
    if (t == (time_t)-1) return -1;
    *out = (int64_t)t;
    return 0;
}

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
}

int ctl_tokenize(int argc, char **argv) {
    char *tokenizer = NULL, *text = NULL, *file = NULL, *jsonl = NULL, *chat_jsonl = NULL, *config = NULL,
         *prompt_format = NULL, *thinking = NULL, *chat_file = NULL, *chat_name = NULL, *chat_kwargs = NULL,
         *chat_time = NULL;
    bool gen = true, print_text = false, keep_going = false, add_special = false;
    Flag fl[] = {
        {"tokenizer", FLAG_STRING, &tokenizer, NULL, 1, 0, "tokenizer.json (required but with --chat-jsonl --print-text)"},
        {"text", FLAG_STRING, &text, NULL, 1, 0, "encode this text"},
        {"file", FLAG_STRING, &file, NULL, 1, 0, "encode the contents of this file"},
        {"jsonl", FLAG_STRING, &jsonl, NULL, 1, 0, "each line a JSON string; prints one JSON array of ids per line (- = stdin)"},
        {"chat-jsonl", FLAG_STRING, &chat_jsonl, NULL, 1, 0,
         "each line a JSON array of messages, or {\"messages\": [...], \"tools\": [...]}: rendered with the chat template, "
         "then encoded"},
        {"tokenizer-config", FLAG_STRING, &config, NULL, 1, 0,
         "tokenizer_config.json (special tokens, chat_template; default: beside --tokenizer); chat_template.jinja is "
         "looked for beside it"},
        CHAT_CLI_FLAGS(&chat_file, &chat_name, &chat_kwargs, &prompt_format),
        {"generation-prompt", FLAG_BOOL, &gen, "true", 1, 0, "chat: add_generation_prompt"},
        {"thinking", FLAG_STRING, &thinking, "default", 1, 0,
         "chat: enable_thinking: default (undefined), true or false (a --chat-template-kwargs shorthand)"},
        {"chat-time", FLAG_STRING, &chat_time, NULL, 1, 0,
         "chat: the clock strftime_now reads, YYYY-MM-DDTHH:MM:SS local time or @UNIX_SECONDS (default: now)"},
        {"print-text", FLAG_BOOL, &print_text, "false", 1, 0, "chat: print the rendered text (a JSON string) instead of ids"},
        {"add-special-tokens", FLAG_BOOL, &add_special, "false", 1, 0,
         "--text, --file, --jsonl: add the post_processor's special tokens (a <bos>), as a plain prompt is encoded"},
        {"keep-going", FLAG_BOOL, &keep_going, "false", 1, 0,
         "chat: a row that fails to render prints {\"error\": \"...\"} and the rest go on"},
    };
    const int n = sizeof fl / sizeof fl[0];
    const char *usage = "grpo-ctl tokenize --tokenizer FILE (--text STR | --file F | --jsonl F | --chat-jsonl F)";
    int rc = ctl_parse(usage, "Encodes text with a tokenizer.json and prints the ids as JSON.", fl, n, argc, argv, NULL, NULL);
    if (rc >= 0) { flags_free(fl, n); return rc; }
    Ctx c = {0};
    PailErr err = {0};
    int inputs = !!text + !!file + !!jsonl + !!chat_jsonl;
    bool need_tok = !(chat_jsonl && print_text);
    if ((need_tok && !tokenizer) || inputs != 1 || (!tokenizer && !config)) {
        fprintf(stderr, "%s: give --tokenizer (or, for --chat-jsonl --print-text, --tokenizer-config) and exactly one of "
                "--text, --file, --jsonl, --chat-jsonl\nusage: %s\n", argv[0], usage);
        flags_free(fl, n);
        return 2;
    }
    int64_t now = INT64_MIN;
    if (strcmp(thinking, "default") && strcmp(thinking, "true") && strcmp(thinking, "false")) {
        fprintf(stderr, "%s: --thinking '%s': use default, true or false\n", argv[0], thinking);
        flags_free(fl, n);
        return 2;
    }
    if (chat_time && chat_time_parse(chat_time, &now) < 0) {
        fprintf(stderr, "%s: --chat-time '%s': use YYYY-MM-DDTHH:MM:SS (local time) or @UNIX_SECONDS\n", argv[0], chat_time);
        flags_free(fl, n);
        return 2;
    }
    c.gen_prompt = gen;
    c.print_text = print_text;
    c.keep_going = keep_going;
    c.add_special = add_special;
    if (tokenizer && tokenizer_load(&c.tok, tokenizer, &err) < 0) { flags_free(fl, n); return fail(argv[0], &err, &c); }
    if (chat_jsonl) {
        char *dir = dir_of(config ? config : tokenizer);
        ChatSource src = {.template_file = chat_file, .template_name = chat_name, .kwargs_json = chat_kwargs,
                          .prompt_format = prompt_format};
        rc = dir ? chat_template_load(&c.chat, dir, config, &src, &err) : err_set(&err, PAIL_ERR_NOMEM, "out of memory");
        free(dir);
        if (rc == 0 && strcmp(thinking, "default")) {
            json_t *b = json_boolean(!strcmp(thinking, "true"));
            rc = chat_template_set_var(&c.chat, "enable_thinking", b, &err);
            json_decref(b);
        }
        if (rc < 0) { flags_free(fl, n); return fail(argv[0], &err, &c); }
        c.chat.now = now;
        rc = jsonl_each(chat_jsonl, line_chat, &c, &err);
    } else if (jsonl) {
        rc = jsonl_each(jsonl, line_encode, &c, &err);
    } else {
        Buf in = {0};
        if (file) rc = fs_read_file(file, &in, &err);
        else rc = buf_append(&in, text, strlen(text)) < 0 ? err_set(&err, PAIL_ERR_NOMEM, "out of memory") : 0;
        if (rc == 0) rc = (add_special ? tokenizer_encode_text : tokenizer_encode)(c.tok, (const char *)in.data, in.len, &c.ids, &err);
        if (rc == 0 && ids_print(stdout, &c.ids, &c.line) < 0) rc = err_set(&err, PAIL_ERR_IO, "stdout: write failed");
        buf_free(&in);
    }
    flags_free(fl, n);
    if (rc < 0) return fail(argv[0], &err, &c);
    ctx_free(&c);
    return fflush(stdout) == 0 ? 0 : 1;
}

int ctl_detokenize(int argc, char **argv) {
    char *tokenizer = NULL, *ids = NULL, *jsonl = NULL;
    bool skip = false;
    Flag fl[] = {
        {"tokenizer", FLAG_STRING, &tokenizer, NULL, 1, 0, "tokenizer.json (required)"},
        {"ids", FLAG_STRING, &ids, NULL, 1, 0, "JSON array of ids; prints the text as is (no newline added)"},
        {"jsonl", FLAG_STRING, &jsonl, NULL, 1, 0, "each line a JSON array of ids; prints one JSON string per line (- = stdin)"},
        {"skip-special", FLAG_BOOL, &skip, "false", 1, 0, "leave out special tokens"},
    };
    const int n = sizeof fl / sizeof fl[0];
    const char *usage = "grpo-ctl detokenize --tokenizer FILE (--ids '[...]' | --jsonl F)";
    int rc = ctl_parse(usage, "Decodes token ids to text (invalid UTF-8 from cut characters becomes U+FFFD).", fl, n, argc,
                       argv, NULL, NULL);
    if (rc >= 0) { flags_free(fl, n); return rc; }
    if (!tokenizer || !!ids + !!jsonl != 1) {
        fprintf(stderr, "%s: give --tokenizer and exactly one of --ids, --jsonl\nusage: %s\n", argv[0], usage);
        flags_free(fl, n);
        return 2;
    }
    Ctx c = {0};
    PailErr err = {0};
    c.skip_special = skip;
    if (tokenizer_load(&c.tok, tokenizer, &err) < 0) { flags_free(fl, n); return fail(argv[0], &err, &c); }
    if (jsonl) {
        rc = jsonl_each(jsonl, line_decode, &c, &err);
    } else {
        json_error_t je;
        json_t *v = json_loads(ids, JSON_DECODE_ANY, &je);
        rc = v ? ids_from_json(v, &c.ids, &err) : err_set(&err, PAIL_ERR_INVALID, "--ids: not JSON: %s", je.text);
        json_decref(v);
        if (rc == 0) rc = tokenizer_decode_text(c.tok, c.ids.data, c.ids.len, skip, &c.text, &err);
        if (rc == 0) {
            if (fwrite(c.text.data, 1, c.text.len, stdout) != c.text.len) rc = err_set(&err, PAIL_ERR_IO, "stdout: write failed");
        }
    }
    flags_free(fl, n);
    if (rc < 0) return fail(argv[0], &err, &c);
    ctx_free(&c);
    return fflush(stdout) == 0 ? 0 : 1;
}
