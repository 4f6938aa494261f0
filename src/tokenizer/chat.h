// Chat formatting: renders a conversation [{role, content}] exactly as the model's
// tokenizer_config.json chat_template does in transformers' apply_chat_template, for the
// templates pail knows (recognised by the template text's sha256, see doc/tokenizer.md),
// or with a plain --prompt-format string holding {prompt}. Not a Jinja interpreter.
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include "core/buf.h"
#include "core/err.h"

typedef enum {
    CHAT_NONE = 0,
    CHAT_CHATML,  // Qwen2-style ChatML with the default system message
    CHAT_QWEN3,   // Qwen3: ChatML with <think> handling of assistant turns (no tools)
    CHAT_LLAMA3,  // Llama 3: bos + header blocks, trimmed content, <|eot_id|>
    CHAT_PLAIN,   // user-given format string with {prompt}
} ChatKind;

typedef struct {
    const char *role, *content;  // borrowed
} ChatMessage;

typedef struct {
    ChatKind kind;
    char *bos_token;      // owned; "" when the config has none
    char *plain_format;   // owned; CHAT_PLAIN only
    char sha256[65];      // of the chat_template text ("" for CHAT_PLAIN)
} ChatTemplate;

typedef struct {
    bool add_generation_prompt;
    int enable_thinking;  // -1 undefined (template default), 0 false, 1 true
} ChatOptions;

// Which known template this text is; CHAT_NONE when unknown.
ChatKind chat_template_detect(const char *text, size_t len);
const char *chat_kind_name(ChatKind k);
// With prompt_format non-NULL: CHAT_PLAIN (it must contain {prompt}). Otherwise reads
// chat_template and bos_token from tokenizer_config.json; an unknown template is an error
// that names its sha256 and suggests --prompt-format. 0 / -1 with err.
int chat_template_load(ChatTemplate *out, const char *tokenizer_config_path, const char *prompt_format,
                       PailErr *err);
void chat_template_free(ChatTemplate *t);
// Appends the rendered conversation to out. CHAT_PLAIN takes exactly one user message.
int chat_render(const ChatTemplate *t, const ChatMessage *msgs, int n, const ChatOptions *opt, Buf *out,
                PailErr *err);
// Reads a JSON array of {"role": str, "content": str} into *msgs (malloc'd array whose
// strings are borrowed from arr). 0 / -1 with err.
int chat_messages_from_json(json_t *arr, ChatMessage **msgs, int *n, PailErr *err);
