// Check suite for the rollout rewards (src/rollout/reward*.c): exact_answer on a
// hand-written table of answers and formatting (values worked out by hand, not by
// the code under test), format (PCRE2), length, weights, spec errors, and the cmd
// program: the example in data/rewards/ plus each failure mode (crash, signal,
// timeout, non-number, short and surplus output, huge output, a missing program,
// EPIPE), each failing only its completions and the next batch working again.
// Run from the repository root (or set PAIL_ROOT).
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/timeutil.h"
#include "rollout/preflight.h"
#include "rollout/reward.h"
#include "rollout/reward_answer.h"
#include "check_tmp.h"

static const char *root_dir(void) { return getenv("PAIL_ROOT") ? getenv("PAIL_ROOT") : "."; }

// ---- exact_answer ----

typedef struct {
    const char *completion, *marker, *reference;
    int want;
} AnswerCase;

static const AnswerCase ANSWERS[] = {
    {"46", "", "46", 1},
    {"46", "", "47", 0},
    {"The answer is 1,000.", "", "1000.0", 1},   // thousands separator, sentence end
    {"1000", "", "1,000", 1},
    {"so it is 1e3", "", "1000", 1},             // scientific notation
    {"1.5e-3", "", "0.0015", 1},
    {"so x = -5", "", "-5", 1},                  // a sign after a space is a sign
    {"12-5=7", "", "7", 1},                      // '-' after a digit is an operator
    {"x=12-5", "", "-5", 0},                     // ... so the last number is 5
    {"x=12-5", "", "5", 1},
    {"costs $1,234 in total", "", "1234", 1},
    {"it is 50%", "", "50", 1},
    {"1,2,3", "", "3", 1},                       // not thousands groups: three numbers
    {"1,2345", "", "2345", 1},                   // ",2345" is not a group of 3
    {"-0", "", "0", 1},
    {"0.1+0.2=0.30000000000000004", "", "0.3", 1},  // within 1e-9 relative
    {"3.1416", "", "3.14159", 0},
    {"3.14159", "", "3.14159", 1},
    {".5", "", "0.5", 1},
    {"12345678901234567890", "", "12345678901234567891", 0},  // integers: exact digits
    {"12345678901234567890", "", "12,345,678,901,234,567,890", 1},
    {"007", "", "7", 1},
    {"2eggs and 3", "", "3", 1},
    {"no number here", "", "0", 0},
    {"", "", "0", 0},
    {"\\boxed{42} and then 7", "", "42", 1},     // boxed wins over the last number
    {"first \\boxed{3} then \\boxed{4}", "", "4", 1},
    {"\\boxed{\\frac{1}{2}}", "", "\\frac{1}{2}", 1},  // balanced braces, string compare
    {"\\boxed {1{,}000}", "", "1000", 1},        // LaTeX thousands separator
    {"\\boxed{\\$5}", "", "5", 1},
    {"\\boxed{\xE2\x88\x92" "3}", "", "-3", 1},  // U+2212 minus sign
    {"\\boxed{ 7 }", "", "7", 1},
    {"so 9 \\boxed{5", "", "5", 1},              // unbalanced (truncated): last number
    {"\\fbox{8}", "", "8", 1},
    {"steps 5 ... #### 72", "####", "72", 1},    // GSM8K marker
    {"#### 72 apples", "####", "72", 1},         // first number after the marker
    {"#### 71\nlater 72", "####", "72", 0},      // only the marker's line counts
    {"no marker, 72", "####", "72", 0},          // a configured marker must be there
    {"#### 1 #### 2", "####", "2", 1},           // the last marker
    {"Answer:\n42", "Answer:", "42", 1},         // the answer on the next line
    {"Answer: Paris", "Answer:", "Paris", 1},
    {"Answer: Paris", "Answer:", "paris", 0},    // strings are case-sensitive
    {"Answer:  New   York ", "Answer:", "New York", 1},  // whitespace collapsed
    {"\\boxed{5} #### 6", "####", "5", 1},       // boxed first, even with a marker
};

START_TEST(test_answer_table) {
    for (size_t i = 0; i < sizeof ANSWERS / sizeof ANSWERS[0]; i++) {
        const AnswerCase *c = &ANSWERS[i];
        int got = reward_answer_match(c->completion, c->marker, c->reference);
        ck_assert_msg(got == c->want, "case %zu: completion '%s' marker '%s' reference '%s': got %d, want %d", i,
                      c->completion, c->marker, c->reference, got, c->want);
    }
}
END_TEST

