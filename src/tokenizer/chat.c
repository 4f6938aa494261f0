// Chat templates (chat.h): finds the model's template where transformers looks for it,
// builds the variables transformers passes and renders with the Jinja interpreter.
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/fsutil.h"
#include "core/sha256.h"
#include "tokenizer/chat.h"

// The named special tokens transformers passes to every template (SPECIAL_TOKENS_ATTRIBUTES).
static const char *const special_names[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                            "pad_token", "cls_token", "mask_token"};
// Variables transformers sets itself; a --chat-template-kwargs key may not take them.
static const char *const reserved_vars[] = {"messages", "tools", "documents", "add_generation_prompt"};

void chat_template_free(ChatTemplate *t) {
    jinja_free(t->tmpl);
    jinja_free(t->tmpl_tools);
    free(t->plain_format);
    free(t->text);
    json_decref(t->vars);
    memset(t, 0, sizeof *t);
    t->now = INT64_MIN;
}

// One candidate template: its name ("default", "tool_use", ...), text and where it came from.
typedef struct {
    char name[128];
    char origin[600];
    Buf text;
} Cand;

typedef struct {
    Cand c[32];
    int n;
} Cands;

static void cands_free(Cands *cs) {
    for (int i = 0; i < cs->n; i++) buf_free(&cs->c[i].text);
    cs->n = 0;
}

static Cand *cand_add(Cands *cs, const char *name, PailErr *err) {
    if (cs->n == (int)(sizeof cs->c / sizeof cs->c[0])) {
        err_set(err, PAIL_ERR_UNSUPPORTED, "more than %zu named chat templates", sizeof cs->c / sizeof cs->c[0]);
        return NULL;
    }
    Cand *c = &cs->c[cs->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    return c;
}

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int read_into(Cand *c, const char *path, PailErr *err) {
    snprintf(c->origin, sizeof c->origin, "%s", path);
    return fs_read_file(path, &c->text, err);
}

// chat_template.jinja and additional_chat_templates/*.jinja in dir.
static int cands_from_files(Cands *cs, const char *dir, PailErr *err) {
    char path[4400];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (is_file(path)) {
        Cand *c = cand_add(cs, "default", err);
        if (!c || read_into(c, path, err) < 0) return -1;
    }
    snprintf(path, sizeof path, "%s/additional_chat_templates", dir);
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= 6 || strcmp(e->d_name + len - 6, ".jinja")) continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(len - 6), e->d_name);
        char file[4600];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        Cand *c = cand_add(cs, name, err);
        rc = !c || read_into(c, file, err) < 0 ? -1 : 0;
    }
    closedir(d);
    return rc;
}

