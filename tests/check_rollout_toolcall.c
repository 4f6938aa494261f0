// Check suite for src/rollout/toolcall.c: Hermes / Qwen <tool_call> blocks and Llama 3 JSON
// calls (one, several, text around them, <think> blocks, string arguments, end markers),
// plain text that only looks like JSON, each malformed call giving an error entry, every
// prefix of a turn and invalid UTF-8 (hostile input), format names and detection, and a
// round trip through pail's chat renderer with small inline templates in the Qwen2.5 and
// Llama 3.2 styles (written for this test, modelled on the published ones).
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check_tmp.h"
#include "rollout/toolcall.h"
#include "tokenizer/chat.h"

// Expected JSON written with ' for " (none of the expectations holds a ').
static json_t *J(const char *s) {
    char b[2048];
    snprintf(b, sizeof b, "%s", s);
    for (char *c = b; *c; c++)
        if (*c == '\'') *c = '"';
    json_error_t je;
    json_t *j = json_loads(b, 0, &je);
    ck_assert_msg(j, "expectation %s: %s", b, je.text);
    return j;
}

// Parses text; checks the well-formed count, the whole calls array (want_calls, ' for "; NULL:
// not checked), the content and (want_reasoning non-NULL) the reasoning. Returns the calls.
static json_t *parse(ToolFormat f, const char *text, int want_good, const char *want_calls, const char *want_content,
                     const char *want_reasoning) {
    json_t *calls;
    char *content, *reasoning = NULL;
    PailErr err = {0};
    int got = tool_calls_parse(f, text, &calls, &content, want_reasoning ? &reasoning : NULL, &err);
    char *dump = json_dumps(calls, JSON_COMPACT);
    ck_assert_msg(got == want_good, "%s: %d well-formed calls, want %d: %s", text, got, want_good, dump);
    ck_assert(json_is_array(calls));
    if (want_calls) {
        json_t *w = J(want_calls);
        ck_assert_msg(json_equal(calls, w), "%s:\ngot  %s\nwant %s", text, dump, want_calls);
        json_decref(w);
    }
    ck_assert_msg(!strcmp(content, want_content), "%s: content '%s', want '%s'", text, content, want_content);
    if (want_reasoning)
        ck_assert_msg(!strcmp(reasoning, want_reasoning), "%s: reasoning '%s', want '%s'", text, reasoning, want_reasoning);
    free(dump);
    free(content);
    free(reasoning);
    return calls;
}

static void parse_check(ToolFormat f, const char *text, int want_good, const char *want_calls, const char *want_content) {
    json_decref(parse(f, text, want_good, want_calls, want_content, NULL));
}

// One malformed entry i: its error holds needle and its raw text is want_raw.
static void error_at(json_t *calls, size_t i, const char *needle, const char *want_raw) {
    json_t *e = json_array_get(calls, i);
    const char *msg = json_string_value(json_object_get(e, "error")), *raw = json_string_value(json_object_get(e, "raw"));
    ck_assert_msg(msg && strstr(msg, needle) && !strchr(msg, '\n'), "call %zu: error '%s' lacks '%s'", i, msg, needle);
    ck_assert_msg(raw && !strcmp(raw, want_raw), "call %zu: raw '%s', want '%s'", i, raw, want_raw);
    ck_assert_int_eq(json_object_size(e), 2);
}

static void parse_error(ToolFormat f, const char *text, const char *needle, const char *want_raw, const char *want_content) {
    json_t *calls = parse(f, text, 0, NULL, want_content, NULL);
    ck_assert_int_eq(json_array_size(calls), 1);
    error_at(calls, 0, needle, want_raw);
    json_decref(calls);
}

#define H TOOL_FORMAT_HERMES
#define L TOOL_FORMAT_LLAMA3

// ---- Hermes / Qwen ----