START_TEST(test_answer_numbers) {
    // Formatting tolerance: every text in a row is the same number.
    const char *same[][4] = {
        {"1,000", "1000.0", "1e3", "1000"},
        {"-2.50", "-2.5", "-25e-1", "\xE2\x88\x92" "2.5"},
        {"1,234,567", "1234567", "1.234567e6", "$1,234,567"},
        {"0", "-0", "0.0", "0e5"},
        {"50%", "50", "\\$50", "50."},
    };
    for (size_t r = 0; r < sizeof same / sizeof same[0]; r++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) {
                RewardNumber x, y;
                ck_assert_msg(reward_number_parse(same[r][a], strlen(same[r][a]), &x), "'%s' parses", same[r][a]);
                ck_assert_msg(reward_number_parse(same[r][b], strlen(same[r][b]), &y), "'%s' parses", same[r][b]);
                ck_assert_msg(reward_number_equal(&x, &y), "'%s' = '%s'", same[r][a], same[r][b]);
            }
    const char *not_numbers[] = {"", "-", ".", "1,00", "12,34,567", "1.2.3", "abc", "1e", "e5", "0x10", "inf", "nan",
                                 "1e400", "1 2"};
    for (size_t i = 0; i < sizeof not_numbers / sizeof not_numbers[0]; i++) {
        RewardNumber x;
        ck_assert_msg(!reward_number_parse(not_numbers[i], strlen(not_numbers[i]), &x), "'%s' is not a number", not_numbers[i]);
    }
    RewardNumber a, b;
    ck_assert(reward_number_parse("1000000000", 10, &a) && reward_number_parse("1000000001", 10, &b));
    ck_assert(!reward_number_equal(&a, &b));  // integers exactly, even within 1e-9
    ck_assert(reward_number_parse("1000000000.0", 12, &a) && reward_number_parse("1000000000.5", 12, &b));
    ck_assert(reward_number_equal(&a, &b));   // non-integers: relative 1e-9 (5e-10 here)
    char out[16];
    ck_assert_int_eq(reward_answer_extract("a \\boxed{1} b 2", "", out, sizeof out), ANSWER_BOXED);
    ck_assert_str_eq(out, "1");
    ck_assert_int_eq(reward_answer_extract("x #### 9 y", "####", out, sizeof out), ANSWER_MARKER);
    ck_assert_str_eq(out, "9 y");
    ck_assert_int_eq(reward_answer_extract("x 9 y", "####", out, sizeof out), ANSWER_NONE);
    ck_assert_int_eq(reward_answer_extract("x 9 y -3.5e2.", "", out, sizeof out), ANSWER_LAST_NUMBER);
    ck_assert_str_eq(out, "-3.5e2");
    ck_assert_int_eq(reward_answer_extract("#### 1234567890123456789", "####", out, sizeof out), ANSWER_MARKER);
    ck_assert_str_eq(out, "123456789012345");  // truncated to the buffer
}
END_TEST

// ---- sets: specs, format, length, weights ----

static RewardSet *build(const char *const *specs, int n, RewardConfig *cfg) {
    cfg->specs = specs;
    cfg->nspecs = n;
    RewardSet *rs;
    PailErr err;
    ck_assert_msg(reward_set_build(&rs, cfg, &err) == 0, "build: %s", err.msg);
    return rs;
}

START_TEST(test_set_weights) {
    const char *specs[] = {"exact_answer", "format:0.5", "length:0.1"};
    RewardConfig cfg = {.format_regex = "^<think>.*</think>\\s*\\S", .length_target = 100};
    RewardSet *rs = build(specs, 3, &cfg);
    ck_assert_int_eq(reward_set_count(rs), 3);
    ck_assert_str_eq(reward_set_names(rs)[0], "exact_answer");
    ck_assert_str_eq(reward_set_names(rs)[1], "format");
    ck_assert_str_eq(reward_set_names(rs)[2], "length");
    ck_assert(reward_set_weights(rs)[1] == 0.5f);
    json_t *row = json_pack("{s:s, s:s}", "prompt", "12+34=", "answer", "46");
    RewardInput in[4] = {
        {"12+34=", "<think>a\nb</think> 46", 50, row},   // right, formatted, short: 1 + 0.5
        {"12+34=", "46", 150, row},                      // right, unformatted, 150 tokens: 1 - 0.1*0.5
        {"12+34=", "<think>x</think> 47", 300, row},     // wrong, formatted, 300 tokens: 0.5 - 0.1*2
        {"12+34=", "<think>unclosed 46", 100, row},      // right, unformatted, at target: 1
    };
    float comp[12], total[4];
    uint8_t valid[4];
    PailErr warn;
    ck_assert_int_eq(reward_set_score_batch(rs, in, 4, comp, total, valid, &warn), 0);
    const float want_comp[12] = {1, 1, 0, 1, 0, -0.5f, 0, 1, -2, 1, 0, 0};
    const float want_total[4] = {1.5f, 0.95f, 0.3f, 1.0f};
    for (int i = 0; i < 12; i++) ck_assert_msg(comp[i] == want_comp[i], "component %d: %g want %g", i, comp[i], want_comp[i]);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(valid[i], 1);
        ck_assert_msg(fabsf(total[i] - want_total[i]) < 1e-6f, "total %d: %g want %g", i, total[i], want_total[i]);
    }
    // a row without "answer": that completion is invalid, the others are scored
    json_t *bare = json_pack("{s:s}", "prompt", "x");
    RewardInput in2[2] = {{"x", "46", 10, bare}, {"12+34=", "46", 10, row}};
    ck_assert_int_eq(reward_set_score_batch(rs, in2, 2, comp, total, valid, &warn), 1);
    ck_assert_int_eq(valid[0], 0);
    ck_assert(total[0] == 0.0f);
    ck_assert_int_eq(valid[1], 1);
    ck_assert(total[1] == 1.0f);
    ck_assert_msg(strstr(warn.msg, "no string or number \"answer\""), "%s", warn.msg);
    // a numeric answer field and a custom field name
    char desc[512];
    reward_set_describe(rs, desc, sizeof desc);
    ck_assert_msg(strstr(desc, "format:0.5 (regex '^<think>") && strstr(desc, "length:0.1 (target 100 tokens)"), "%s", desc);
    reward_set_free(rs);
    const char *one[] = {"exact_answer:2"};
    RewardConfig c2 = {.answer_field = "solution", .answer_marker = "####"};
    rs = build(one, 1, &c2);
    json_t *r2 = json_pack("{s:s, s:f}", "prompt", "p", "solution", 1000.0);
    float c1, t1;
    uint8_t v1;
    ck_assert_int_eq(reward_set_score(rs, "p", "so #### 1,000.00", 5, r2, &c1, &t1, &v1, &warn), 0);
    ck_assert(c1 == 1.0f && t1 == 2.0f && v1 == 1);
    ck_assert_int_eq(reward_set_score(rs, "p", "so 1,000", 5, r2, &c1, &t1, &v1, &warn), 0);  // no marker
    ck_assert(c1 == 0.0f && t1 == 0.0f && v1 == 1);
    reward_set_free(rs);
    json_decref(r2);
    json_decref(row);
    json_decref(bare);
}
END_TEST

