// Check suite for src/rollout/openai.c, the OpenAI front of grpo-rollout --serve
// without sockets: request bodies (chat, completions, claims, rewards) checked
// with OpenAI's error fields, the error body, a turn's reply and its event
// stream, the stop-string scan as a text grows (against a search of the text fed when
// it hits, fed byte by byte and in random pieces), the head check that finds an oversized
// Content-Length as bytes arrive (split anywhere, pipelined, hostile).
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rollout/openai.h"

static int parse(const char *body, bool chat, bool episode, OpenAIRequest *rq, OpenAIError *e) {
    return openai_request_parse(body, strlen(body), chat, "tiny", 64, episode, rq, e);
}

// body is refused with status and param (NULL: none).
static void refused(const char *body, bool chat, int status, const char *param) {
    OpenAIRequest rq;
    OpenAIError e = {0};
    ck_assert_msg(parse(body, chat, false, &rq, &e) < 0, "%s: taken", body);
    ck_assert_msg(e.status == status, "%s: status %d, want %d (%s)", body, e.status, status, e.msg);
    ck_assert_msg(param ? e.param && !strcmp(e.param, param) : !e.param, "%s: param %s, want %s", body,
                  e.param ? e.param : "none", param ? param : "none");
    ck_assert(e.msg[0]);
    ck_assert(!rq.body && !rq.messages && !rq.params);
}

START_TEST(test_chat_request) {
    OpenAIRequest rq;
    OpenAIError e = {0};
    const char *b = "{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
                    "\"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": "
                    "null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"mul\", "
                    "\"arguments\": \"{\\\"a\\\": 1}\"}}]}], \"stream\": true, \"stream_options\": {\"include_usage\": "
                    "true}, \"temperature\": 0.5, \"max_completion_tokens\": 9, \"stop\": \"x\", \"tools\": [{\"type\": "
                    "\"function\", \"function\": {\"name\": \"mul\"}}]}";
    ck_assert_msg(parse(b, true, false, &rq, &e) == 0, "%s", e.msg);
    ck_assert(rq.stream && rq.include_usage);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(rq.messages, 0), "content")), "ab");
    json_t *args = json_object_get(json_object_get(json_array_get(json_object_get(json_array_get(rq.messages, 1),
                                                                                  "tool_calls"), 0), "function"),
                                   "arguments");
    ck_assert_msg(json_is_object(args), "arguments decoded for the template");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(rq.messages, 1), "content")), "");
    ck_assert_int_eq(json_integer_value(json_object_get(rq.params, "max_tokens")), 9);
    ck_assert(json_real_value(json_object_get(rq.params, "temperature")) == 0.5);
    ck_assert_int_eq(json_array_size(rq.stop), 1);
    ck_assert_int_eq(json_array_size(rq.tools), 1);
    openai_request_free(&rq);
    // tool_choice none: no tools; no max_tokens: the default
    ck_assert(parse("{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": "
                    "\"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": \"none\"}", true, false, &rq, &e) == 0);
    ck_assert(!rq.tools && !rq.stream && !rq.stop);
    ck_assert_int_eq(json_integer_value(json_object_get(rq.params, "max_tokens")), 64);
    openai_request_free(&rq);
    // a completion: the prompt, an array of one
    ck_assert(parse("{\"model\": \"tiny\", \"prompt\": [\"hi\"], \"best_of\": 1}", false, false, &rq, &e) == 0);
    ck_assert_str_eq(json_string_value(rq.messages), "hi");
    openai_request_free(&rq);
    // temperatures at grpo-rollout's rule: 0 (greedy) and from 0.01 up
    const char *temps[] = {"0", "0.01", "2"};
    for (int i = 0; i < 3; i++) {
        char tb[128];
        snprintf(tb, sizeof tb, "{\"model\": \"tiny\", \"prompt\": \"x\", \"temperature\": %s}", temps[i]);
        ck_assert_msg(parse(tb, false, false, &rq, &e) == 0, "%s: %s", tb, e.msg);
        openai_request_free(&rq);
    }
}
END_TEST

