// Loading tokenizer.json (model, normalizer, pre_tokenizer, decoder, added_tokens) and the
// encode / decode pipelines (the decoder chain itself is decode.c): added tokens are cut out of the raw text first (never split,
// never normalized unless flagged so), the rest is normalized, pre-tokenized and BPE-encoded.
// tokenizer_encode encodes as add_special_tokens=False; tokenizer_encode_text adds the
// post_processor's special tokens (postproc.c) for plain prompts.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>
#include "core/fsutil.h"
#include "core/sha256.h"
#include "tokenizer/tok_internal.h"

int token_ids_push(TokenIds *ids, int32_t id) {
    if (ids->len == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *p = realloc(ids->data, cap * sizeof *p);
        if (!p) return -1;
        ids->data = p;
        ids->cap = cap;
    }
    ids->data[ids->len++] = id;
    return 0;
}

void token_ids_free(TokenIds *ids) {
    free(ids->data);
    memset(ids, 0, sizeof *ids);
}

// Unicode White_Space (Rust char::is_whitespace, regex \s).
static bool is_white_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// Regex \w: letters, marks, digits, connector punctuation (Unicode categories).
static bool is_word_char(uint32_t c) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_NO) || k == UTF8PROC_CATEGORY_PC;
}

// ---- added tokens

static int matcher_build(AddedMatcher *m, const Tokenizer *tok, bool normalized, PailErr *err) {
    int n = 0;
    for (int i = 0; i < tok->n_added; i++) n += tok->added[i].normalized == normalized;
    m->n = n;
    m->order = malloc((size_t)(n ? n : 1) * sizeof *m->order);
    m->patterns = calloc((size_t)tok->n_added + 1, sizeof *m->patterns);
    m->plen = calloc((size_t)tok->n_added + 1, sizeof *m->plen);
    if (!m->order || !m->patterns || !m->plen) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    int k = 0;
    Buf nb = {0};
    for (int i = 0; i < tok->n_added; i++) {
        const AddedToken *a = &tok->added[i];
        if (a->normalized != normalized) continue;
        // A normalized token is looked for in normalized text, so its content is normalized too.
        if (normalized && normalizer_apply(tok, (const uint8_t *)a->content, a->len, &nb, err) < 0) { buf_free(&nb); return -1; }
        const char *p = normalized ? (const char *)nb.data : a->content;
        size_t pl = normalized ? nb.len : a->len;
        if (!(m->patterns[i] = malloc(pl + 1))) { buf_free(&nb); return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name); }
        memcpy(m->patterns[i], p, pl);
        m->patterns[i][pl] = 0;
        m->plen[i] = pl;
        if (pl) m->order[k++] = i;
    }
    buf_free(&nb);
    m->n = k;
    // sort by first byte, then longest first (insertion sort: a few hundred tokens)
    for (int i = 1; i < k; i++) {
        int x = m->order[i], j = i - 1;
        uint8_t fx = (uint8_t)m->patterns[x][0];
        while (j >= 0) {
            int y = m->order[j];
            uint8_t fy = (uint8_t)m->patterns[y][0];
            if (fy < fx || (fy == fx && m->plen[y] >= m->plen[x])) break;
            m->order[j + 1] = y;
            j--;
        }
        m->order[j + 1] = x;
    }
    int j = 0;
    for (int b = 0; b <= 256; b++) {
        while (j < k && (uint8_t)m->patterns[m->order[j]][0] < b) j++;
        m->start[b] = b == 256 ? k : j;
    }
    return 0;
}

static void matcher_free(AddedMatcher *m, int n_added) {
    if (m->patterns)
        for (int i = 0; i < n_added; i++) free(m->patterns[i]);
    free(m->patterns);
    free(m->plen);
    free(m->order);
    memset(m, 0, sizeof *m);
}

static size_t prev_char_start(const uint8_t *s, size_t i) {
    do i--; while (i > 0 && (s[i] & 0xc0) == 0x80);
    return i;
}