START_TEST(test_format_regex) {
    const char *specs[] = {"format"};
    typedef struct { const char *re, *text; int want; } FormatCase;
    const FormatCase cases[] = {
        {"^<think>.*</think>\\s*\\S", "<think>line 1\nline 2</think>\n42", 1},  // DOTALL
        {"^<think>.*</think>\\s*\\S", "preamble <think>x</think> 42", 0},        // anchored by the user
        {"<answer>\\d+</answer>", "text <answer>12</answer> more", 1},            // anywhere
        {"^\\w+$", "h\xC3\xA9llo", 1},                                           // UCP: é is a word char
        {"^.{5}$", "h\xC3\xA9llo", 1},                                           // UTF: é is one char
        {"</think> \\d+", "<think>ok</think> 5\xE4", 1},                          // cut multi-byte char
        {"^x$", "x\n", 1},                                                        // $ before a final newline
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        RewardConfig cfg = {.format_regex = cases[i].re};
        RewardSet *rs = build(specs, 1, &cfg);
        float c, t;
        uint8_t v;
        PailErr warn;
        ck_assert_int_eq(reward_set_score(rs, "p", cases[i].text, 3, NULL, &c, &t, &v, &warn), 0);
        ck_assert_msg(c == (float)cases[i].want && v == 1, "case %zu: /%s/ on '%s': %g", i, cases[i].re, cases[i].text, c);
        reward_set_free(rs);
    }
    // catastrophic backtracking hits PCRE2's match limit: invalid, with a warning
    RewardConfig cfg = {.format_regex = "^(a+)+$"};
    RewardSet *rs = build(specs, 1, &cfg);
    char text[64];
    memset(text, 'a', 40);
    strcpy(text + 40, "b");
    float c, t;
    uint8_t v;
    PailErr warn;
    ck_assert_int_eq(reward_set_score(rs, "p", text, 3, NULL, &c, &t, &v, &warn), 1);
    ck_assert_int_eq(v, 0);
    ck_assert_msg(strstr(warn.msg, "match failed"), "%s", warn.msg);
    reward_set_free(rs);
}
END_TEST

// ---- cmd ----

static char tmpdir[64];

static void tmp_setup(void) {
    tmp_make(tmpdir, sizeof tmpdir, "reward");
}

static void tmp_teardown(void) { tmp_remove(tmpdir); }

// Writes a shell script into tmpdir; returns "sh PATH" in cmd.
static void script(const char *name, const char *body, char *cmd, size_t cap) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(body, f);
    fclose(f);
    snprintf(cmd, cap, "sh %s", path);
}

static RewardSet *cmd_set(const char *cmd, double timeout) {
    static const char *specs[] = {"cmd"};
    RewardConfig cfg = {.cmd = cmd, .cmd_timeout_s = timeout};
    return build(specs, 1, &cfg);
}

// Scores completions (the prompt is "p", no row); returns the invalid count.
static int score_texts(RewardSet *rs, const char *const *texts, int n, float *comp, uint8_t *valid, PailErr *warn) {
    RewardInput in[16];
    float total[16];
    for (int i = 0; i < n; i++) in[i] = (RewardInput){"p", texts[i], 1, NULL};
    return reward_set_score_batch(rs, in, n, comp, total, valid, warn);
}

// After a failure the next batch is answered again (the program was restarted).
static void next_batch_works(RewardSet *rs) {
    const char *good[] = {"a", "b"};
    float comp[2];
    uint8_t valid[2];
    PailErr warn;
    int bad = score_texts(rs, good, 2, comp, valid, &warn);
    ck_assert_msg(bad == 0, "next batch: %d invalid: %s", bad, warn.msg);
    ck_assert(valid[0] && valid[1] && comp[0] == 0.5f && comp[1] == 0.5f);
}

// Each line: a keyword picks the misbehaviour, otherwise the answer is 0.5.
static const char *MISBEHAVE =
    "while IFS= read -r l; do\n"
    "  case \"$l\" in\n"
    "    *CRASH*) echo 'boom: crashing on purpose' >&2; exit 1;;\n"
    "    *SEGV*) echo 'about to segfault' >&2; kill -SEGV $$;;\n"
    "    *SLEEP*) echo 'sleeping now' >&2; sleep 30;;\n"
    "    *WORD*) echo 'not-a-number';;\n"
    "    *NAN*) echo nan;;\n"
    "    *HUGE*) echo 1e300;;\n"
    "    *SKIP*) ;;\n"
    "    *TWICE*) printf '0.5\\n0.5\\n';;\n"
    "    *LATE*) echo 0.5; (sleep 0.2; echo 9) &;;\n"
    "    *LONG*) head -c 200000 /dev/zero | tr '\\0' 7;;\n"
    "    *FLOOD*) yes 1 | head -c 50000000;;\n"
    "    *) echo 0.5;;\n"
    "  esac\n"
    "done\n";