START_TEST(test_refusals) {
    const char *m = "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]";
    char b[512];
    refused("{not json", true, 400, NULL);
    refused("[1]", true, 400, NULL);
    refused("", true, 400, NULL);
    refused("{}", true, 400, "model");
    refused("{\"model\": \"gpt-4o\"}", true, 404, "model");
    refused("{\"model\": \"tiny\"}", true, 400, "messages");
    refused("{\"model\": \"tiny\", \"messages\": []}", true, 400, "messages");
    refused("{\"model\": \"tiny\", \"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", true, 400, "messages");
    refused("{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", true,
            400, "messages");
    refused("{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": 5}]}", true, 400, "messages");
    refused("{\"model\": \"tiny\", \"messages\": [{\"role\": \"assistant\", \"tool_calls\": 3}]}", true, 400, "messages");
    struct { const char *extra, *param; } cases[] = {
        {"\"temperature\": 3", "temperature"}, {"\"temperature\": \"1\"", "temperature"},
        {"\"temperature\": 1e-39", "temperature"}, {"\"temperature\": 0.009", "temperature"},  // grpo-rollout's floor {"\"top_p\": 0", "top_p"},
        {"\"top_k\": -1", "top_k"}, {"\"seed\": 1.5", "seed"}, {"\"max_tokens\": 0", "max_tokens"},
        {"\"max_completion_tokens\": 0", "max_completion_tokens"}, {"\"n\": 2", "n"},
        {"\"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]", "stop"}, {"\"stop\": \"\"", "stop"}, {"\"stop\": [1]", "stop"},
        {"\"stream\": \"yes\"", "stream"}, {"\"tools\": {}", "tools"}, {"\"tools\": [{\"type\": \"x\"}]", "tools"},
        {"\"tool_choice\": \"required\"", "tool_choice"}, {"\"tool_choice\": {\"type\": \"function\"}", "tool_choice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(b, sizeof b, "{\"model\": \"tiny\", %s, %s}", m, cases[i].extra);
        refused(b, true, 400, cases[i].param);
    }
    refused("{\"model\": \"tiny\"}", false, 400, "prompt");
    refused("{\"model\": \"tiny\", \"prompt\": \"\"}", false, 400, "prompt");
    refused("{\"model\": \"tiny\", \"prompt\": \"x\", \"echo\": true}", false, 400, "echo");
    refused("{\"model\": \"tiny\", \"prompt\": \"x\", \"best_of\": 2}", false, 400, "best_of");
    refused("{\"model\": \"tiny\", \"a\": 1, \"a\": 2}", true, 400, NULL);  // duplicate keys
    OpenAIRequest rq;
    OpenAIError e = {0};
    ck_assert(parse("{\"model\": \"tiny\", \"prompt\": \"x\"}", false, true, &rq, &e) < 0 && e.status == 400);
}
END_TEST

START_TEST(test_claim_and_reward) {
    OpenAIError e = {0};
    double w, r;
    json_t *c;
    ck_assert(openai_claim_parse("", 0, &w, &e) == 0 && w == OPENAI_CLAIM_WAIT_S);
    ck_assert(openai_claim_parse("{\"wait\": 0}", 11, &w, &e) == 0 && w == 0);
    ck_assert(openai_claim_parse("{\"wait\": 301}", 13, &w, &e) < 0 && !strcmp(e.param, "wait"));
    ck_assert(openai_claim_parse("{\"wait\": \"1\"}", 13, &w, &e) < 0);
    const char *ok = "{\"reward\": 0.5, \"components\": {\"a\": 1, \"b\": -2}}";
    ck_assert(openai_reward_parse(ok, strlen(ok), &r, &c, &e) == 0 && r == 0.5 && json_object_size(c) == 2);
    json_decref(c);
    const char *bad[] = {"{}", "{\"reward\": \"1\"}", "{\"reward\": 2e6}", "{\"reward\": 1, \"components\": [1]}",
                         "{\"reward\": 1, \"components\": {\"x\": \"y\"}}", "{\"reward\": 1, \"components\": {\"x\": 1e7}}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(openai_reward_parse(bad[i], strlen(bad[i]), &r, &c, &e) < 0 && e.status == 400, "%s", bad[i]);
        ck_assert(!c);
    }
    // Components: up to the shard's 32, more refused naming the limit (never cut silently).
    for (int n = 32; n <= 33; n++) {
        json_t *o = json_object(), *comps = json_object();
        for (int i = 0; i < n; i++) {
            char k[16];
            snprintf(k, sizeof k, "c%d", i);
            json_object_set_new(comps, k, json_real(0.5));
        }
        json_object_set_new(o, "reward", json_integer(1));
        json_object_set_new(o, "components", comps);
        char *t = json_dumps(o, 0);
        int rc = openai_reward_parse(t, strlen(t), &r, &c, &e);
        if (n == 32) {
            ck_assert(rc == 0 && json_object_size(c) == 32);
        } else {
            ck_assert(rc < 0 && !strcmp(e.param, "components") && strstr(e.msg, "at most 32") && strstr(e.msg, "33"));
            ck_assert(!c);
        }
        json_decref(c);
        free(t);
        json_decref(o);
    }
}
END_TEST