// Next accepted match at or after from, with lstrip/rstrip applied; start is at least
// floor (the end of the previous match). Returns the token index or -1.
static int matcher_next(const Tokenizer *tok, const AddedMatcher *m, const uint8_t *s, size_t len, size_t from,
                        size_t floor, size_t *ms, size_t *me) {
    for (size_t i = from; i < len;) {
        int lo = m->start[s[i]], hi = m->start[s[i] + 1];
        int hit = -1;
        for (int k = lo; k < hi; k++) {
            int t = m->order[k];
            if (m->plen[t] <= len - i && !memcmp(s + i, m->patterns[t], m->plen[t])) { hit = t; break; }
        }
        if (hit < 0) { i++; continue; }
        const AddedToken *a = &tok->added[hit];
        size_t start = i, stop = i + m->plen[hit];
        if (a->single_word) {
            uint32_t c;
            bool left_ok = start == 0 || (utf8_decode1(s + prev_char_start(s, start), len - prev_char_start(s, start), &c), !is_word_char(c));
            bool right_ok = stop == len || (utf8_decode1(s + stop, len - stop, &c), !is_word_char(c));
            if (!left_ok || !right_ok) { i = stop; continue; }  // the scan resumes after the match, as Aho-Corasick's iterator does
        }
        if (a->lstrip) {
            while (start > floor) {
                size_t p = prev_char_start(s, start);
                uint32_t c;
                utf8_decode1(s + p, len - p, &c);
                if (!is_white_space(c)) break;
                start = p;
            }
        }
        if (a->rstrip) {
            while (stop < len) {
                uint32_t c;
                size_t cl = utf8_decode1(s + stop, len - stop, &c);
                if (!is_white_space(c)) break;
                stop += cl;
            }
        }
        *ms = start;
        *me = stop;
        return hit;
    }
    return -1;
}

static int encode_segment(Tokenizer *tok, int level, const uint8_t *s, size_t len, bool at_start, TokenIds *ids, PailErr *err);

// level 0: raw text, split on non-normalized added tokens; level 1: normalized text,
// split on normalized added tokens; the pieces between go on to normalize / pre-tokenize.
// at_start: s begins at offset 0 of the text.
static int encode_added(Tokenizer *tok, int level, const uint8_t *s, size_t len, bool at_start, TokenIds *ids, PailErr *err) {
    const AddedMatcher *m = level == 0 ? &tok->match_raw : &tok->match_norm;
    if (!m->n) return encode_segment(tok, level, s, len, at_start, ids, err);
    size_t pos = 0, ms, me;
    int t;
    while ((t = matcher_next(tok, m, s, len, pos, pos, &ms, &me)) >= 0) {
        if (ms > pos && encode_segment(tok, level, s + pos, ms - pos, at_start && pos == 0, ids, err) < 0) return -1;
        if (token_ids_push(ids, tok->added[t].id) < 0) return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
        pos = me;
    }
    return pos < len ? encode_segment(tok, level, s + pos, len - pos, at_start && pos == 0, ids, err) : 0;
}

static int encode_segment(Tokenizer *tok, int level, const uint8_t *s, size_t len, bool at_start, TokenIds *ids, PailErr *err) {
    if (level == 1) return pretok_encode(tok, 0, s, len, at_start, ids, err);
    if (!tok->n_norm) return encode_added(tok, 1, s, len, at_start, ids, err);
    Buf norm = {0};  // own buffer: normalized added tokens recurse into encode_segment
    if (normalizer_apply(tok, s, len, tok->match_norm.n ? &norm : &tok->norm_buf, err) < 0) { buf_free(&norm); return -1; }
    int rc = tok->match_norm.n ? encode_added(tok, 1, norm.data, norm.len, at_start, ids, err)
                               : pretok_encode(tok, 0, tok->norm_buf.data, tok->norm_buf.len, at_start, ids, err);
    buf_free(&norm);
    return rc;
}

int tokenizer_encode(Tokenizer *tok, const char *text, size_t len, TokenIds *ids, PailErr *err) {
    const uint8_t *s = (const uint8_t *)text;
    long bad = utf8_invalid_at(s, len);
    if (bad >= 0)
        return err_set(err, PAIL_ERR_INVALID, "tokenizer: text is not valid UTF-8 (byte 0x%02x at offset %ld)", s[bad], bad);
    pthread_mutex_lock(&tok->lock);
    int rc = encode_added(tok, 0, s, len, true, ids, err);
    pthread_mutex_unlock(&tok->lock);
    return rc;
}

int tokenizer_encode_text(Tokenizer *tok, const char *text, size_t len, TokenIds *ids, PailErr *err) {
    if (tok->pp_refused[0])
        return err_set(err, PAIL_ERR_UNSUPPORTED, "%s: post_processor %s: pail cannot add its special tokens to a plain "
                       "prompt (give the prompt a chat template, or write the tokens into --prompt-format)",
                       tok->name, tok->pp_refused);
    for (int i = 0; i < tok->n_pp_before; i++)
        if (token_ids_push(ids, tok->pp_ids[i]) < 0) return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
    if (tokenizer_encode(tok, text, len, ids, err) < 0) return -1;
    for (int i = 0; i < tok->n_pp_after; i++)
        if (token_ids_push(ids, tok->pp_ids[tok->n_pp_before + i]) < 0)
            return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
    return 0;
}