// tokenizer_config.json's chat_template: a string, or [{"name", "template"}, ...].
static int cands_from_config(Cands *cs, json_t *cfg, const char *cfg_path, PailErr *err) {
    json_t *ct = json_object_get(cfg, "chat_template");
    if (!ct || json_is_null(ct)) return 0;
    if (json_is_string(ct)) {
        Cand *c = cand_add(cs, "default", err);
        if (!c) return -1;
        snprintf(c->origin, sizeof c->origin, "%s (chat_template)", cfg_path);
        return buf_append(&c->text, json_string_value(ct), json_string_length(ct)) < 0
                   ? err_set(err, PAIL_ERR_NOMEM, "out of memory") : 0;
    }
    if (!json_is_array(ct))
        return err_set(err, PAIL_ERR_INVALID, "%s: chat_template is neither a string nor a list of {name, template}", cfg_path);
    size_t i;
    json_t *e;
    json_array_foreach(ct, i, e) {
        json_t *nm = json_object_get(e, "name"), *tx = json_object_get(e, "template");
        if (!json_is_string(nm) || !json_is_string(tx))
            return err_set(err, PAIL_ERR_INVALID, "%s: chat_template[%zu] needs \"name\" and \"template\" strings", cfg_path, i);
        Cand *c = cand_add(cs, json_string_value(nm), err);
        if (!c) return -1;
        snprintf(c->origin, sizeof c->origin, "%s (chat_template \"%s\")", cfg_path, json_string_value(nm));
        if (buf_append(&c->text, json_string_value(tx), json_string_length(tx)) < 0)
            return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    return 0;
}

static Cand *cand_find(Cands *cs, const char *name) {
    for (int i = 0; i < cs->n; i++)
        if (!strcmp(cs->c[i].name, name)) return &cs->c[i];
    return NULL;
}

static void cand_names(const Cands *cs, char *out, size_t cap) {
    out[0] = 0;
    for (int i = 0; i < cs->n; i++) {
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s%s", i ? ", " : "", cs->c[i].name);
    }
}

static int parse_cand(JinjaTemplate **out, const Cand *c, PailErr *err) {
    return jinja_parse(out, (const char *)c->text.data, c->text.len, c->origin, err);
}

// A special token as tokenizer_config.json / special_tokens_map.json write it: a string or
// an AddedToken object {"content": ...}.
static json_t *token_text(json_t *v) {
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? v : NULL;
}

static int special_tokens(json_t *vars, json_t *cfg, const char *dir, PailErr *err) {
    for (size_t i = 0; i < sizeof special_names / sizeof special_names[0]; i++) {
        json_t *t = cfg ? token_text(json_object_get(cfg, special_names[i])) : NULL;
        if (t && json_object_set(vars, special_names[i], t) < 0) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    // transformers reads the legacy special_tokens_map.json (over the config's values) only when the
    // config has no added_tokens_decoder.
    if (cfg && json_object_get(cfg, "added_tokens_decoder")) return 0;
    char path[4400];
    snprintf(path, sizeof path, "%s/special_tokens_map.json", dir);
    if (!is_file(path)) return 0;
    json_error_t je;
    json_t *m = json_load_file(path, 0, &je);
    if (!json_is_object(m)) {
        json_decref(m);
        return err_set(err, PAIL_ERR_INVALID, "%s: not a JSON object (line %d: %s)", path, je.line, je.text);
    }
    for (size_t i = 0; i < sizeof special_names / sizeof special_names[0]; i++) {
        json_t *t = token_text(json_object_get(m, special_names[i]));
        if (t && json_object_set(vars, special_names[i], t) < 0) { json_decref(m); return err_set(err, PAIL_ERR_NOMEM, "out of memory"); }
    }
    json_decref(m);
    return 0;
}

static int apply_kwargs(ChatTemplate *t, const char *js, PailErr *err) {
    json_error_t je;
    json_t *kw = json_loads(js, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(kw)) {
        json_decref(kw);
        return err_set(err, PAIL_ERR_INVALID, "--chat-template-kwargs: not a JSON object (%s)", kw ? "another JSON value" : je.text);
    }
    const char *k;
    json_t *v;
    json_object_foreach(kw, k, v) {
        if (chat_template_set_var(t, k, v, err) < 0) { json_decref(kw); return err_wrap(err, "--chat-template-kwargs"); }
    }
    json_decref(kw);
    return 0;
}

int chat_template_set_var(ChatTemplate *t, const char *name, json_t *v, PailErr *err) {
    for (size_t i = 0; i < sizeof reserved_vars / sizeof reserved_vars[0]; i++)
        if (!strcmp(name, reserved_vars[i]))
            return err_set(err, PAIL_ERR_INVALID, "'%s' is set by pail itself (as transformers does); it cannot be a template variable", name);
    if (!t->vars && !(t->vars = json_object())) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    return json_object_set(t->vars, name, v) < 0 ? err_set(err, PAIL_ERR_NOMEM, "out of memory") : 0;
}

static int load_plain(ChatTemplate *out, const char *fmt, PailErr *err) {
    if (!strstr(fmt, "{prompt}")) return err_set(err, PAIL_ERR_INVALID, "--prompt-format \"%s\" has no {prompt}", fmt);
    if (!(out->plain_format = strdup(fmt))) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    snprintf(out->source, sizeof out->source, "--prompt-format");
    return 0;
}

int chat_template_load(ChatTemplate *out, const char *dir, const char *tokenizer_config, const ChatSource *src,
                       PailErr *err) {
    memset(out, 0, sizeof *out);
    out->now = INT64_MIN;
    ChatSource none = {0};
    if (!src) src = &none;
    if (!dir || !*dir) dir = ".";
    if (!(out->vars = json_object())) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    if (src->prompt_format) {
        if (load_plain(out, src->prompt_format, err) < 0) { chat_template_free(out); return -1; }
        return 0;
    }
    char cfg_path[4400];
    snprintf(cfg_path, sizeof cfg_path, "%s", tokenizer_config ? tokenizer_config : "");
    if (!tokenizer_config) snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    json_t *cfg = NULL;
    if (is_file(cfg_path) || tokenizer_config) {
        json_error_t je;
        cfg = json_load_file(cfg_path, JSON_DECODE_INT_AS_REAL, &je);  // model_max_length can be 1e30
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            chat_template_free(out);
            return err_set(err, PAIL_ERR_INVALID, "%s: cannot read as a JSON object (line %d: %s)", cfg_path, je.line, je.text);
        }
    }
    Cands cs = {0};
    int rc = special_tokens(out->vars, cfg, dir, err);
    if (rc == 0 && src->template_file) {
        Cand *c = cand_add(&cs, "default", err);
        rc = !c || read_into(c, src->template_file, err) < 0 ? -1 : 0;
    } else if (rc == 0) {
        rc = cands_from_files(&cs, dir, err);
        if (rc == 0 && cs.n == 0 && cfg) rc = cands_from_config(&cs, cfg, cfg_path, err);
    }
    json_decref(cfg);
    if (rc == 0 && cs.n == 0)
        rc = err_set(err, PAIL_ERR_NOT_FOUND, "%s: no chat template (looked for chat_template.jinja and tokenizer_config.json's "
                     "chat_template); give --chat-template FILE or --prompt-format \"...{prompt}...\"", dir);
    Cand *use = NULL, *tools = NULL;
    if (rc == 0) {
        char names[1024];
        cand_names(&cs, names, sizeof names);
        bool single = cs.n == 1 && !strcmp(cs.c[0].name, "default");  // transformers: a plain string template
        if (src->template_name) {
            if (!(use = cand_find(&cs, src->template_name)))
                rc = err_set(err, PAIL_ERR_NOT_FOUND, "%s: no chat template named \"%s\" (there are: %s)", dir,
                             src->template_name, names);
        } else if (!(use = cand_find(&cs, "default"))) {
            rc = err_set(err, PAIL_ERR_NOT_FOUND, "%s: several chat templates and none named \"default\" (there are: %s); "
                         "give --chat-template-name", dir, names);
        } else if (!single) {
            tools = cand_find(&cs, "tool_use");
        }
    }
    if (rc == 0 && (rc = parse_cand(&out->tmpl, use, err)) == 0 && tools) rc = parse_cand(&out->tmpl_tools, tools, err);
    if (rc == 0) {
        sha256_hex(use->text.data, use->text.len, out->sha256);
        snprintf(out->source, sizeof out->source, "%s", use->origin);
        const Cand *tt = tools ? tools : use;
        if (!(out->text = strndup((const char *)tt->text.data, tt->text.len)))
            rc = err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", dir);
        if (src->kwargs_json) rc = apply_kwargs(out, src->kwargs_json, err);
    }
    cands_free(&cs);
    if (rc < 0) chat_template_free(out);
    return rc;
}

// ---- rendering

static const char *const reasoning_fields[] = {"reasoning_content", "thinking", "reasoning"};

// A message as transformers hands it to the template: keys with a null value dropped
// (_normalize_chat_messages), then reasoning copied under the names templates read
// (_alias_reasoning_fields: {"thinking": r, **message, "reasoning_content": r}).
static json_t *message_for_template(json_t *m) {
    json_t *r = NULL;
    for (size_t i = 0; i < 3 && !r; i++) {
        json_t *v = json_object_get(m, reasoning_fields[i]);
        if (v && !json_is_null(v)) r = v;
    }
    json_t *o = json_object();
    if (!o) return NULL;
    if (r && json_object_set(o, "thinking", r) < 0) goto fail;
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_null(v) && json_object_set(o, k, v) < 0) goto fail;
    }
    if (r && json_object_set(o, "reasoning_content", r) < 0) goto fail;
    return o;