START_TEST(test_hermes) {
    // Qwen2.5's rendering of one call without content, special tokens kept
    parse_check(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call><|im_end|>\n",
                1, "[{'name': 'get_weather', 'arguments': {'city': 'Paris', 'days': 3}}]", "");
    // several, text before, between and after, no special tokens
    parse_check(H,
                "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}</tool_call> and then\n"
                "<tool_call>\n{\"arguments\": {\"y\": null}, \"name\": \"c\"}\n</tool_call>\nDone.",
                3, "[{'name': 'a', 'arguments': {}}, {'name': 'b', 'arguments': {'x': [1, 2]}}, {'name': 'c', 'arguments': {'y': null}}]",
                "Let me check both.\n\n and then\n\nDone.");
    // arguments as a string holding JSON (OpenAI-style arguments through Qwen2.5's tojson)
    parse_check(H, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": \\\"a b\\\", \\\"n\\\": 2}\"}\n</tool_call>", 1,
                "[{'name': 'f', 'arguments': {'q': 'a b', 'n': 2}}]", "");
    // no arguments (Hermes 2 Pro's template omits the key), null arguments, extra keys dropped
    parse_check(H, "<tool_call>{\"name\": \"now\"}</tool_call><tool_call>{\"name\": \"now\", \"arguments\": null, \"id\": 7}</tool_call>",
                2, "[{'name': 'now', 'arguments': {}}, {'name': 'now', 'arguments': {}}]", "");
    // "</tool_call>" and "<tool_call>" inside a JSON string do not end or start a call
    parse_check(H, "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"s\": \"</tool_call> <tool_call>\"}}\n</tool_call>", 1,
                "[{'name': 'echo', 'arguments': {'s': '</tool_call> <tool_call>'}}]", "");
    // no calls: all content; a stray closing tag is content too
    parse_check(H, "  The answer is 4.<|im_end|>", 0, "[]", "The answer is 4.");
    parse_check(H, "a </tool_call> b", 0, "[]", "a </tool_call> b");
    parse_check(H, "", 0, "[]", "");
}
END_TEST

START_TEST(test_think) {
    // Qwen3 thinking: the block goes to reasoning; a <tool_call> inside it is no call
    const char *t = "<think>\nI could write <tool_call> here.\nBetter call f.\n</think>\n\nCalling f.\n"
                    "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"k\": 1}}\n</tool_call><|im_end|>";
    json_decref(parse(H, t, 1, "[{'name': 'f', 'arguments': {'k': 1}}]", "Calling f.", "I could write <tool_call> here.\nBetter call f."));
    parse_check(H, t, 1, "[{'name': 'f', 'arguments': {'k': 1}}]", "Calling f.");  // reasoning not asked for: dropped
    // Qwen3 with enable_thinking false: an empty block
    json_decref(parse(H, "<think>\n\n</think>\n\n4<|im_end|>", 0, "[]", "4", ""));
    // no block: reasoning ""
    json_decref(parse(H, "4", 0, "[]", "4", ""));
    // "<think>\n" was in the generation prompt (QwQ, DeepSeek-R1): only the closing tag is generated
    json_decref(parse(H, "so f it is\n</think>\n\n<tool_call>{\"name\": \"f\"}</tool_call>", 1,
                      "[{'name': 'f', 'arguments': {}}]", "", "so f it is"));
    // cut off while thinking: all reasoning, no calls
    json_decref(parse(H, "<think>\nmaybe <tool_call>{\"name\": \"f\"}</tool_call>", 0, "[]", "", "maybe <tool_call>{\"name\": \"f\"}</tool_call>"));
    // a block that is not leading stays content
    json_decref(parse(H, "Hi <think>x</think> there", 0, "[]", "Hi <think>x</think> there", ""));
    // the same for Llama and with no format
    json_decref(parse(L, "<think>hm</think>{\"name\": \"f\", \"parameters\": {}}<|eot_id|>", 1, "[{'name': 'f', 'arguments': {}}]", "", "hm"));
    json_decref(parse(TOOL_FORMAT_NONE, "<think>hm</think>\nhello<|im_end|>", 0, "[]", "hello", "hm"));
}
END_TEST

// ---- Llama 3 ----