// ---- decode

static int decode_ids(const Tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, bool raw, Buf *out, PailErr *err) {
    if (tok->decoder == DEC_CHAIN) {  // the chain sees all the tokens' texts at once
        const char **texts = malloc((n ? n : 1) * sizeof *texts);
        if (!texts) return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            int32_t id = ids[i];
            if (id < 0 || id >= tok->vocab_size || !tok->id_text[id]) {
                free(texts);
                return err_set(err, PAIL_ERR_INVALID, "tokenizer: id %d at position %zu is not in the vocabulary (size %d)", id, i, tok->vocab_size);
            }
            if (!(skip_special && (tok->id_flags[id] & 2))) texts[k++] = tok->id_text[id];
        }
        int rc = decoder_chain(tok, texts, k, raw, out, err);
        free(texts);
        return rc;
    }
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tok->vocab_size || !tok->id_text[id])
            return err_set(err, PAIL_ERR_INVALID, "tokenizer: id %d at position %zu is not in the vocabulary (size %d)", id, i, tok->vocab_size);
        if (skip_special && (tok->id_flags[id] & 2)) continue;
        // Without a decoder the library joins tokens with spaces.
        if (tok->decoder == DEC_NONE && !first && buf_append(out, " ", 1) < 0) return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
        if (buf_append(out, tok->id_bytes[id].data, tok->id_bytes[id].len) < 0) return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
        first = false;
    }
    return 0;
}

int tokenizer_decode(const Tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, Buf *out, PailErr *err) {
    return decode_ids(tok, ids, n, skip_special, true, out, err);
}

int tokenizer_decode_text(const Tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, Buf *out, PailErr *err) {
    if (tok->decoder == DEC_CHAIN) return decode_ids(tok, ids, n, skip_special, false, out, err);
    Buf raw = {0};  // ByteLevel's bytes: the library's from_utf8_lossy
    int rc = decode_ids(tok, ids, n, skip_special, true, &raw, err);
    if (rc == 0 && utf8_append_lossy(out, raw.data ? raw.data : (const uint8_t *)"", raw.len) < 0)
        rc = err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
    buf_free(&raw);
    return rc;
}

// ByteLevel decoder for one token: every char back to its byte, or the token's own UTF-8
// when a char is outside the byte map (the library's fallback, e.g. for added tokens).
static int decode_token(const Tokenizer *tok, const char *text, Buf *out) {
    size_t len = strlen(text);
    if (tok->decoder == DEC_BYTE_LEVEL) {
        for (size_t i = 0; i < len;) {
            uint32_t cp;
            i += utf8_decode1((const uint8_t *)text + i, len - i, &cp);
            int b = tok_char_to_byte(cp);
            if (b < 0) { buf_reset(out); return buf_append(out, text, len); }
            uint8_t c = (uint8_t)b;
            if (buf_append(out, &c, 1) < 0) return -1;
        }
        return 0;
    }
    return buf_append(out, text, len);
}

// ---- loading

static int added_load(Tokenizer *tok, json_t *arr, PailErr *err) {
    if (!arr || json_is_null(arr)) return 0;
    if (!json_is_array(arr)) return err_set(err, PAIL_ERR_INVALID, "%s: added_tokens is not an array", tok->name);
    size_t n = json_array_size(arr);
    tok->added = calloc(n ? n : 1, sizeof *tok->added);
    if (!tok->added) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(arr, i), *id = json_object_get(a, "id"), *c = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= 1 << 30 || !json_is_string(c))
            return err_set(err, PAIL_ERR_INVALID, "%s: added_tokens[%zu] needs an \"id\" and a \"content\" string", tok->name, i);
        if (utf8_invalid_at((const uint8_t *)json_string_value(c), json_string_length(c)) >= 0 || !json_string_length(c))
            return err_set(err, PAIL_ERR_INVALID, "%s: added_tokens[%zu] content is empty or not UTF-8", tok->name, i);
        AddedToken *t = &tok->added[tok->n_added++];
        t->len = json_string_length(c);
        if (!(t->content = malloc(t->len + 1))) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
        memcpy(t->content, json_string_value(c), t->len + 1);
        t->id = (int32_t)json_integer_value(id);
        t->special = json_is_true(json_object_get(a, "special"));
        t->single_word = json_is_true(json_object_get(a, "single_word"));
        t->lstrip = json_is_true(json_object_get(a, "lstrip"));
        t->rstrip = json_is_true(json_object_get(a, "rstrip"));
        t->normalized = json_is_true(json_object_get(a, "normalized"));
        if (t->id >= tok->vocab_size) tok->vocab_size = t->id + 1;
    }
    return 0;
}