START_TEST(test_cmd_example_program) {
    // data/rewards/digit_match.py, values by hand: right-aligned digit matches.
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 %s/data/rewards/digit_match.py", root_dir());
    const char *specs[] = {"exact_answer", "cmd:0.5"};
    RewardConfig cfg = {.cmd = cmd, .cmd_timeout_s = 10};
    RewardSet *rs = build(specs, 2, &cfg);
    json_t *row = json_pack("{s:s, s:s}", "prompt", "12+34=", "answer", "46");
    RewardInput in[5] = {{"12+34=", "46", 2, row}, {"12+34=", "47", 2, row}, {"12+34=", "146", 2, row},
                         {"12+34=", "no digits", 2, row}, {"12+34=", "\xE4\xB8 46 \"quoted\"\n\\", 2, row}};
    float comp[10], total[5];
    uint8_t valid[5];
    PailErr warn;
    ck_assert_msg(reward_set_score_batch(rs, in, 5, comp, total, valid, &warn) == 0, "%s", warn.msg);
    const float want_cmd[5] = {1.0f, 0.5f, 2.0f / 3.0f, 0.0f, 1.0f};
    const float want_exact[5] = {1, 0, 0, 0, 1};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(valid[i], 1);
        ck_assert_msg(fabsf(comp[i * 2 + 1] - want_cmd[i]) < 1e-6f, "cmd %d: %g", i, comp[i * 2 + 1]);
        ck_assert(comp[i * 2] == want_exact[i]);
        ck_assert(fabsf(total[i] - (want_exact[i] + 0.5f * want_cmd[i])) < 1e-6f);
    }
    reward_set_free(rs);
    json_decref(row);
}
END_TEST

// Several cmd rewards, each named, each its own program and component
// ("cmd:NAME", so the trainer's metric is rewards/cmd:NAME/mean); an unnamed one
// beside them takes the plain program, even one that sets a variable (X=1 prog).
START_TEST(test_cmd_named) {
    char one[256], quarter[256], plain[300];
    script("one.sh", "while IFS= read -r l; do echo 1; done\n", one, sizeof one);
    script("quarter.sh", "while IFS= read -r l; do echo 0.25; done\n", quarter, sizeof quarter);
    script("three.sh", "while IFS= read -r l; do echo $X; done\n", plain, sizeof plain);
    char a[300], b[300], c[320];
    snprintf(a, sizeof a, "judge=%s", one);
    snprintf(b, sizeof b, "style=%s", quarter);
    snprintf(c, sizeof c, "X=3 %s", plain);
    const char *cmds[] = {b, c, a};
    RewardConfig cfg = {.cmds = cmds, .ncmds = 3, .cmd_timeout_s = 5};
    RewardSet *rs = build((const char *[]){"cmd:judge", "cmd:style:2", "cmd:0.5"}, 3, &cfg);
    ck_assert_int_eq(reward_set_count(rs), 3);
    ck_assert_str_eq(reward_set_names(rs)[0], "cmd:judge");
    ck_assert_str_eq(reward_set_names(rs)[1], "cmd:style");
    ck_assert_str_eq(reward_set_names(rs)[2], "cmd");
    ck_assert(reward_set_weights(rs)[1] == 2.0f && reward_set_weights(rs)[2] == 0.5f);
    ck_assert_str_eq(reward_set_cmd(rs, 0), one);
    ck_assert_str_eq(reward_set_cmd(rs, 1), quarter);
    ck_assert_str_eq(reward_set_cmd(rs, 2), c);
    char desc[1024];
    reward_set_describe(rs, desc, sizeof desc);
    ck_assert_msg(strstr(desc, "cmd:judge:1 (cmd 'sh ") && strstr(desc, "cmd:style:2 (cmd 'sh "), "%s", desc);
    const char *t[] = {"x", "y"};
    float comp[6];
    uint8_t valid[2];
    PailErr warn;
    RewardInput in[2] = {{"p", t[0], 1, NULL}, {"p", t[1], 1, NULL}};
    float total[2];
    ck_assert_int_eq(reward_set_score_batch(rs, in, 2, comp, total, valid, &warn), 0);
    for (int i = 0; i < 2; i++) {
        ck_assert(comp[i * 3] == 1.0f && comp[i * 3 + 1] == 0.25f && comp[i * 3 + 2] == 3.0f);
        ck_assert(total[i] == 1.0f + 2 * 0.25f + 0.5f * 3);
    }
    reward_set_free(rs);
}
END_TEST

START_TEST(test_cmd_started_once) {
    // The program keeps state across batches: it numbers the lines it has read.
    char cmd[256];
    script("count.sh", "n=0\nwhile IFS= read -r l; do n=$((n+1)); echo $n; done\n", cmd, sizeof cmd);
    RewardSet *rs = cmd_set(cmd, 5);
    const char *t[] = {"a", "b", "c"};
    float comp[3];
    uint8_t valid[3];
    PailErr warn;
    ck_assert_int_eq(score_texts(rs, t, 3, comp, valid, &warn), 0);
    ck_assert(comp[0] == 1 && comp[1] == 2 && comp[2] == 3);
    ck_assert_int_eq(score_texts(rs, t, 2, comp, valid, &warn), 0);
    ck_assert(comp[0] == 4 && comp[1] == 5);
    // the JSON line carries prompt, completion, completion_tokens and the row fields
    reward_set_free(rs);
    script("echo.sh", "while IFS= read -r l; do printf '%s\\n' \"$l\" >> " "\"$0.log\"; echo 1; done\n", cmd, sizeof cmd);
    rs = cmd_set(cmd, 5);
    json_t *row = json_pack("{s:s, s:i, s:s}", "prompt", "raw", "answer", 7, "completion", "from row");
    RewardInput in = {"the prompt", "the \"completion\"\n", 9, row};
    float c, tot;
    uint8_t v;
    ck_assert_int_eq(reward_set_score_batch(rs, &in, 1, &c, &tot, &v, &warn), 0);
    reward_set_free(rs);
    char path[256];
    snprintf(path, sizeof path, "%s/echo.sh.log", tmpdir);
    json_error_t je;
    json_t *got = json_load_file(path, 0, &je);
    ck_assert_msg(got != NULL, "%s", je.text);
    ck_assert_str_eq(json_string_value(json_object_get(got, "prompt")), "the prompt");
    ck_assert_str_eq(json_string_value(json_object_get(got, "completion")), "the \"completion\"\n");
    ck_assert_int_eq(json_integer_value(json_object_get(got, "completion_tokens")), 9);
    ck_assert_int_eq(json_integer_value(json_object_get(got, "answer")), 7);
    json_decref(got);
    json_decref(row);
}
END_TEST

