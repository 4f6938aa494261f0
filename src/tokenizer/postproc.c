// The post_processor of a tokenizer.json, read for one thing: the special tokens that
// transformers' tokenizer(text) (add_special_tokens=True) puts around a single text,
// e.g. Gemma's and Llama's <bos>. pail applies them to plain prompts only
// (tokenizer_encode_text); chat templates write their own. Pairs and offsets are not
// pail's concern. ByteLevel adds nothing; TemplateProcessing's "single" template,
// Roberta/BertProcessing's cls and sep, and a Sequence of these are read; any other kind
// is remembered and refused when a plain prompt needs it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_internal.h"

#define PP_MAX 8  // special tokens around one text: transformers' own processors add at most two

typedef struct {
    int32_t before[PP_MAX], after[PP_MAX];
    int nb, na;
} PpIds;

static int pp_push(Tokenizer *tok, PpIds *p, bool after, json_int_t id, PailErr *err) {
    if (id < 0 || id >= tok->vocab_size || !tok->id_text[id])
        return err_set(err, PAIL_ERR_INVALID, "%s: post_processor: special token id %lld is not in the vocabulary (size %d)",
                       tok->name, (long long)id, tok->vocab_size);
    int *n = after ? &p->na : &p->nb;
    if (*n == PP_MAX)
        return err_set(err, PAIL_ERR_INVALID, "%s: post_processor adds more than %d special tokens around a text", tok->name, PP_MAX);
    (after ? p->after : p->before)[(*n)++] = (int32_t)id;
    return 0;
}

// TemplateProcessing: "single" is a list of {"SpecialToken": {"id": NAME}} and one
// {"Sequence": {"id": "A"}}; special_tokens[NAME].ids are the ids NAME stands for.
static int template_single(Tokenizer *tok, json_t *pp, PpIds *p, PailErr *err) {
    json_t *single = json_object_get(pp, "single"), *specials = json_object_get(pp, "special_tokens"), *item;
    if (!json_is_array(single))
        return err_set(err, PAIL_ERR_INVALID, "%s: post_processor TemplateProcessing without a \"single\" list", tok->name);
    bool after = false;
    size_t i;
    json_array_foreach(single, i, item) {
        json_t *sp = json_object_get(item, "SpecialToken");
        if (json_object_get(item, "Sequence")) {
            after = true;
            continue;
        }
        const char *name = json_string_value(json_object_get(sp, "id"));
        json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids"), *id;
        if (!name || !json_is_array(ids))
            return err_set(err, PAIL_ERR_INVALID, "%s: post_processor TemplateProcessing: single[%zu] is not a Sequence "
                                                  "or a SpecialToken listed in special_tokens with its ids",
                           tok->name, i);
        size_t k;
        json_array_foreach(ids, k, id) {
            if (!json_is_integer(id))
                return err_set(err, PAIL_ERR_INVALID, "%s: post_processor: special token \"%s\" has a non-integer id", tok->name, name);
            if (pp_push(tok, p, after, json_integer_value(id), err) < 0) return -1;
        }
    }
    return 0;
}

// Roberta/BertProcessing: "cls": [token, id] before, "sep": [token, id] after.
static int cls_sep(Tokenizer *tok, json_t *pp, PpIds *p, PailErr *err) {
    const char *key[2] = {"cls", "sep"};
    for (int k = 0; k < 2; k++) {
        json_t *id = json_array_get(json_object_get(pp, key[k]), 1);
        if (!json_is_integer(id))
            return err_set(err, PAIL_ERR_INVALID, "%s: post_processor: \"%s\" is not [token, id]", tok->name, key[k]);
        if (pp_push(tok, p, k == 1, json_integer_value(id), err) < 0) return -1;
    }
    return 0;
}

static int pp_one(Tokenizer *tok, json_t *pp, PpIds *p, int depth, PailErr *err) {
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!type) return err_set(err, PAIL_ERR_INVALID, "%s: post_processor without a \"type\"", tok->name);
    if (!strcmp(type, "ByteLevel")) return 0;  // offsets only
    if (!strcmp(type, "TemplateProcessing")) return template_single(tok, pp, p, err);
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) return cls_sep(tok, pp, p, err);
    if (!strcmp(type, "Sequence") && depth < 4) {
        json_t *list = json_object_get(pp, "processors"), *q;
        if (!json_is_array(list))
            return err_set(err, PAIL_ERR_INVALID, "%s: post_processor Sequence without a \"processors\" list", tok->name);
        size_t i;
        json_array_foreach(list, i, q) {
            if (pp_one(tok, q, p, depth + 1, err) < 0) return -1;
        }
        return 0;
    }
    snprintf(tok->pp_refused, sizeof tok->pp_refused, "'%.64s'", type);
    return 0;
}

int postproc_load(Tokenizer *tok, json_t *pp, PailErr *err) {
    PpIds p = {.nb = 0};
    if (!pp || json_is_null(pp)) return 0;
    if (!json_is_object(pp)) return err_set(err, PAIL_ERR_INVALID, "%s: post_processor is not an object", tok->name);
    if (pp_one(tok, pp, &p, 0, err) < 0) return -1;
    if (p.nb + p.na == 0) return 0;
    if (!(tok->pp_ids = malloc((size_t)(p.nb + p.na) * sizeof *tok->pp_ids)))
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", tok->name);
    memcpy(tok->pp_ids, p.before, (size_t)p.nb * sizeof *tok->pp_ids);
    memcpy(tok->pp_ids + p.nb, p.after, (size_t)p.na * sizeof *tok->pp_ids);
    tok->n_pp_before = p.nb, tok->n_pp_after = p.na;
    return 0;
}
