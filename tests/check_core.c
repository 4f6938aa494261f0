// Check suite for src/core: flags parsing, sha256/hmac against published
// vectors (FIPS 180-2, RFC 4231), rng determinism, buffers, planned blocks.
#include <check.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "core/buf.h"
#include "core/flags.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/sha256.h"

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

int main(void) {
    Suite *s = suite_create("core");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_sha256_vectors);
    tcase_add_test(core, test_flags_core);
    tcase_add_test(core, test_flags_config);
    tcase_add_test(core, test_rng);
    tcase_add_test(core, test_buf);
    tcase_add_test(core, test_mem_plan);
    tcase_add_test(limits, test_flags_limits);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