// One failure mode: batch `texts`, expect `want_valid` per completion and
// `needles` in the warning, then a good batch.
static void failure_case(const char *const *texts, int n, const uint8_t *want_valid, const char *n1, const char *n2) {
    char cmd[256];
    script("misbehave.sh", MISBEHAVE, cmd, sizeof cmd);
    RewardSet *rs = cmd_set(cmd, 1.0);
    float comp[16];
    uint8_t valid[16];
    PailErr warn;
    int want_bad = 0;
    for (int i = 0; i < n; i++) want_bad += !want_valid[i];
    int64_t t0 = time_mono_ms();
    int bad = score_texts(rs, texts, n, comp, valid, &warn);
    int64_t ms = time_mono_ms() - t0;
    ck_assert_msg(bad == want_bad, "%s: %d invalid, want %d (%s)", texts[n - 1], bad, want_bad, warn.msg);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(valid[i] == want_valid[i], "%s: valid[%d] = %d", texts[n - 1], i, valid[i]);
        ck_assert(valid[i] ? comp[i] == 0.5f : comp[i] == 0.0f);
    }
    ck_assert_msg(strstr(warn.msg, n1), "warning lacks '%s': %s", n1, warn.msg);
    if (n2) ck_assert_msg(strstr(warn.msg, n2), "warning lacks '%s': %s", n2, warn.msg);
    ck_assert_msg(ms < 3000, "the batch took %lld ms (timeout 1 s)", (long long)ms);
    next_batch_works(rs);
    reward_set_free(rs);
}

START_TEST(test_cmd_crash) {
    const char *t[] = {"a", "b", "CRASH", "d"};
    failure_case(t, 4, (const uint8_t[]){1, 1, 0, 0}, "exited with status 1 after 2 of 4 answers", "boom: crashing on purpose");
}
END_TEST

START_TEST(test_cmd_signal) {
    const char *t[] = {"a", "SEGV", "c"};
    failure_case(t, 3, (const uint8_t[]){1, 0, 0}, "killed by signal 11", "about to segfault");
    // the program itself killed (no shell in between: exec)
    char cmd[256];
    script("segv.sh", "read -r l; echo 'segv now' >&2; kill -SEGV $$\n", cmd, sizeof cmd);
    char ecmd[300];
    snprintf(ecmd, sizeof ecmd, "exec %s", cmd);
    RewardSet *rs = cmd_set(ecmd, 1.0);
    const char *one[] = {"a"};
    float comp[1];
    uint8_t valid[1];
    PailErr warn;
    ck_assert_int_eq(score_texts(rs, one, 1, comp, valid, &warn), 1);
    ck_assert_msg(strstr(warn.msg, "killed by signal 11 (Segmentation fault) after 0 of 1") && strstr(warn.msg, "segv now"),
                  "%s", warn.msg);
    reward_set_free(rs);
}
END_TEST

START_TEST(test_cmd_timeout) {
    const char *t[] = {"a", "SLEEP", "c"};
    failure_case(t, 3, (const uint8_t[]){1, 0, 0}, "timed out after 1 s", "sleeping now");
}
END_TEST

START_TEST(test_cmd_non_number) {
    const char *t[] = {"a", "WORD", "c", "NAN"};
    failure_case(t, 4, (const uint8_t[]){1, 0, 1, 0}, "2 of 4 answers are not numbers (line 2: 'not-a-number')", NULL);
    const char *t2[] = {"a", "HUGE"};  // a double, but not a float
    failure_case(t2, 2, (const uint8_t[]){1, 0}, "answer 2 (1e+300) is out of float range", NULL);
}
END_TEST

START_TEST(test_cmd_fewer_lines) {
    const char *t[] = {"a", "b", "SKIP"};
    failure_case(t, 3, (const uint8_t[]){1, 1, 0}, "timed out after 1 s", "after 2 of 3 answers");
}
END_TEST

START_TEST(test_cmd_more_lines) {
    const char *t[] = {"a", "b", "TWICE"};  // both surplus lines in one write: seen with the batch
    failure_case(t, 3, (const uint8_t[]){0, 0, 0}, "wrote more lines than the 3 inputs", NULL);
    // A surplus line that arrives after the batch: the program is restarted before
    // the next batch, whose answers must not be shifted (a stale 9 would be first).
    char cmd[256];
    script("misbehave.sh", MISBEHAVE, cmd, sizeof cmd);
    RewardSet *rs = cmd_set(cmd, 1.0);
    const char *late[] = {"a", "LATE"};
    float comp[2];
    uint8_t valid[2];
    PailErr warn;
    ck_assert_int_eq(score_texts(rs, late, 2, comp, valid, &warn), 0);
    time_sleep_ms(400);
    next_batch_works(rs);
    reward_set_free(rs);
}
END_TEST