START_TEST(test_llama) {
    // Llama 3.1 / 3.2 rendering: "parameters", then <|eot_id|>
    parse_check(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>", 1,
                "[{'name': 'get_weather', 'arguments': {'city': 'Paris'}}]", "");
    parse_check(L, "\n{\"name\": \"f\", \"arguments\": {\"a\": true}}\n", 1, "[{'name': 'f', 'arguments': {'a': true}}]", "");
    parse_check(L, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}}<|eom_id|>", 1, "[{'name': 'f', 'arguments': {'a': 1}}]", "");
    parse_check(L, "{\"name\": \"f\", \"parameters\": \"{\\\"a\\\": 1}\"}", 1, "[{'name': 'f', 'arguments': {'a': 1}}]", "");
    // several: ';' and newlines
    parse_check(L,
                "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}};"
                "{\"name\": \"c\", \"parameters\": {}}\n{\"name\": \"d\", \"arguments\": {}}",
                4, "[{'name': 'a', 'arguments': {}}, {'name': 'b', 'arguments': {'x': 1}}, {'name': 'c', 'arguments': {}}, {'name': 'd', 'arguments': {}}]",
                "");
    // text after the calls is content
    parse_check(L, "{\"name\": \"f\", \"parameters\": {}}\nI called f.", 1, "[{'name': 'f', 'arguments': {}}]", "I called f.");
    // not calls: prose with braces, JSON that is no call, a call not at the start
    parse_check(L, "The set {1, 2} has two elements.<|eot_id|>", 0, "[]", "The set {1, 2} has two elements.");
    parse_check(L, "{1, 2} is a set", 0, "[]", "{1, 2} is a set");
    parse_check(L, "{\"answer\": 42}", 0, "[]", "{\"answer\": 42}");
    parse_check(L, "{\"name\": \"Ada\", \"born\": 1815}", 0, "[]", "{\"name\": \"Ada\", \"born\": 1815}");
    parse_check(L, "Calling: {\"name\": \"f\", \"parameters\": {}}", 0, "[]", "Calling: {\"name\": \"f\", \"parameters\": {}}");
    // Hermes tags are not Llama calls, and Llama JSON is not a Hermes call
    parse_check(L, "<tool_call>{\"name\": \"f\"}</tool_call>", 0, "[]", "<tool_call>{\"name\": \"f\"}</tool_call>");
    parse_check(H, "{\"name\": \"f\", \"parameters\": {}}", 0, "[]", "{\"name\": \"f\", \"parameters\": {}}");
}
END_TEST

START_TEST(test_none_and_names) {
    parse_check(TOOL_FORMAT_NONE, "  <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>", 0, "[]",
                "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
    parse_check(TOOL_FORMAT_NONE, "{\"name\": \"f\", \"parameters\": {}}<|eot_id|>", 0, "[]", "{\"name\": \"f\", \"parameters\": {}}");
    const struct { const char *s; ToolFormat f; const char *name; } names[] = {
        {"none", TOOL_FORMAT_NONE, "none"}, {"hermes", H, "hermes"}, {"qwen", H, "hermes"}, {"llama3", L, "llama3"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ToolFormat f = (ToolFormat)-1;
        PailErr err = {0};
        ck_assert_msg(tool_format_parse(names[i].s, &f, &err) == 0, "%s: %s", names[i].s, err.msg);
        ck_assert_int_eq(f, names[i].f);
        ck_assert_str_eq(tool_format_name(f), names[i].name);
    }
    const char *bad[] = {"llama", "Hermes", "", "qwen3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ToolFormat f = L;
        PailErr err = {0};
        ck_assert_int_eq(tool_format_parse(bad[i], &f, &err), -1);
        ck_assert_int_eq(err.code, PAIL_ERR_INVALID);
        char want[64];
        snprintf(want, sizeof want, "'%s'", bad[i]);
        ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, "none, hermes (or qwen) or llama3"), "%s", err.msg);
        ck_assert_int_eq(f, L);  // untouched
    }
    // snippets of the published templates
    ck_assert_int_eq(tool_format_detect("{{- '\\n<tool_call>\\n{\"name\": \"' }}"), H);
    ck_assert_int_eq(tool_format_detect("{{- \"<|python_tag|>\" + tool_call.name + \".call(\" }}"), L);
    ck_assert_int_eq(tool_format_detect("{{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}"), L);
    ck_assert_int_eq(tool_format_detect("{% if 'ipython' %}<tool_call>{% endif %}"), H);  // Hermes wins
    ck_assert_int_eq(tool_format_detect("{{ '<|im_start|>' + message.role + '\\n' + message.content }}"), TOOL_FORMAT_NONE);
    ck_assert_int_eq(tool_format_detect(""), TOOL_FORMAT_NONE);
    ck_assert_int_eq(tool_format_detect(NULL), TOOL_FORMAT_NONE);
}
END_TEST

