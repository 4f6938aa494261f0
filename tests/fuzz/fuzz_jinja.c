// libFuzzer target for the chat-template interpreter (`make fuzz`, then
// build/fuzz/fuzz_jinja tests/fuzz/corpus/jinja). Every input is a template; one that parses
// is rendered with small limits against a fixed conversation (messages, tools,
// add_generation_prompt, bos_token). A failure must say why; a success must leave the
// output within the limit and the generation spans inside it. Not part of CI: run by hand.
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/jinja.h"

static const char VARS[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Hi \\u00e9\"},"
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":"
    "{\"name\":\"f\",\"arguments\":{\"x\":1}}}]},{\"role\":\"tool\",\"content\":\"42\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"x\":{\"type\":\"integer\"}}}}}],\"add_generation_prompt\":true,\"bos_token\":\"<s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *vars;
    if (!vars && !(vars = json_loads(VARS, 0, NULL))) abort();
    char *src = malloc(size ? size : 1);  // exactly sized: reads past the end trip ASan
    if (!src) return 0;
    memcpy(src, data, size);
    JinjaTemplate *t = NULL;
    PailErr err = {0};
    if (jinja_parse(&t, src, size, "fuzz", &err) == 0) {
        JinjaLimits lim = {.max_steps = 20000, .max_output = 1 << 16, .max_depth = 32, .now = 0};
        Buf out = {0};
        JinjaSpans gen;
        err = (PailErr){0};
        if (jinja_render(t, vars, &lim, &out, &gen, &err) == 0) {
            if (out.len > lim.max_output) abort();
            for (int i = 0; i < gen.n; i++)
                if (gen.spans[i].begin > gen.spans[i].end || gen.spans[i].end > out.len) abort();
            free(gen.spans);
        } else if (err.msg[0] == 0 || out.len != 0 || gen.n != 0) {
            abort();  // every failure says why and leaves nothing behind
        }
        buf_free(&out);
        jinja_free(t);
    } else if (err.msg[0] == 0 || t) {
        abort();
    }
    free(src);
    return 0;
}