fail:
    json_decref(o);
    return NULL;
}

static int render_plain(const ChatTemplate *t, json_t *messages, Buf *out, PailErr *err) {
    json_t *m = json_array_get(messages, 0), *c = json_object_get(m, "content");
    const char *role = json_string_value(json_object_get(m, "role"));
    if (json_array_size(messages) != 1 || !role || strcmp(role, "user") || !json_is_string(c))
        return err_set(err, PAIL_ERR_INVALID, "--prompt-format renders exactly one user message with string content, got %zu messages",
                       json_array_size(messages));
    const char *f = t->plain_format, *hit;
    size_t start = out->len;
    while ((hit = strstr(f, "{prompt}"))) {
        if (buf_append(out, f, (size_t)(hit - f)) < 0 || buf_append(out, json_string_value(c), json_string_length(c)) < 0) goto nomem;
        f = hit + 8;
    }
    if (buf_append(out, f, strlen(f)) < 0) goto nomem;
    return 0;
nomem:
    out->len = start;
    return err_set(err, PAIL_ERR_NOMEM, "out of memory");
}

int chat_render(const ChatTemplate *t, json_t *messages, json_t *tools, bool add_generation_prompt, Buf *out,
                PailErr *err) {
    if (!json_is_array(messages)) return err_set(err, PAIL_ERR_INVALID, "messages: not a JSON array");
    if (json_array_size(messages) == 0) return err_set(err, PAIL_ERR_INVALID, "messages: the conversation is empty");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return err_set(err, PAIL_ERR_INVALID, "tools: not a JSON array");
    if (json_is_null(tools)) tools = NULL;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m)) return err_set(err, PAIL_ERR_INVALID, "messages[%zu]: not a JSON object", i);
    }
    json_array_foreach(tools, i, m) {  // as transformers: each tool a JSON schema
        if (!json_is_object(m)) return err_set(err, PAIL_ERR_INVALID, "tools[%zu]: not a JSON object (a tool is a JSON schema)", i);
    }
    if (t->plain_format) return render_plain(t, messages, out, err);
    json_t *vars = json_object(), *msgs = json_array();
    int rc = vars && msgs && json_object_update(vars, t->vars) == 0 ? 0 : err_set(err, PAIL_ERR_NOMEM, "out of memory");
    json_array_foreach(messages, i, m) {
        if (rc < 0) break;
        json_t *tm = message_for_template(m);
        if (!tm || json_array_append_new(msgs, tm) < 0) rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    if (rc == 0 && (json_object_set(vars, "messages", msgs) < 0 ||
                    json_object_set_new(vars, "tools", tools ? json_incref(tools) : json_null()) < 0 ||
                    json_object_set_new(vars, "documents", json_null()) < 0 ||
                    json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt)) < 0))
        rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
    if (rc == 0) {
        JinjaLimits lim = JINJA_LIMITS_DEFAULT;
        lim.now = t->now;
        rc = jinja_render(tools && t->tmpl_tools ? t->tmpl_tools : t->tmpl, vars, &lim, out, NULL, err);
    }
    json_decref(msgs);
    json_decref(vars);
    return rc;
}

int chat_render_prompt(const ChatTemplate *t, const char *prompt, bool add_generation_prompt, Buf *out,
                       PailErr *err) {
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", prompt);
    if (!msgs) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    int rc = chat_render(t, msgs, NULL, add_generation_prompt, out, err);
    json_decref(msgs);
    return rc;
}