// ---- round trip through pail's chat renderer ----

// Qwen2.5's assistant branch (tool_call.function unwrapped, arguments | tojson), reduced.
static const char *QWEN_STYLE =
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}";

// Llama 3.2's assistant branch: one call, "parameters", then <|eot_id|>.
static const char *LLAMA_STYLE =
    "{%- for message in messages %}"
    "{%- if 'tool_calls' in message %}"
    "{%- set tool_call = message.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{{- '{\"name\": \"' + tool_call.name + '\", ' }}{{- '\"parameters\": ' }}{{- tool_call.arguments | tojson }}{{- '}' }}"
    "{{- '<|eot_id|>' }}"
    "{%- else %}{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}";

// Renders [user, assistant with tool_calls] through tmpl, parses what follows the assistant
// header back and checks the calls and the content against the message.
static void round_trip(const char *tmpl, const char *header, ToolFormat f, const char *tool_calls_json, const char *content) {
    char dir[64], path[128];
    tmp_make(dir, sizeof dir, "toolcall");
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *fp = fopen(path, "w");
    ck_assert_ptr_nonnull(fp);
    fputs(tmpl, fp);
    fclose(fp);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    fp = fopen(path, "w");
    ck_assert_ptr_nonnull(fp);
    fputs("{\"eos_token\": \"<|im_end|>\"}", fp);
    fclose(fp);
    ChatTemplate t;
    PailErr err = {0};
    ck_assert_msg(chat_template_load(&t, dir, NULL, NULL, &err) == 0, "%s", err.msg);
    json_t *tc = J(tool_calls_json);
    json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:s, s:O}]", "role", "user", "content", "weather?", "role", "assistant",
                             "content", content, "tool_calls", tc);
    Buf b = {0};
    ck_assert_msg(chat_render(&t, msgs, NULL, false, &b, &err) == 0, "%s", err.msg);
    const char *at = strstr((char *)b.data, header);
    ck_assert_msg(at, "no '%s' in:\n%s", header, (char *)b.data);
    json_t *calls;
    char *got_content;
    size_t n = json_array_size(tc);
    ck_assert_int_eq(tool_calls_parse(f, at + strlen(header), &calls, &got_content, NULL, &err), (int)n);
    ck_assert_int_eq(json_array_size(calls), n);
    for (size_t i = 0; i < n; i++) {
        json_t *fn = json_object_get(json_array_get(tc, i), "function"), *c = json_array_get(calls, i);
        json_t *args = json_object_get(fn, "arguments"), *want_args = json_is_string(args) ? J(json_string_value(args)) : json_incref(args);
        ck_assert_str_eq(json_string_value(json_object_get(c, "name")), json_string_value(json_object_get(fn, "name")));
        ck_assert_msg(json_equal(json_object_get(c, "arguments"), want_args), "call %zu of:\n%s", i, (char *)b.data);
        json_decref(want_args);
    }
    ck_assert_str_eq(got_content, content);
    free(got_content);
    json_decref(calls);
    json_decref(msgs);
    json_decref(tc);
    buf_free(&b);
    chat_template_free(&t);
    tmp_remove(dir);
}