START_TEST(test_cmd_huge_output) {
    const char *t1[] = {"a", "LONG"};
    failure_case(t1, 2, (const uint8_t[]){1, 0}, "longer than 65536 bytes", NULL);
    const char *t2[] = {"a", "FLOOD"};
    failure_case(t2, 2, (const uint8_t[]){0, 0}, "wrote more lines than the 2 inputs", NULL);
}
END_TEST

START_TEST(test_cmd_missing_program) {
    RewardSet *rs = cmd_set("/nonexistent/reward-program --flag", 1.0);
    const char *t[] = {"a", "b"};
    float comp[2];
    uint8_t valid[2];
    PailErr warn;
    ck_assert_int_eq(score_texts(rs, t, 2, comp, valid, &warn), 2);
    ck_assert(!valid[0] && !valid[1]);
    ck_assert_msg(strstr(warn.msg, "exited with status 127 (command not found)"), "%s", warn.msg);
    ck_assert_msg(strstr(warn.msg, "/nonexistent/reward-program"), "%s", warn.msg);
    ck_assert_msg(strstr(warn.msg, "not found"), "%s", warn.msg);
    // The second try waits for the backoff (>= 250 ms) instead of looping hot.
    int64_t t0 = time_mono_ms();
    ck_assert_int_eq(score_texts(rs, t, 2, comp, valid, &warn), 2);
    int64_t ms = time_mono_ms() - t0;
    ck_assert_msg(ms >= 200, "restart after %lld ms (no backoff)", (long long)ms);
    reward_set_free(rs);
}
END_TEST

// A batch whose every reward fails stops the worker when it is the first one, or
// the REWARD_FAILED_BATCHES-th in a row; a batch with one answer starts the count again.
START_TEST(test_cmd_failing_batches) {
    char cmd[512];
    script("fail.sh", "echo 'cannot open rubric.txt' >&2; exit 1\n", cmd, sizeof cmd);
    RewardSet *rs = cmd_set(cmd, 2.0);
    const char *t[] = {"a", "b"};
    float comp[2];
    uint8_t valid[2];
    PailErr warn, err = {0};
    ck_assert_int_eq(reward_set_check_failing(rs, NULL, &err), 0);  // nothing scored yet
    ck_assert_int_eq(score_texts(rs, t, 2, comp, valid, &warn), 2);
    ck_assert_int_eq(reward_set_check_failing(rs, &warn, &err), -1);
    ck_assert_msg(strstr(err.msg, "every reward of the first batch failed") && strstr(err.msg, "cannot open rubric.txt"),
                  "%s", err.msg);
    reward_set_free(rs);

    // A program that fails on lines with FAIL: a good first batch, then failed ones.
    script("some.sh", "while IFS= read -r l; do case \"$l\" in *FAIL*) echo 'rubric gone' >&2; exit 1;; "
                      "*) echo 1;; esac; done\n", cmd, sizeof cmd);
    rs = cmd_set(cmd, 2.0);
    const char *good[] = {"a", "b"}, *mixed[] = {"a", "FAIL"}, *fail[] = {"FAIL", "FAIL"};
    ck_assert_int_eq(score_texts(rs, good, 2, comp, valid, &warn), 0);
    ck_assert_int_eq(reward_set_check_failing(rs, &warn, &err), 0);
    for (int round = 0; round < 2; round++) {
        for (int i = 1; i < REWARD_FAILED_BATCHES; i++) {
            ck_assert_int_eq(score_texts(rs, fail, 2, comp, valid, &warn), 2);
            ck_assert_msg(reward_set_check_failing(rs, &warn, &err) == 0, "failed batch %d of a run stops: %s", i, err.msg);
        }
        if (round == 0) {  // one answer in a batch: the run of failed batches is over
            ck_assert_int_eq(score_texts(rs, mixed, 2, comp, valid, &warn), 1);
            ck_assert_int_eq(reward_set_check_failing(rs, &warn, &err), 0);
        }
    }
    ck_assert_int_eq(score_texts(rs, fail, 2, comp, valid, &warn), 2);
    ck_assert_int_eq(reward_set_check_failing(rs, &warn, &err), -1);
    ck_assert_msg(strstr(err.msg, "every reward of 3 batches in a row failed") && strstr(err.msg, "rubric gone"), "%s",
                  err.msg);
    reward_set_free(rs);
}
END_TEST

