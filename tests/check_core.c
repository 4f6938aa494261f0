// Check suite for src/core: flags parsing, sha256/hmac against published
// vectors (FIPS 180-2, RFC 4231), rng determinism, buffers, planned blocks,
// the executables' OpenMP wait policy (this binary re-executed as a child).
#include <check.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "core/buf.h"
#include "core/flags.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "core/threads.h"
#include "core/log.h"
#include "core/utf8.h"

// Outside text made valid: one U+FFFD per maximal invalid subpart, cuts at a character boundary.
#define FFFD "\xef\xbf\xbd"
START_TEST(test_utf8_lossy) {
    char out[64];
    const char *bad = "a\xff" "b\xe2\x82" "c\xed\xa0\x80" "d\xf0\x9f\x98\x80";  // invalid, cut, surrogate, emoji
    size_t n = strlen(bad);
    ck_assert_uint_eq(utf8_lossy_copy(out, sizeof out, bad, n), n);
    ck_assert_str_eq(out, "a" FFFD "b" FFFD "c" FFFD FFFD FFFD "d\xf0\x9f\x98\x80");
    ck_assert_int_eq(utf8_invalid_at((const uint8_t *)out, strlen(out)), -1);
    Buf b = {0};
    ck_assert_int_eq(utf8_append_lossy(&b, (const uint8_t *)bad, n), 0);
    ck_assert_str_eq((char *)b.data, out);
    buf_free(&b);
    // too small: stops before a character that does not fit, never inside it
    ck_assert_uint_eq(utf8_lossy_copy(out, 4, "ab\xc3\xa9", 4), 2);
    ck_assert_str_eq(out, "ab");
    ck_assert_uint_eq(utf8_lossy_copy(out, 1, "x", 1), 0);
    ck_assert_str_eq(out, "");
}
END_TEST

// A log line quoting invalid bytes comes out valid (it copied them raw).
START_TEST(test_log_utf8) {
    char path[] = "/tmp/check-core-log-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    ck_assert_int_ge(dup2(fd, 2), 0);
    log_init("check_core", LOG_INFO);
    log_warn("the program wrote '%s'", "caf\xc3 \xff\xfe");
    char longer[3000];  // cut by the line buffer inside a character
    memset(longer, 'x', sizeof longer);
    for (size_t i = 2030; i + 2 < sizeof longer; i += 2) memcpy(longer + i, "\xc3\xa9", 2);
    longer[sizeof longer - 1] = 0;
    log_warn("%s", longer);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fdopen(fd, "r");
    ck_assert_ptr_nonnull(f);
    rewind(f);
    char text[8192];
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    unlink(path);
    text[got] = 0;
    ck_assert_int_eq(utf8_invalid_at((const uint8_t *)text, got), -1);
    ck_assert_ptr_nonnull(strstr(text, "the program wrote 'caf" FFFD " " FFFD FFFD "'"));
}
END_TEST

