// Chat formatting: renders a conversation as transformers' apply_chat_template does, with
// the model's own Jinja chat template run by pail's sandboxed interpreter (jinja.h), or
// with a plain --prompt-format string holding {prompt}.
//
// Where the template comes from, in transformers' order (doc/tokenizer.md):
//   1. --chat-template FILE (ChatSource.template_file);
//   2. chat_template.jinja and additional_chat_templates/NAME.jinja beside tokenizer.json
//      (transformers 5 saves templates there; when present they replace the config's);
//   3. tokenizer_config.json's "chat_template": a string, or a list of {name, template}.
// With several named templates: --chat-template-name NAME, else "tool_use" for a row that
// has tools when the model has one, else "default".
// The template sees what transformers passes: messages (the row's JSON as is, keys whose
// value is null dropped, reasoning_content/thinking/reasoning aliased to each other), tools
// (the row's "tools", or None), documents (None), add_generation_prompt, the special tokens
// tokenizer_config.json sets (bos_token, eos_token, unk_token, sep_token, pad_token,
// cls_token, mask_token; unset ones stay undefined) and --chat-template-kwargs.
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/buf.h"
#include "core/err.h"
#include "tokenizer/jinja.h"

typedef struct {
    const char *template_file;  // --chat-template FILE, or NULL
    const char *template_name;  // --chat-template-name NAME, or NULL
    const char *kwargs_json;    // --chat-template-kwargs: a JSON object of extra template variables, or NULL
    const char *prompt_format;  // --prompt-format "...{prompt}...": no template (one user message), or NULL
} ChatSource;

// The chat flags of every tool that renders chats (grpo-rollout, grpo-train --sft, grpo-ctl eval and
// tokenize): rows of a core/flags.h table filling four char * (owned copies) for a ChatSource.
#define CHAT_CLI_FLAGS(file, name, kwargs, fmt)                                                                   \
    {"chat-template", FLAG_STRING, (file), NULL, 1, 0, "Jinja chat template FILE instead of the model's"},        \
    {"chat-template-name", FLAG_STRING, (name), NULL, 1, 0,                                                       \
     "which of the model's named chat templates (default: \"tool_use\" for rows with tools when there is one, "  \
     "else \"default\")"},                                                                                       \
    {"chat-template-kwargs", FLAG_STRING, (kwargs), NULL, 1, 0,                                                   \
     "JSON object of extra chat-template variables, e.g. {\"enable_thinking\": false}"},                         \
    {"prompt-format", FLAG_STRING, (fmt), NULL, 1, 0, "plain format with {prompt} instead of a chat template"}

typedef struct {
    JinjaTemplate *tmpl;        // owned; the template used (NULL with a plain format)
    JinjaTemplate *tmpl_tools;  // owned; the "tool_use" template for rows with tools, or NULL (use tmpl)
    char *plain_format;         // owned; --prompt-format, or NULL
    json_t *vars;               // owned: special tokens, then --chat-template-kwargs over them
    char source[600];           // where the template came from: "DIR/chat_template.jinja", "FILE",
                                // "DIR/tokenizer_config.json (chat_template \"default\")", "--prompt-format"
    char sha256[65];            // of the template text used
    char *text;                 // owned: the source of the template rows with tools get (NULL with a plain format)
    int64_t now;                // strftime_now's clock (JinjaLimits.now); INT64_MIN = the real clock
} ChatTemplate;

// Whether any chat flag was given (then a template that fails to load stops the tool).
static inline bool chat_source_given(const ChatSource *s) {
    return s->template_file || s->template_name || s->kwargs_json || s->prompt_format;
}

// Loads the template for the tokenizer in dir (the model folder: tokenizer.json,
// tokenizer_config.json, chat_template.jinja). tokenizer_config NULL = dir/tokenizer_config.json.
// src may be NULL (all defaults). A missing template is PAIL_ERR_NOT_FOUND naming where it
// looked; a template that does not parse names FILE:LINE:COL. 0 / -1 with err.
int chat_template_load(ChatTemplate *out, const char *dir, const char *tokenizer_config, const ChatSource *src,
                       PailErr *err);
void chat_template_free(ChatTemplate *t);
// Sets a template variable (e.g. enable_thinking) over what the config and kwargs gave;
// takes a reference to v. 0 / -1.
int chat_template_set_var(ChatTemplate *t, const char *name, json_t *v, PailErr *err);

// Appends the rendered conversation to out (nothing on failure). messages: a JSON array of
// message objects; tools: a JSON array or NULL. A plain format takes exactly one user
// message. raise_exception in the template fails with its message. 0 / -1 with err.
int chat_render(const ChatTemplate *t, json_t *messages, json_t *tools, bool add_generation_prompt, Buf *out,
                PailErr *err);
// The same for one user message with this text (prompt rows under --chat).
int chat_render_prompt(const ChatTemplate *t, const char *prompt, bool add_generation_prompt, Buf *out,
                       PailErr *err);