START_TEST(test_round_trip) {
    const char *two =
        "[{'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'city': 'S\xC3\xA3o Paulo', 'unit': 'c', 'days': [1, 2]}}},"
        " {'type': 'function', 'function': {'name': 'note', 'arguments': {'text': 'say <b>hi</b> \\\\ \\n done', 'n': 1.5}}}]";
    round_trip(QWEN_STYLE, "<|im_start|>assistant", H, two, "");
    round_trip(QWEN_STYLE, "<|im_start|>assistant", H, two, "Checking both.");
    // OpenAI-style arguments: a string holding the JSON object
    round_trip(QWEN_STYLE, "<|im_start|>assistant", H, "[{'function': {'name': 'f', 'arguments': '{}'}}]", "");
    round_trip(LLAMA_STYLE, "<|start_header_id|>assistant<|end_header_id|>", L,
               "[{'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'city': 'Paris', 'opts': {'a': null}}}}]", "");
}
END_TEST

// ---- limits: malformed calls ----

START_TEST(test_malformed_hermes) {
    // bad JSON (a brace short), with a good call after it: order kept, only one counted
    json_t *calls = parse(H,
                          "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}\n</tool_call>\n"
                          "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>",
                          1, NULL, "", NULL);
    ck_assert_int_eq(json_array_size(calls), 2);
    error_at(calls, 0, "bad JSON", "{\"name\": \"f\", \"arguments\": {\"x\": 1}");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(calls, 1), "name")), "g");
    json_decref(calls);
    parse_error(H, "<tool_call>{'name': 'f'}</tool_call>", "bad JSON", "{'name': 'f'}", "");
    parse_error(H, "<tool_call>get_weather(city=\"Paris\")</tool_call>", "bad JSON", "get_weather(city=\"Paris\")", "");
    parse_error(H, "<tool_call>{\"name\": \"f\"} extra</tool_call>", "bad JSON", "{\"name\": \"f\"} extra", "");
    parse_error(H, "<tool_call></tool_call>", "bad JSON", "", "");
    parse_error(H, "<tool_call>[{\"name\": \"f\"}]</tool_call>", "an array, not a JSON object", "[{\"name\": \"f\"}]", "");
    // no or a wrong name
    parse_error(H, "<tool_call>{\"arguments\": {\"x\": 1}}</tool_call>", "no \"name\"", "{\"arguments\": {\"x\": 1}}", "");
    parse_error(H, "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>", "\"name\" is a number", "{\"name\": 3, \"arguments\": {}}", "");
    parse_error(H, "<tool_call>{\"name\": \"\"}</tool_call>", "\"name\" is empty", "{\"name\": \"\"}", "");
    // arguments not an object
    parse_error(H, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "\"arguments\" is an array, not an object",
                "{\"name\": \"f\", \"arguments\": [1]}", "");
    parse_error(H, "<tool_call>{\"name\": \"f\", \"arguments\": 5}</tool_call>", "is a number", "{\"name\": \"f\", \"arguments\": 5}", "");
    parse_error(H, "<tool_call>{\"name\": \"f\", \"arguments\": \"x=1\"}</tool_call>", "\"arguments\" is a string that does not hold a JSON object",
                "{\"name\": \"f\", \"arguments\": \"x=1\"}", "");
    parse_error(H, "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>", "does not hold a JSON object",
                "{\"name\": \"f\", \"arguments\": \"[1]\"}", "");
    // unclosed (generation cut off), with text before it kept as content
    parse_error(H, "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}<|im_end|>", "unclosed <tool_call>",
                "{\"name\": \"f\", \"arguments\": {}}", "Sure.");
    parse_error(H, "<tool_call>\n{\"name\": \"f\", \"argu", "unclosed", "{\"name\": \"f\", \"argu", "");
    parse_error(H, "<tool_call>", "unclosed", "", "");
}
END_TEST