// The fields a set reads from every row, and the cmd program's path checked at start.
START_TEST(test_fields_and_program) {
    const char *fields[4], *rewards[4];
    RewardConfig cfg = {.answer_field = "solution", .format_regex = "x", .cmd = "true", .cmd_timeout_s = 1};
    RewardSet *rs = build((const char *[]){"format", "exact_answer:2", "cmd"}, 3, &cfg);
    ck_assert_int_eq(reward_set_fields(rs, fields, rewards, 4), 1);
    ck_assert_str_eq(fields[0], "solution");
    ck_assert_str_eq(rewards[0], "exact_answer");
    ck_assert_str_eq(reward_set_cmd(rs, 0), "true");
    ck_assert_ptr_null(reward_set_cmd(rs, 1));
    reward_set_free(rs);
    cfg.cmd = NULL;
    rs = build((const char *[]){"format"}, 1, &cfg);
    ck_assert_int_eq(reward_set_fields(rs, fields, rewards, 4), 0);
    ck_assert_ptr_null(reward_set_cmd(rs, 0));
    reward_set_free(rs);

    char cmd[512], path[300];
    PailErr err = {0};
    script("ok.py", "print(1)\n", cmd, sizeof cmd);
    snprintf(path, sizeof path, "%s/ok.py", tmpdir);
    ck_assert_int_eq(preflight_program("true", "--reward-cmd", &err), 0);
    ck_assert_int_eq(preflight_program(cmd, "--reward-cmd", &err), 0);  // sh DIR/ok.py
    snprintf(cmd, sizeof cmd, "python3 %s --flag", path);
    ck_assert_int_eq(preflight_program(cmd, "--reward-cmd", &err), 0);
    ck_assert_int_eq(preflight_program("python3 -c 'print(1)'", "--reward-cmd", &err), 0);  // shell syntax: not decided
    ck_assert_int_eq(preflight_program("python3 -u missing.py", "--reward-cmd", &err), 0);  // an option first: not decided
    snprintf(cmd, sizeof cmd, "python3 %s/missing.py --flag", tmpdir);
    ck_assert_int_eq(preflight_program(cmd, "--reward-cmd", &err), -1);
    ck_assert_msg(strstr(err.msg, "--reward-cmd 'python3 ") && strstr(err.msg, "missing.py' does not exist"), "%s", err.msg);
    ck_assert_int_eq(preflight_program("/nonexistent/reward-program --flag", "--env", &err), -1);
    ck_assert_msg(strstr(err.msg, "--env '/nonexistent/reward-program --flag': the program '/nonexistent/reward-program' "
                                  "does not exist"), "%s", err.msg);
    ck_assert_int_eq(preflight_program("no-such-program-pail x", "--reward-cmd", &err), -1);
    ck_assert_msg(strstr(err.msg, "'no-such-program-pail' is not found on PATH"), "%s", err.msg);
    ck_assert_int_eq(preflight_program(path, "--reward-cmd", &err), -1);  // a file without the x bit
    ck_assert_msg(strstr(err.msg, "is not an executable file"), "%s", err.msg);
}
END_TEST

START_TEST(test_cmd_epipe) {
    // The program exits without reading a 1 MB batch: our writes get EPIPE, and
    // SIGPIPE (default action: kill) must not reach this process.
    ck_assert(signal(SIGPIPE, SIG_DFL) != SIG_ERR);
    char cmd[256];
    script("quit.sh", "echo 'not reading' >&2; exit 3\n", cmd, sizeof cmd);
    RewardSet *rs = cmd_set(cmd, 2.0);
    static char big[16][65536];
    const char *t[16];
    for (int i = 0; i < 16; i++) {
        memset(big[i], 'x', sizeof big[i] - 1);
        big[i][sizeof big[i] - 1] = 0;
        t[i] = big[i];
    }
    float comp[16];
    uint8_t valid[16];
    PailErr warn;
    // 16 completions of 64 KB (1 MB > a pipe's 64 KB buffer), three batches
    for (int rep = 0; rep < 3; rep++) {
        ck_assert_int_eq(score_texts(rs, t, 16, comp, valid, &warn), 16);
        ck_assert_msg(strstr(warn.msg, "exited with status 3") && strstr(warn.msg, "not reading"), "%s", warn.msg);
    }
    reward_set_free(rs);
}
END_TEST

// ---- limits: build errors ----

static void build_fails(const char *const *specs, int n, RewardConfig cfg, const char *needle) {
    cfg.specs = specs;
    cfg.nspecs = n;
    RewardSet *rs = NULL;
    PailErr err = {0};
    ck_assert_int_eq(reward_set_build(&rs, &cfg, &err), -1);
    ck_assert_ptr_null(rs);
    ck_assert_msg(strstr(err.msg, needle), "want '%s' in: %s", needle, err.msg);
}

START_TEST(test_bad_specs) {
    RewardConfig none = {0};
    build_fails(NULL, 0, none, "no reward given");
    build_fails((const char *[]){"bogus"}, 1, none, "unknown reward 'bogus'");
    build_fails((const char *[]){"exact"}, 1, none, "unknown reward 'exact'");
    build_fails((const char *[]){"format:abc"}, 1, (RewardConfig){.format_regex = "x"}, "weight 'abc' is not a number");
    build_fails((const char *[]){"format:"}, 1, (RewardConfig){.format_regex = "x"}, "weight '' is not a number");
    build_fails((const char *[]){"format:nan"}, 1, (RewardConfig){.format_regex = "x"}, "not a number");
    build_fails((const char *[]){"format:1x"}, 1, (RewardConfig){.format_regex = "x"}, "not a number");
    build_fails((const char *[]){"format", "format:2"}, 2, (RewardConfig){.format_regex = "x"}, "format is given twice");
    build_fails((const char *[]){"format"}, 1, none, "needs --format-regex");
    build_fails((const char *[]){"length"}, 1, none, "needs --length-target");
    build_fails((const char *[]){"length:-0.1"}, 1, (RewardConfig){.length_target = 10}, "use a positive weight");
    build_fails((const char *[]){"cmd"}, 1, none, "needs --reward-cmd");
    // a --reward-cmd is never ignored: some cmd reward takes it, or the set is refused
    build_fails((const char *[]){"exact_answer"}, 1, (RewardConfig){.cmd = "python3 r.py"},
                "--reward-cmd 'python3 r.py' is given but --reward lists no cmd reward (add --reward cmd)");
    build_fails((const char *[]){"cmd:a"}, 1, (RewardConfig){.cmd = "true"},
                "--reward-cmd 'true': no cmd reward takes it (the named ones take a=PROGRAM");
    build_fails((const char *[]){"cmd:a", "cmd:b"}, 2, (RewardConfig){.cmds = (const char *[]){"a=true"}, .ncmds = 1},
                "--reward cmd:b needs --reward-cmd \"b=program args\"");
    build_fails((const char *[]){"cmd:a", "cmd:a:2"}, 2, (RewardConfig){.cmd = "a=true"}, "cmd:a is given twice");
    build_fails((const char *[]){"cmd", "cmd"}, 2, (RewardConfig){.cmd = "true"}, "several cmd rewards are named: cmd:JUDGE");
    build_fails((const char *[]){"cmd:9x"}, 1, (RewardConfig){.cmd = "true"}, "'9x' is neither a weight nor a cmd reward's name");
    build_fails((const char *[]){"cmd:a:x"}, 1, (RewardConfig){.cmd = "a=true"}, "weight 'x' is not a number");
    build_fails((const char *[]){"cmd:a"}, 1, (RewardConfig){.cmds = (const char *[]){"a=true", "a=false"}, .ncmds = 2},
                "--reward-cmd 'a=false': cmd:a already has the program 'true'");
    build_fails((const char *[]){"cmd"}, 1, (RewardConfig){.cmd = "true", .cmd_timeout_s = -1}, "--reward-timeout -1");
    build_fails((const char *[]){"format"}, 1, (RewardConfig){.format_regex = "(<think>"}, "--format-regex '(<think>'");
    build_fails((const char *[]){"format"}, 1, (RewardConfig){.format_regex = "(<think>"}, "at offset 8");
    build_fails((const char *[]){"format"}, 1, (RewardConfig){.format_regex = "a{2,1}"}, "--format-regex 'a{2,1}'");
    // negative weights are fine elsewhere (a cmd that returns a cost), and weight 0 logs only
    RewardConfig ok = {.cmd = "true", .format_regex = "x"};
    RewardSet *rs = build((const char *[]){"cmd:-1", "format:0"}, 2, &ok);
    ck_assert(reward_set_weights(rs)[0] == -1.0f && reward_set_weights(rs)[1] == 0.0f);
    reward_set_free(rs);  // never started: nothing to stop
}
END_TEST

