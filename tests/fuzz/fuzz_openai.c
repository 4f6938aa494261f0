// libFuzzer target for the OpenAI front of grpo-rollout --serve (`make fuzz`,
// then build/fuzz/fuzz_openai tests/fuzz/corpus/openai): the whole input as a
// chat request, a completion, a claim and a reward body; the turn reply shaped
// from it as env_step fields (streamed and not, with its stop strings); the
// stop-string scan fed in pieces agreeing with a search of the text fed when it
// hits (a turn ends at the first stop string complete); the head
// check fed in pieces agreeing with itself fed at once. First byte: flags
// (how the pieces split). Not part of CI.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "rollout/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t flags = data[0];
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    OpenAIRequest rq;
    OpenAIError e;
    json_t *stop = NULL;
    for (int chat = 0; chat < 2; chat++) {
        if (openai_request_parse(p, n, chat, "tiny", 16, flags & 1, &rq, &e) == 0) {
            if (!rq.messages || !rq.params) abort();
            if (chat && !stop && rq.stop) stop = json_incref(rq.stop);
            openai_request_free(&rq);
        } else if (e.status < 400 || !e.msg[0]) {
            abort();
        }
    }
    double w, r;
    json_t *comps;
    if (openai_claim_parse(p, n, &w, &e) == 0 && !(w >= 0 && w <= OPENAI_CLAIM_WAIT_MAX_S)) abort();
    if (openai_reward_parse(p, n, &r, &comps, &e) == 0 && json_object_size(comps) > OPENAI_MAX_COMPONENTS) abort();
    json_decref(comps);
    char *eb = openai_error_body(400, NULL, NULL, "%.*s", (int)(n < 300 ? n : 300), p);
    if (!eb) abort();
    free(eb);

    // The input as a finished turn's fields (a JSON object), shaped both ways.
    json_t *fields = json_loadb(p, n, 0, NULL);
    if (json_is_object(fields)) {
        json_t *pail = json_pack("{s:i}", "adapter_version", 1);
        json_t *sp = json_object_get(fields, "stop");
        const json_t *st_stop = json_is_array(sp) ? sp : stop;
        bool ok = true;
        size_t i;
        json_t *x;
        json_array_foreach(st_stop, i, x) ok = ok && json_is_string(x);  // (the request parser's guarantee)
        for (int stream = 0; stream < 2 && ok; stream++) {
            OpenAIStream os = {.text = flags & 2, .id = "chatcmpl-1", .created = 1, .model = "tiny",
                               .include_usage = flags & 4};
            json_t *asst = NULL;
            char *b = openai_turn_reply(&os, fields, flags & 8, st_stop, pail, stream, p, n < 8 ? n : 8, &asst);
            free(b);
            json_decref(asst);
        }
        json_decref(pail);
    }
    json_decref(fields);

    // The stop scan in pieces agrees with a search of the whole text (up to its first NUL).
    if (stop) {
        size_t len = strnlen(p, n);
        char *text = strndup(p, len);
        OpenAIStop s;
        openai_stop_init(&s, stop);
        long cut = -1;
        size_t k = 1 + (flags >> 4), at = 0;
        for (; at < len && cut < 0; at += k) cut = openai_stop_feed(&s, text + at, len - at < k ? len - at : k);
        // The turn ends as soon as a stop string is complete: at the first one in the text so far.
        if (at > len) at = len;
        text[at] = 0;
        if (cut != openai_stop_at(stop, text)) abort();
        if (openai_stop_safe(&s) > s.text.len) abort();
        openai_stop_free(&s);
        free(text);
        json_decref(stop);
    }

    // The head check: pieces of k give the hits of one whole feed.
    uint64_t whole[8], parts[8];
    int nw = 0, np = 0;
    for (int pass = 0; pass < 2; pass++) {
        OpenAIFrame f;
        openai_frame_init(&f);
        size_t k = pass ? 1 + (flags >> 3) : n ? n : 1;
        for (size_t at = 0; at < n;) {
            size_t m = n - at < k ? n - at : k, off = 0;
            while (off < m) {
                OpenAIFrameHit h;
                size_t took = openai_frame_feed(&f, p + at + off, m - off, 64, 512, &h);
                if (!took || took > m - off) abort();
                if (h.line_len) {
                    if (h.line_len > h.line_end + at + off || h.declared <= 64) abort();
                    if (pass ? np < 8 : nw < 8) (pass ? parts : whole)[pass ? np++ : nw++] = h.declared;
                }
                off += took;
            }
            at += m;
        }
    }
    if (nw != np || memcmp(whole, parts, (size_t)nw * sizeof *whole)) abort();
    return 0;
}