START_TEST(test_malformed_llama) {
    parse_error(L, "{\"name\": \"f\", \"parameters\": {\"x\": 1}<|eot_id|>", "bad JSON", "{\"name\": \"f\", \"parameters\": {\"x\": 1}", "");
    parse_error(L, "{\"name\": \"f\", \"parameters\": [1]}", "\"parameters\" is an array", "{\"name\": \"f\", \"parameters\": [1]}", "");
    parse_error(L, "{\"name\": null, \"parameters\": {}}", "\"name\" is null", "{\"name\": null, \"parameters\": {}}", "");
    parse_error(L, "<|python_tag|>{\"parameters\": {}}", "no \"name\"", "{\"parameters\": {}}", "");
    parse_error(L, "<|python_tag|>brave_search.call(query=\"x\")<|eom_id|>", "no JSON object after <|python_tag|>",
                "brave_search.call(query=\"x\")", "");
    parse_error(L, "<|python_tag|>", "no JSON object", "", "");
    // a good call, then a broken one: the broken one runs to the end
    json_t *calls = parse(L, "{\"name\": \"a\", \"parameters\": {}};\n{\"name\": \"b\", \"parameters\": {", 1, NULL, "", NULL);
    ck_assert_int_eq(json_array_size(calls), 2);
    error_at(calls, 1, "bad JSON", "{\"name\": \"b\", \"parameters\": {");
    json_decref(calls);
    // a second object without a name is a broken call, not content
    calls = parse(L, "{\"name\": \"a\", \"parameters\": {}}; {\"x\": 1}", 1, NULL, "", NULL);
    error_at(calls, 1, "no \"name\"", "{\"x\": 1}");
    json_decref(calls);
}
END_TEST

// Every prefix of a turn, and invalid UTF-8: never a crash, entries always well-formed JSON
// that dumps, raw text always valid UTF-8.
START_TEST(test_hostile) {
    const char *turns[] = {
        "<think>\nplan\n</think>\n\nOK.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"s\": \"x\\\"}\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"k\\\": [1]}\"}\n</tool_call><|im_end|>",
        "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \";\"}}; {\"name\": \"b\", \"parameters\": {}}<|eom_id|>",
    };
    const ToolFormat fmts[] = {H, L};
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(turns[k]);
        char *buf = malloc(n + 1);
        for (size_t len = 0; len <= n; len++) {
            memcpy(buf, turns[k], len);
            buf[len] = 0;
            json_t *calls;
            char *content, *reasoning;
            PailErr err = {0};
            int got = tool_calls_parse(fmts[k], buf, &calls, &content, &reasoning, &err);
            ck_assert_msg(got >= 0 && got <= 2, "prefix %zu: %d", len, got);
            if (len == n) ck_assert_int_eq(got, 2);
            int good = 0;
            for (size_t i = 0; i < json_array_size(calls); i++) {
                json_t *c = json_array_get(calls, i);
                if (json_object_get(c, "name")) good++, ck_assert(json_is_object(json_object_get(c, "arguments")));
                else ck_assert(json_is_string(json_object_get(c, "error")) && json_is_string(json_object_get(c, "raw")));
            }
            ck_assert_int_eq(good, got);
            char *d = json_dumps(calls, 0);
            ck_assert_ptr_nonnull(d);
            free(d);
            free(content);
            free(reasoning);
            json_decref(calls);
        }
        free(buf);
    }
    // a multi-byte character cut by the token limit inside an unclosed call: raw gets U+FFFD
    json_t *calls = parse(H, "<tool_call>{\"name\": \"caf\xC3", 0, NULL, "", NULL);
    error_at(calls, 0, "unclosed", "{\"name\": \"caf\xEF\xBF\xBD");
    json_decref(calls);
    calls = parse(H, "<tool_call>{\"name\": \"\xFF\"}</tool_call>", 0, NULL, "", NULL);
    error_at(calls, 0, "bad JSON", "{\"name\": \"\xEF\xBF\xBD\"}");
    json_decref(calls);
    // a long turn: 2000 calls
    size_t cap = 2000 * 64 + 1, len = 0;
    char *big = malloc(cap);
    for (int i = 0; i < 2000; i++) len += (size_t)snprintf(big + len, cap - len, "<tool_call>{\"name\": \"f%d\"}</tool_call>\n", i);
    calls = parse(H, big, 2000, NULL, "", NULL);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(calls, 1999), "name")), "f1999");
    json_decref(calls);
    free(big);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rollout_toolcall");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_hermes);
    tcase_add_test(core, test_think);
    tcase_add_test(core, test_llama);
    tcase_add_test(core, test_none_and_names);
    tcase_add_test(core, test_round_trip);
    tcase_add_test(limits, test_malformed_hermes);
    tcase_add_test(limits, test_malformed_llama);
    tcase_add_test(limits, test_hostile);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