// Ids are bounded by the tokens the file holds: the tables are sized by the largest id
// (about 40 bytes per id), so one id near 2^30 would allocate tens of GB. Real files
// number their tokens densely; an id may leave at most as many holes as there are tokens
// (plus 256), so the tables stay proportional to the file.
static int ids_check(Tokenizer *tok, json_t *model, PailErr *err) {
    json_t *vocab = json_object_get(model, "vocab");
    size_t present = (json_is_object(vocab) ? json_object_size(vocab) : json_array_size(vocab)) + (size_t)tok->n_added;
    size_t limit = 2 * present + 256;
    if ((size_t)tok->vocab_size <= limit) return 0;
    int32_t id = tok->vocab_size - 1;
    const char *name = "?";
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].id == id) name = tok->added[i].content;
    if (json_is_object(vocab))
        for (void *it = json_object_iter(vocab); it; it = json_object_iter_next(vocab, it))
            if (json_integer_value(json_object_iter_value(it)) == id) name = json_object_iter_key(it);
    return err_set(err, PAIL_ERR_INVALID,
                   "%s: token \"%.60s\" has id %d, but the file holds %zu tokens (ids must be below %zu)", tok->name,
                   name, id, present, limit);
}

static int load_json(Tokenizer *tok, json_t *root, PailErr *err) {
    if (!json_is_object(root)) return err_set(err, PAIL_ERR_INVALID, "%s: not a JSON object", tok->name);
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return err_set(err, PAIL_ERR_INVALID, "%s: no \"model\" object (not a tokenizer.json?)", tok->name);
    if (normalizer_load(tok, json_object_get(root, "normalizer"), err) < 0) return -1;
    if (pretok_load(tok, json_object_get(root, "pre_tokenizer"), err) < 0) return -1;
    if (decoder_load(tok, json_object_get(root, "decoder"), err) < 0) return -1;
    if (bpe_load(tok, model, err) < 0) return -1;
    if (added_load(tok, json_object_get(root, "added_tokens"), err) < 0) return -1;
    if (ids_check(tok, model, err) < 0) return -1;
    size_t V = (size_t)tok->vocab_size;
    tok->id_text = calloc(V ? V : 1, sizeof *tok->id_text);
    tok->id_bytes = calloc(V ? V : 1, sizeof *tok->id_bytes);
    tok->id_flags = calloc(V ? V : 1, 1);
    if (!tok->id_text || !tok->id_bytes || !tok->id_flags) return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    if (bpe_load_tables(tok, model, err) < 0) return -1;
    for (int i = 0; i < tok->n_added; i++) {  // the added vocabulary wins for id -> text
        AddedToken *a = &tok->added[i];
        if (tok->id_text[a->id]) {  // the vocab has this id: it must be the same token
            if (strcmp(tok->id_text[a->id], a->content))
                return err_set(err, PAIL_ERR_INVALID, "%s: added token \"%s\" has id %d, which the vocab gives to \"%s\"",
                               tok->name, a->content, a->id, tok->id_text[a->id]);
        } else if (!(tok->id_text[a->id] = strdup(a->content))) {
            return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
        }
        tok->id_flags[a->id] = (uint8_t)(1 | (a->special ? 2 : 0));
    }
    for (size_t id = 0; id < V; id++) {
        if (tok->id_text[id] && strlen(tok->id_text[id]) > tok->max_token_len) tok->max_token_len = strlen(tok->id_text[id]);
        if (tok->decoder != DEC_CHAIN && tok->id_text[id] && decode_token(tok, tok->id_text[id], &tok->id_bytes[id]) < 0)
            return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    }
    if (matcher_build(&tok->match_raw, tok, false, err) < 0 || matcher_build(&tok->match_norm, tok, true, err) < 0) return -1;
    return postproc_load(tok, json_object_get(root, "post_processor"), err);
}

int tokenizer_load_mem(Tokenizer **out, const char *json, size_t len, const char *name, PailErr *err) {
    *out = NULL;
    Tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok || !(tok->name = strdup(name ? name : "tokenizer.json"))) {
        free(tok);
        return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory");
    }
    pthread_mutex_init(&tok->lock, NULL);
    tok->bos_id = tok->eos_id = -1;
    sha256_hex(json, len, tok->sha256);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_ALLOW_NUL, &je);
    if (!root) {
        err_set(err, PAIL_ERR_INVALID, "%s: not valid JSON at line %d column %d: %s", tok->name, je.line, je.column, je.text);
        tokenizer_free(tok);
        return -1;
    }
    int rc = load_json(tok, root, err);
    json_decref(root);
    if (rc < 0) { tokenizer_free(tok); return -1; }
    *out = tok;
    return 0;
}

// bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}.
static const char *config_token(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int tokenizer_load(Tokenizer **out, const char *path, PailErr *err) {
    Buf b = {0};
    *out = NULL;
    if (fs_read_file(path, &b, err) < 0) { buf_free(&b); return -1; }
    int rc = tokenizer_load_mem(out, (const char *)b.data, b.len, path, err);
    buf_free(&b);
    if (rc < 0) return -1;
    // tokenizer_config.json beside it, when present, names bos/eos.
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path + 1) : 0;
    char *cfg_path = malloc(dl + sizeof "tokenizer_config.json");
    if (!cfg_path) { tokenizer_free(*out); *out = NULL; return err_set(err, PAIL_ERR_NOMEM, "tokenizer: out of memory"); }
    memcpy(cfg_path, path, dl);
    strcpy(cfg_path + dl, "tokenizer_config.json");
    json_error_t je;
    json_t *cfg = NULL;
    if (access(cfg_path, F_OK) == 0 && !(cfg = json_load_file(cfg_path, JSON_DECODE_INT_AS_REAL, &je)))
        rc = err_set(err, PAIL_ERR_INVALID, "%s: not valid JSON at line %d column %d: %s", cfg_path, je.line, je.column, je.text);
    if (cfg) {
        rc = tokenizer_set_bos_eos(*out, config_token(cfg, "bos_token"), config_token(cfg, "eos_token"), err);
        if (rc < 0) err_wrap(err, "%s", cfg_path);
        json_decref(cfg);
    }
    free(cfg_path);
    if (rc < 0) { tokenizer_free(*out); *out = NULL; }
    return rc;
}

int tokenizer_set_bos_eos(Tokenizer *tok, const char *bos, const char *eos, PailErr *err) {
    if (bos && (tok->bos_id = tokenizer_token_id(tok, bos)) < 0)
        return err_set(err, PAIL_ERR_INVALID, "bos_token \"%s\" is not a token of %s", bos, tok->name);
    if (eos && (tok->eos_id = tokenizer_token_id(tok, eos)) < 0)
        return err_set(err, PAIL_ERR_INVALID, "eos_token \"%s\" is not a token of %s", eos, tok->name);
    return 0;
}

void tokenizer_free(Tokenizer *tok) {
    if (!tok) return;
    matcher_free(&tok->match_raw, tok->n_added);
    matcher_free(&tok->match_norm, tok->n_added);
    pretok_free(tok);
    normalizer_free(tok);
    decoder_free(tok);
    // id_text strings are the vocab map's keys: free them after the map
    bpe_free(&tok->bpe);
    for (int32_t i = 0; i < tok->vocab_size && tok->id_text; i++) {
        free(tok->id_text[i]);
        if (tok->id_bytes) buf_free(&tok->id_bytes[i]);
    }
    free(tok->id_text);
    free(tok->id_bytes);
    free(tok->id_flags);
    for (int i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    free(tok->pp_ids);
    buf_free(&tok->norm_buf);
    pthread_mutex_destroy(&tok->lock);
    free(tok->name);
    free(tok);
}

int32_t tokenizer_token_id(const Tokenizer *tok, const char *token) {
    size_t len = strlen(token);
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].len == len && !memcmp(tok->added[i].content, token, len)) return tok->added[i].id;
    return strmap_get(&tok->bpe.vocab, token, len);
}

const char *tokenizer_token_text(const Tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->vocab_size ? tok->id_text[id] : NULL;
}

size_t tokenizer_max_text_bytes(const Tokenizer *tok, size_t n_tokens) {
    size_t per = TOKENIZER_TEXT_SLACK * (tok->max_token_len ? tok->max_token_len : 1);
    return n_tokens > SIZE_MAX / per ? SIZE_MAX : n_tokens * per;
}

int32_t tokenizer_vocab_size(const Tokenizer *tok) { return tok->vocab_size; }
int32_t tokenizer_bos_id(const Tokenizer *tok) { return tok->bos_id; }
int32_t tokenizer_eos_id(const Tokenizer *tok) { return tok->eos_id; }
const char *tokenizer_sha256(const Tokenizer *tok) { return tok->sha256; }
bool tokenizer_is_special(const Tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->vocab_size && (tok->id_flags[id] & 2);
}