START_TEST(test_error_body_and_same_message) {
    char *b = openai_error_body(429, "x", "too_many", "%d requests", 7);
    json_t *j = json_loads(b, 0, NULL);
    json_t *err = json_object_get(j, "error");
    ck_assert_int_eq(json_object_size(err), 4);
    ck_assert_str_eq(json_string_value(json_object_get(err, "message")), "7 requests");
    ck_assert_str_eq(json_string_value(json_object_get(err, "type")), "rate_limit_error");
    ck_assert_str_eq(json_string_value(json_object_get(err, "param")), "x");
    json_decref(j);
    free(b);
    b = openai_error_body(400, NULL, NULL, "%s", "\xff\xfe");  // not UTF-8: still a body
    ck_assert(b && (j = json_loads(b, 0, NULL)) && json_is_null(json_object_get(json_object_get(j, "error"), "param")));
    json_decref(j);
    free(b);
    ck_assert_str_eq(openai_status_reason(413), "Payload Too Large");
    json_t *a = json_loads("{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"1\", \"function\": "
                           "{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}}]}", 0, NULL);
    json_t *a2 = json_loads("{\"role\": \"assistant\", \"content\": \"\", \"refusal\": null, \"tool_calls\": [{\"id\": "
                            "\"2\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]}", 0, NULL);
    json_t *a3 = json_loads("{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"function\": {\"name\": "
                            "\"g\", \"arguments\": {\"x\": 1}}}]}", 0, NULL);
    ck_assert(openai_same_message(a, a2));
    ck_assert(!openai_same_message(a, a3));
    json_decref(a);
    json_decref(a2);
    json_decref(a3);
}
END_TEST

START_TEST(test_turn_reply) {
    json_t *fields = json_loads("{\"text\": \"hello STOP there\", \"finish\": \"stop\", \"turn\": 2, \"usage\": "
                                "{\"prompt_tokens\": 3, \"completion_tokens\": 4}}", 0, NULL);
    json_t *pail = json_pack("{s:i}", "adapter_version", 5);
    json_t *stop = json_pack("[s]", "STOP");
    OpenAIStream st = {.id = "chatcmpl-1", .created = 7, .model = "tiny"};
    json_t *asst = NULL;
    char *b = openai_turn_reply(&st, fields, false, stop, pail, false, NULL, 0, &asst);
    json_t *j = json_loads(b, 0, NULL);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), "hello ");
    ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 7);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "pail"), "adapter_version")), 5);
    ck_assert_str_eq(json_string_value(json_object_get(asst, "content")), "hello ");
    json_decref(asst);
    json_decref(j);
    free(b);
    // streamed, "hel" already sent: the rest, the finish chunk with pail, usage, [DONE]
    st = (OpenAIStream){.id = "chatcmpl-1", .created = 7, .model = "tiny", .include_usage = true, .role_sent = true};
    b = openai_turn_reply(&st, fields, false, stop, pail, true, "hel", 3, NULL);
    ck_assert_msg(strstr(b, "\"content\":\"lo \"") && strstr(b, "\"finish_reason\":\"stop\"") &&
                  strstr(b, "\"total_tokens\":7") && strstr(b, "data: [DONE]\n\n") && !strstr(b, "there"), "%s", b);
    free(b);
    // tool calls: their ids, arguments as a string, a malformed one's text kept
    json_t *tf = json_loads("{\"text\": \"x\", \"content\": \"\", \"finish\": \"stop\", \"turn\": 1, \"tool_calls\": "
                            "[{\"name\": \"mul\", \"arguments\": {\"a\": 1}}, {\"raw\": \"<bad>\", \"error\": \"e\"}]}", 0,
                            NULL);
    st = (OpenAIStream){.id = "chatcmpl-9", .created = 7, .model = "tiny"};
    b = openai_turn_reply(&st, tf, true, NULL, pail, false, NULL, 0, NULL);
    j = json_loads(b, 0, NULL);
    ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *call = json_array_get(json_object_get(json_object_get(ch, "message"), "tool_calls"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(call, "id")), "call_9_1_0");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "{\"a\":1}");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), "<bad>");
    ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
    json_decref(j);
    free(b);
    // a completion
    st = (OpenAIStream){.text = true, .id = "cmpl-1", .created = 7, .model = "tiny"};
    b = openai_turn_reply(&st, fields, false, NULL, pail, false, NULL, 0, NULL);
    ck_assert_msg(strstr(b, "\"object\":\"text_completion\"") && strstr(b, "\"text\":\"hello STOP there\""), "%s", b);
    free(b);
    Buf sse = {0};
    st = (OpenAIStream){.id = "chatcmpl-1", .created = 7, .model = "tiny"};
    ck_assert(openai_sse_content(&sse, &st, "a\"b", 3) == 0 && st.role_sent);
    buf_append(&sse, "", 1);
    ck_assert_msg(strstr((char *)sse.data, "\"role\":\"assistant\"") && strstr((char *)sse.data, "a\\\"b"), "%s", sse.data);
    buf_free(&sse);
    json_decref(tf);
    json_decref(fields);
    json_decref(pail);
    json_decref(stop);
}
END_TEST