START_TEST(test_sha256_vectors) {
    char hex[65];
    sha256_hex("abc", 3, hex);  // FIPS 180-2 appendix B.1
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sha256_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    Sha256 *s = sha256_new();  // streaming equals one-shot
    sha256_update(s, "ab", 2);
    sha256_update(s, "c", 1);
    sha256_final_hex(s, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    uint8_t mac[32];  // RFC 4231 test case 2
    hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, mac);
    hex_encode(mac, 32, hex);
    ck_assert_str_eq(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}
END_TEST

START_TEST(test_flags_core) {
    long n; double lr; bool verbose; char *name; FlagList rewards = {0};
    Flag fl[] = {
        {"steps", FLAG_INT, &n, "10", 1, 1000, "steps"},
        {"lr", FLAG_DOUBLE, &lr, "1e-5", 0, 1, "learning rate"},
        {"verbose", FLAG_BOOL, &verbose, NULL, 1, 0, "chatty"},
        {"name", FLAG_STRING, &name, "x", 1, 0, "a name"},
        {"reward", FLAG_LIST, &rewards, "exact_answer", 1, 0, "rewards"},
    };
    char *argv[] = {"prog", "--steps", "42", "--lr=0.5", "--verbose", "pos1", "--reward", "a",
                    "--reward", "b:2", "--name", "y"};
    char **pos; int npos; PailErr err = {0};
    int rc = flags_parse(fl, 5, 12, argv, &pos, &npos, &err);
    ck_assert_int_eq(rc, FLAGS_OK);
    ck_assert_int_eq(n, 42);
    ck_assert(lr == 0.5);
    ck_assert(verbose);
    ck_assert_str_eq(name, "y");
    ck_assert_int_eq(rewards.n, 2);  // command line replaces the default list
    ck_assert_str_eq(rewards.items[1], "b:2");
    ck_assert_int_eq(npos, 1);
    ck_assert_str_eq(pos[0], "pos1");
    free(pos);
    flags_free(fl, 5);
}
END_TEST

START_TEST(test_flags_limits) {
    long n; Flag fl[] = {{"steps", FLAG_INT, &n, "10", 1, 100, "steps"}};
    PailErr err = {0};
    char *a1[] = {"p", "--steps", "0"};  // out of range: refused, not clamped
    ck_assert_int_eq(flags_parse(fl, 1, 3, a1, NULL, NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "--steps"));
    char *a2[] = {"p", "--steps", "12x"};
    ck_assert_int_eq(flags_parse(fl, 1, 3, a2, NULL, NULL, &err), -1);
    char *a3[] = {"p", "--bogus"};
    ck_assert_int_eq(flags_parse(fl, 1, 2, a3, NULL, NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown flag"));
    char *a4[] = {"p", "--steps"};
    ck_assert_int_eq(flags_parse(fl, 1, 2, a4, NULL, NULL, &err), -1);
    char *a5[] = {"p", "--help"};
    ck_assert_int_eq(flags_parse(fl, 1, 2, a5, NULL, NULL, &err), FLAGS_HELP);
    char *a6[] = {"p", "-x"};
    ck_assert_int_eq(flags_parse(fl, 1, 2, a6, NULL, NULL, &err), -1);
}
END_TEST

// "did you mean": a near miss names the flag meant; a word near none gets no guess.
START_TEST(test_flags_did_you_mean) {
    double t; long m; bool c;
    Flag fl[] = {{"temperature", FLAG_DOUBLE, &t, "1", 0, 10, "t"},
                 {"max-new-tokens", FLAG_INT, &m, "8", 1, 100, "m"},
                 {"max-prompt-tokens", FLAG_INT, &m, "8", 1, 100, "m"},
                 {"chat", FLAG_BOOL, &c, "false", 1, 0, "c"}};
    PailErr err = {0};
    struct { const char *arg, *want; } cases[] = {
        {"--temprature", "did you mean --temperature?"},     // a letter left out
        {"--tmeperature=2", "did you mean --temperature?"},  // two letters swapped
        {"--temp", "did you mean --temperature?"},           // the one flag it begins
        {"--max-new-token", "did you mean --max-new-tokens?"},
        {"--chta", "did you mean --chat?"},
        {"--max", "unknown flag '--max' (see --help)"},      // begins two flags: no guess
        {"--learning-rate", "unknown flag '--learning-rate' (see --help)"},  // no --lr here
        // TRL's names for flags the tool has
        {"--max-completion-length", "unknown flag '--max-completion-length': TRL's --max-completion-length is --max-new-tokens here"},
        {"--max_prompt_length=9", "TRL's --max-prompt-length is --max-prompt-tokens here"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {"p", (char *)cases[i].arg, "1"};
        ck_assert_int_eq(flags_parse(fl, 4, 3, argv, NULL, NULL, &err), -1);
        ck_assert_msg(strstr(err.msg, cases[i].want), "%s: %s", cases[i].arg, err.msg);
    }
    long g, gps;
    double lr;
    Flag tr[] = {{"group-size", FLAG_INT, &g, "8", 2, 100, "G"},
                 {"groups-per-step", FLAG_INT, &gps, "16", 1, 100, "groups"},
                 {"lr", FLAG_DOUBLE, &lr, "1e-5", 0, 1, "lr"}};
    struct { const char *arg, *want; } trl[] = {
        {"--num-generations", "TRL's --num-generations is --group-size here"},
        {"--learning-rate", "TRL's --learning-rate is --lr here"},
        {"--per-device-train-batch-size", "TRL's --per-device-train-batch-size is --groups-per-step here (pail counts "
                                          "prompt groups of --group-size completions: TRL's batch size / num_generations)"},
    };
    for (size_t i = 0; i < sizeof trl / sizeof trl[0]; i++) {
        char *argv[] = {"p", (char *)trl[i].arg, "1"};
        ck_assert_int_eq(flags_parse(tr, 3, 3, argv, NULL, NULL, &err), -1);
        ck_assert_msg(strstr(err.msg, trl[i].want), "%s: %s", trl[i].arg, err.msg);
    }
    flags_free(tr, 3);
    const char *names[] = {"status", "stop", "samples", "eval"};
    ck_assert_str_eq(flags_closest("stauts", 6, names, sizeof names[0], 4), "status");
    ck_assert_ptr_null(flags_closest("bogus", 5, names, sizeof names[0], 4));
    flags_free(fl, 4);
}
END_TEST

START_TEST(test_flags_config) {
    char path[] = "/tmp/pail-check-core-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *text = "# comment\nsteps = 7\nlr=0.25\n";
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    long n; double lr; char *cfg;
    Flag fl[] = {{"config", FLAG_STRING, &cfg, NULL, 1, 0, "config file"},
                 {"steps", FLAG_INT, &n, "10", 1, 100, "steps"},
                 {"lr", FLAG_DOUBLE, &lr, "1e-5", 0, 1, "lr"}};
    char *argv[] = {"p", "--config", path, "--lr", "0.125"};
    PailErr err = {0};
    ck_assert_int_eq(flags_parse(fl, 3, 5, argv, NULL, NULL, &err), FLAGS_OK);
    ck_assert_int_eq(n, 7);       // from the file
    ck_assert(lr == 0.125);       // the command line wins
    FILE *f = fopen(path, "w");
    fputs("nosuch = 3\n", f);
    fclose(f);
    ck_assert_int_eq(flags_parse(fl, 3, 5, argv, NULL, NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown key 'nosuch'"));
    unlink(path);
    flags_free(fl, 3);
}
END_TEST

START_TEST(test_rng) {
    Rng a, b, c;
    rng_seed(&a, 42, 1);
    rng_seed(&b, 42, 1);
    rng_seed(&c, 42, 2);
    int same_c = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rng_u64(&a);
        ck_assert_uint_eq(x, rng_u64(&b));
        same_c += x == rng_u64(&c);
    }
    ck_assert_int_eq(same_c, 0);
    double sum = 0;  // mean of 1e5 uniforms within 5 sigma of 0.5 (sigma = 0.289/sqrt(1e5))
    for (int i = 0; i < 100000; i++) {
        double u = rng_uniform(&a);
        ck_assert(u >= 0 && u < 1);
        sum += u;
    }
    ck_assert(fabs(sum / 100000 - 0.5) < 5 * 0.289 / sqrt(100000.0));
}
END_TEST

START_TEST(test_buf) {
    Buf b = {0};
    for (int i = 0; i < 1000; i++) ck_assert_int_eq(buf_printf(&b, "%d,", i), 0);
    ck_assert_uint_eq(b.len, strlen((char *)b.data));
    ck_assert(!strncmp((char *)b.data, "0,1,2,", 6));
    buf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    buf_append(&b, "x\0y", 3);
    ck_assert_uint_eq(b.len, 3);
    buf_free(&b);
}
END_TEST

// The two passes of a plan agree, every piece is 64-byte aligned and inside
// the block, and pieces do not overlap.
static void plan_three(MemPlan *p, void **a, void **b, void **c) {
    *a = mem_plan_take(p, 1);
    *b = mem_plan_take(p, 100);
    *c = mem_plan_take(p, 0);
}

START_TEST(test_mem_plan) {
    MemPlan dry = {0};
    void *a, *b, *c;
    plan_three(&dry, &a, &b, &c);
    ck_assert(a == NULL && b == NULL && c == NULL);
    ck_assert_uint_eq(dry.used, 64 + 128);
    char *block = mem_calloc_big(dry.used);
    ck_assert_ptr_nonnull(block);
    MemPlan real = {block, 0};
    plan_three(&real, &a, &b, &c);
    ck_assert_uint_eq(real.used, dry.used);
    ck_assert(a == block && (char *)b == block + 64 && (char *)c == block + 192);
    ck_assert_uint_eq((uintptr_t)b % 64, 0);
    free(block);
}
END_TEST

// ---- threads_policy_apply: this binary started again as a child ----
// The child (CHECK_CORE_THREADS_CHILD set) applies the policy, then prints
// what its own children would see and libgomp's settings (omp_display_env).
// OMP_DISPLAY_ENV=true makes libgomp print its settings once per program
// image it is loaded into: the count of BEGIN lines is the count of execs + 1.
static int threads_child(char **argv) {
    threads_policy_apply(argv);
    const char *spin = getenv("GOMP_SPINCOUNT"), *mark = getenv("PAIL_THREADS_REEXEC");
    printf("env GOMP_SPINCOUNT=%s PAIL_THREADS_REEXEC=%s\nnote %s\n", spin ? spin : "-", mark ? mark : "-",
           threads_policy_note());
    fflush(stdout);
    omp_display_env(1);
    return 0;
}

// Runs the child with `env` (VAR=value words) in a clean OpenMP environment;
// returns its output (stdout and stderr, malloc'd) and the BEGIN line count.
static char *run_child(const char *env, int *images) {
    char self[4096], cmd[8192];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert(n > 0);
    self[n] = 0;
    // OPENBLAS_CORETYPE set (as a user may): whether OpenBLAS knows this CPU
    // would otherwise decide whether there is an exec for its kernels too
    snprintf(cmd, sizeof cmd, "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u PAIL_THREADS_REEXEC "
             "OPENBLAS_CORETYPE=Haswell OMP_DISPLAY_ENV=true CHECK_CORE_THREADS_CHILD=1 %s '%s' 2>&1", env, self);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    Buf b = {0};
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, p)) > 0) ck_assert_int_eq(buf_append(&b, chunk, got), 0);
    ck_assert_int_eq(pclose(p), 0);
    char *text = b.data ? (char *)b.data : strdup("");  // Buf keeps a NUL after the data
    *images = 0;
    for (const char *q = text; (q = strstr(q, "OPENMP DISPLAY ENVIRONMENT BEGIN")); q++) (*images)++;
    return text;
}

START_TEST(test_threads_policy) {
    // Nothing set: pail's spin count, one exec, and the children see none of it.
    int images;
    char *out = run_child("", &images);
    ck_assert_msg(images == 3, "%d program images (want 2, plus the child's own display):\n%s", images - 1, out);
    ck_assert_msg(strstr(out, "env GOMP_SPINCOUNT=- PAIL_THREADS_REEXEC=-\n"), "%s", out);
    ck_assert_msg(strstr(out, "note OpenMP waits: GOMP_SPINCOUNT=" THREADS_SPINCOUNT " (pail's choice"), "%s", out);
    // libgomp's own display after the exec, then the child's call: both pail's value.
    const char *last = strstr(strstr(out, "OPENMP DISPLAY ENVIRONMENT BEGIN") + 1, "OPENMP DISPLAY ENVIRONMENT BEGIN");
    ck_assert_msg(last && strstr(last, "GOMP_SPINCOUNT = '" THREADS_SPINCOUNT "'"), "%s", out);
    free(out);
}
END_TEST

START_TEST(test_threads_policy_limits) {
    int images;
    // The user's choice wins, and nothing is executed again.
    char *out = run_child("OMP_WAIT_POLICY=passive", &images);
    ck_assert_msg(images == 2, "%s", out);
    ck_assert_msg(strstr(out, "note OpenMP waits: OMP_WAIT_POLICY=passive (set by the environment)"), "%s", out);
    ck_assert_msg(strstr(out, "GOMP_SPINCOUNT = '0'"), "%s", out);
    free(out);
    out = run_child("GOMP_SPINCOUNT=77", &images);
    ck_assert_msg(images == 2 && strstr(out, "env GOMP_SPINCOUNT=77 PAIL_THREADS_REEXEC=-\n"), "%s", out);
    ck_assert_msg(strstr(out, "GOMP_SPINCOUNT = '77'"), "%s", out);
    free(out);
    // A marker already there (not ours): no exec at all, never a loop.
    out = run_child("PAIL_THREADS_REEXEC=1", &images);
    ck_assert_msg(images == 2, "%s", out);
    ck_assert_msg(strstr(out, "note OpenMP waits: libgomp's default (PAIL_THREADS_REEXEC was already set)"), "%s",
                  out);
    ck_assert_msg(strstr(out, "env GOMP_SPINCOUNT=- PAIL_THREADS_REEXEC=-\n"), "%s", out);
    free(out);
}
END_TEST

// OpenBLAS's fallback cores on a CPU with AVX2 / AVX-512 are replaced; a core it
// recognised, or a CPU without AVX2, is kept.
START_TEST(test_threads_blas_core) {
    ck_assert_str_eq(threads_blas_core_for("Prescott", true, true), "SkylakeX");
    ck_assert_str_eq(threads_blas_core_for("Prescott", true, false), "Haswell");
    ck_assert_str_eq(threads_blas_core_for("Core2", true, false), "Haswell");
    ck_assert_str_eq(threads_blas_core_for("Sandybridge", true, true), "SkylakeX");
    ck_assert_ptr_null(threads_blas_core_for("Prescott", false, false));  // an old CPU: its own kernels are right
    ck_assert_ptr_null(threads_blas_core_for("Haswell", true, true));     // recognised (or pinned)
    ck_assert_ptr_null(threads_blas_core_for("SkylakeX", true, true));
    ck_assert_ptr_null(threads_blas_core_for("Zen", true, false));
    ck_assert_ptr_null(threads_blas_core_for(NULL, true, true));
}
END_TEST

int main(int argc, char **argv) {
    (void)argc;
    if (getenv("CHECK_CORE_THREADS_CHILD")) return threads_child(argv);
    Suite *s = suite_create("core");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_sha256_vectors);
    tcase_add_test(core, test_flags_core);
    tcase_add_test(core, test_flags_config);
    tcase_add_test(core, test_rng);
    tcase_add_test(core, test_buf);
    tcase_add_test(core, test_utf8_lossy);
    tcase_add_test(core, test_log_utf8);
    tcase_add_test(core, test_mem_plan);
    tcase_add_test(core, test_threads_policy);
    tcase_add_test(core, test_threads_blas_core);
    tcase_add_test(limits, test_flags_limits);
    tcase_add_test(limits, test_flags_did_you_mean);
    tcase_add_test(limits, test_threads_policy_limits);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
