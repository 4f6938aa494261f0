// Tool calls in an assistant turn's text (doc/tool-calls.md): the Hermes / Qwen2.5 / Qwen3
// family (<tool_call>{json}</tool_call> blocks) and Llama 3.1+ JSON tool calling (the turn is
// {"name": ..., "parameters": ...} objects, optionally after <|python_tag|>). Parses text only:
// running tools and talking to the environment program is the rollout worker's business.
#pragma once
#include <jansson.h>
#include "core/err.h"

typedef enum { TOOL_FORMAT_NONE, TOOL_FORMAT_HERMES, TOOL_FORMAT_LLAMA3 } ToolFormat;

// "none", "hermes" (also "qwen"), "llama3" -> *out; anything else: -1 with err naming the value
// and the choices.
int tool_format_parse(const char *s, ToolFormat *out, PailErr *err);
// "none", "hermes", "llama3".
const char *tool_format_name(ToolFormat f);
// The family a chat template's source text renders tool calls in: "<tool_call>" in it -> HERMES;
// "<|python_tag|>" or "ipython" -> LLAMA3; else (or NULL) NONE.
ToolFormat tool_format_detect(const char *template_source);

// Parses one assistant turn's decoded text (special tokens kept or not).
// *calls: a new JSON array, one object per call found, in order:
//   {"name": "f", "arguments": {...}}   well-formed ("arguments" always an object: a JSON string
//                                        holding an object is decoded, "parameters" is renamed,
//                                        missing or null is {});
//   {"error": "one line", "raw": "the call's text"}   malformed (bad JSON, no name, arguments not an
//                                        object, an unclosed <tool_call>).
// *content: malloc'd text outside the calls and outside a leading <think>...</think> block, trimmed,
// end-of-turn markers (<|im_end|>, <|eot_id|>, <|eom_id|>, <|endoftext|>, <|end_of_text|>) at the end
// removed. *reasoning (when reasoning != NULL): malloc'd, trimmed text of that block, "" when none.
// TOOL_FORMAT_NONE finds no calls (the same cleanup applies). Returns the number of well-formed calls,
// or -1 with err (and the outputs NULL) only when out of memory. Thread-safe.
int tool_calls_parse(ToolFormat f, const char *text, json_t **calls, char **content, char **reasoning,
                     PailErr *err);