// The scan fed in pieces (seed: how it splits text) agrees with a search of the text fed when it hits.
static void stop_agrees(const char *text, json_t *stop, unsigned seed) {
    OpenAIStop s;
    openai_stop_init(&s, stop);
    size_t n = strlen(text), at = 0;
    long cut = -1;
    srand(seed);
    while (at < n && cut < 0) {
        size_t k = seed ? 1 + (size_t)rand() % 5 : 1;
        if (k > n - at) k = n - at;
        cut = openai_stop_feed(&s, text + at, k);
        at += k;
        size_t safe = openai_stop_safe(&s);
        if (cut < 0) {  // what may be streamed holds no beginning of a stop string that the text could still complete
            ck_assert(safe <= s.text.len);
            ck_assert(openai_stop_at(stop, text) < 0 || (size_t)openai_stop_at(stop, text) >= safe);
        } else {
            ck_assert(safe == (size_t)cut);
        }
    }
    // The turn ends as soon as a stop string is complete: the first one in the text fed so far.
    char *fed = strndup(text, at);
    ck_assert_msg(cut == openai_stop_at(stop, fed), "%s: %ld, want %ld", text, cut, openai_stop_at(stop, fed));
    free(fed);
    openai_stop_free(&s);
}

START_TEST(test_stop_scan) {
    json_t *stop = json_pack("[s, s, s]", "abc", "bcx", "\xc3\xa9!");
    json_t *st2 = json_pack("[s, s]", "abnu", "b");  // "b" completes first: the turn ends there
    for (unsigned seed = 0; seed < 20; seed++) stop_agrees("xxabnu", st2, seed);
    json_decref(st2);
    const char *texts[] = {"", "ab", "xxabxabc", "zzbcx abc", "abab\xc3\xa9!", "aaaaaaaaaaaaaaaaaaab", "\xc3\xa9\xc3\xa9",
                           "no stop here at all", "bc", "abcbcx"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (unsigned seed = 0; seed < 20; seed++) stop_agrees(texts[i], stop, seed);
    // No stop strings: everything may stream, nothing cuts.
    OpenAIStop s;
    openai_stop_init(&s, NULL);
    ck_assert(openai_stop_feed(&s, "abc", 3) == -1 && openai_stop_safe(&s) == 3);
    openai_stop_free(&s);
    // Never inside a UTF-8 character.
    json_t *z = json_pack("[s]", "zz");
    openai_stop_init(&s, z);
    openai_stop_feed(&s, "a\xc3\xa9", 3);
    ck_assert_int_eq(openai_stop_safe(&s), 1);
    openai_stop_free(&s);
    json_decref(z);
    json_decref(stop);
}
END_TEST

// Feeds a connection's bytes in pieces of k; returns the hits' declared sizes (up to 4), kinds and line ends.
static int frame_kinds(const char *in, size_t n, size_t k, uint64_t *decl, size_t *ends, int *kinds) {
    OpenAIFrame f;
    openai_frame_init(&f);
    int hits = 0;
    size_t at = 0;
    while (at < n) {
        size_t m = k < n - at ? k : n - at, off = 0;
        while (off < m) {
            OpenAIFrameHit h;
            size_t took = openai_frame_feed(&f, in + at + off, m - off, 100, 4096, &h);
            ck_assert(took > 0 && took <= m - off);
            if (h.kind) {
                ck_assert(hits < 4 && h.line_len);
                decl[hits] = h.declared;
                if (kinds) kinds[hits] = h.kind;
                ends[hits++] = at + off + h.line_end;
            }
            off += took;
        }
        at += m;
    }
    return hits;
}

static int frame_all(const char *in, size_t n, size_t k, uint64_t *decl, size_t *ends) {
    return frame_kinds(in, n, k, decl, ends, NULL);
}

START_TEST(test_frame) {
    // Pipelined: a body within the limit (its bytes look like a head: never parsed), then two heads over it
    // (the second one's bytes are the first one's body, as announced: not a head).
    const char *in = "POST /a HTTP/1.1\r\nContent-Length: 40\r\n\r\nPOST /x HTTP/1.1\r\nContent-Length: 999\r\n\r\n"
                     "\r\nPOST /b HTTP/1.1\r\nHost: x\r\ncontent-length:   101  \r\n\r\n"
                     "POST /c HTTP/1.1\r\nContent-Length: 500\r\n\r\n123456789012345678901234567890123456789012345678901234567890"
                     "POST /d HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n";
    size_t n = strlen(in);
    for (size_t k = 1; k <= n; k++) {
        uint64_t decl[4];
        size_t ends[4];
        int hits = frame_all(in, n, k, decl, ends);
        ck_assert_msg(hits == 2, "pieces of %zu: %d hits", k, hits);
        ck_assert(decl[0] == 101 && decl[1] == UINT64_C(9223372036854775807));  // (too many digits: over any limit)
        // The hit's line ends where the Content-Length line ends in the stream.
        const char *l = strstr(in, "content-length:   101  \r\n");
        ck_assert_uint_eq(ends[0], (size_t)(l - in) + 25);
    }
    // After the hit head, its body is followed as announced: 101 bytes that look like a head are not one.
    char buf[512];
    snprintf(buf, sizeof buf, "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n%-101s", "POST / HTTP/1.1\r\nContent-Length: 500\r\n\r\n");
    uint64_t decl[4];
    size_t ends[4];
    ck_assert_int_eq(frame_all(buf, strlen(buf), 7, decl, ends), 1);
    // A malformed chunk size is not followed further (the HTTP server refuses it as it parses).
    const char *ch = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nContent-Length: 500\r\n0\r\n\r\n";
    ck_assert_int_eq(frame_all(ch, strlen(ch), 3, decl, ends), 0);
    // Malformed values are hits of their own (the server would answer them with its HTML page); an empty
    // one is over any limit. After one, where the body ends is not known: nothing more is followed.
    const char *bad = "POST / HTTP/1.1\r\nContent-Length: 12x\r\nContent-Length: -1\r\nContent-Length:\r\n\r\n"
                      "POST / HTTP/1.1\r\nContent-Length: 999\r\n\r\n";
    int kinds[4];
    for (size_t k = 1; k <= strlen(bad); k++) {
        ck_assert_int_eq(frame_kinds(bad, strlen(bad), k, decl, ends, kinds), 3);
        ck_assert(kinds[0] == OPENAI_HIT_BAD_LENGTH && kinds[1] == OPENAI_HIT_BAD_LENGTH &&
                  kinds[2] == OPENAI_HIT_TOO_LARGE);
        ck_assert_uint_eq(ends[0], (size_t)(strstr(bad, "12x\r\n") - bad) + 5);
    }
    // Chunked bodies are followed: chunk sizes (hex, extensions), their data and CRLF, the trailer. The
    // chunk that takes the body over the limit (100) is a hit, once; then the body is followed to its end.
    const char *ok = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "1e;x=y\r\nContent-Length: 999\r\n012345678\r\n46 \r\n%-70s\r\n0\r\nTrailer: 1\r\n\r\n"
                     "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "32\r\n%-50s\r\n33\r\n%-51s\r\n40\r\n%-64s\r\n0\r\n\r\n"
                     "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n";
    char cb[1024];
    snprintf(cb, sizeof cb, ok, "Content-Length: 999", "x", "y", "z");  // (30 + 70 bytes: at the limit, not over)
    for (size_t k = 1; k <= strlen(cb); k++) {
        ck_assert_int_eq(frame_kinds(cb, strlen(cb), k, decl, ends, kinds), 2);
        ck_assert(kinds[0] == OPENAI_HIT_CHUNKS_OVER && decl[0] == 101 && kinds[1] == OPENAI_HIT_TOO_LARGE);
        ck_assert_uint_eq(ends[0], (size_t)(strstr(cb, "33\r\n") - cb) + 4);  // 50 + 51 > 100
    }
    // All-body input may come without its bytes.
    OpenAIFrame f;
    OpenAIFrameHit h;
    openai_frame_init(&f);
    openai_frame_feed(&f, "POST / HTTP/1.1\r\nContent-Length: 50\r\n\r\n", 39, 100, 4096, &h);
    ck_assert(f.body_left == 50 && openai_frame_feed(&f, NULL, 50, 100, 4096, &h) == 50 && f.body_left == 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rollout_openai");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_chat_request);
    tcase_add_test(core, test_claim_and_reward);
    tcase_add_test(core, test_error_body_and_same_message);
    tcase_add_test(core, test_turn_reply);
    tcase_add_test(limits, test_refusals);
    tcase_add_test(limits, test_stop_scan);
    tcase_add_test(limits, test_frame);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