// data/long-addition (make demo-reason's task): exact_answer on each worked trace
// the generator writes is 1; with its "Answer:" line changed it is 0 although the
// line before still shows the right sum (only the final answer counts); cut after
// two columns it is 0.
START_TEST(test_long_addition_traces) {
    char cmd[1024], path[512], line[8192];
    snprintf(cmd, sizeof cmd, "python3 %s/data/long-addition/make.py %s/la --train 4 --eval 4 --sft 40 >/dev/null",
             root_dir(), tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/la/sft.jsonl", tmpdir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    RewardSet *rs = build((const char *[]){"exact_answer"}, 1, &(RewardConfig){0});
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t jerr;
        json_t *row = json_loads(line, 0, &jerr);
        ck_assert_msg(row, "%s:%d: %s", path, rows + 1, jerr.text);
        const char *answer = json_string_value(json_object_get(row, "answer"));
        json_t *msgs = json_object_get(row, "messages");
        const char *trace = json_string_value(json_object_get(json_array_get(msgs, 1), "content"));
        ck_assert_msg(answer && trace, "%s:%d: no answer or trace", path, rows + 1);
        const char *last = strstr(trace, "\nAnswer: "), *step3 = strstr(trace, "\nStep 3:");
        ck_assert_msg(last && step3 && !strcmp(last + 9, answer), "%s:%d: '%s' ends in no Answer: %s", path, rows + 1,
                      trace, answer);
        char wrong[4096], cut[4096];
        snprintf(wrong, sizeof wrong, "%.*s\nAnswer: %lld", (int)(last - trace), trace, atoll(answer) + 1);
        snprintf(cut, sizeof cut, "%.*s", (int)(step3 - trace), trace);
        RewardInput in[3] = {{"p", trace, 250, row}, {"p", wrong, 250, row}, {"p", cut, 120, row}};
        float comp[3], total[3];
        uint8_t valid[3];
        PailErr warn;
        ck_assert_int_eq(reward_set_score_batch(rs, in, 3, comp, total, valid, &warn), 0);
        ck_assert_msg(comp[0] == 1.0f && comp[1] == 0.0f && comp[2] == 0.0f,
                      "%s:%d: right %g, wrong answer %g, cut %g (want 1 0 0)", path, rows + 1, comp[0], comp[1], comp[2]);
        json_decref(row);
        rows++;
    }
    fclose(f);
    reward_set_free(rs);
    ck_assert_int_eq(rows, 40);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rollout_reward");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_answer_table);
    tcase_add_test(core, test_answer_numbers);
    tcase_add_test(core, test_set_weights);
    tcase_add_test(core, test_long_addition_traces);
    tcase_add_test(core, test_format_regex);
    tcase_add_checked_fixture(core, tmp_setup, tmp_teardown);
    tcase_add_test(core, test_cmd_example_program);
    tcase_add_test(core, test_cmd_started_once);
    tcase_add_test(core, test_cmd_named);
    tcase_add_checked_fixture(limits, tmp_setup, tmp_teardown);
    tcase_add_test(limits, test_cmd_crash);
    tcase_add_test(limits, test_cmd_signal);
    tcase_add_test(limits, test_cmd_timeout);
    tcase_add_test(limits, test_cmd_non_number);
    tcase_add_test(limits, test_cmd_fewer_lines);
    tcase_add_test(limits, test_cmd_more_lines);
    tcase_add_test(limits, test_cmd_huge_output);
    tcase_add_test(limits, test_cmd_missing_program);
    tcase_add_test(limits, test_cmd_epipe);
    tcase_add_test(limits, test_cmd_failing_batches);
    tcase_add_test(limits, test_fields_and_program);
    tcase_add_test(limits, test_bad_specs);
    tcase_set_timeout(core, 30);
    tcase_set_timeout(limits, 30);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
