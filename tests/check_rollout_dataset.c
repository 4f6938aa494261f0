// Check suite for src/rollout/dataset.c: JSON-lines loading (prompt and messages
// rows, extra fields, blank lines, CRLF, BOM), the shipped data/addition task
// (checked by recomputing every sum), errors naming file:line, every truncation
// of a valid file, samplers (determinism, per-epoch reshuffle, per-worker streams,
// seek, partition coverage) and loading through a file:// store URL.
// Run from the repository root (or set PAIL_ROOT).
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/buf.h"
#include "core/fsutil.h"
#include "core/sha256.h"
#include "rollout/dataset.h"

static const char *root_dir(void) { return getenv("PAIL_ROOT") ? getenv("PAIL_ROOT") : "."; }

static Dataset *parse_ok(const char *text) {
    Dataset *ds;
    PailErr err;
    ck_assert_msg(dataset_parse(&ds, text, strlen(text), "mem.jsonl", &err) == 0, "%s", err.msg);
    return ds;
}

static void parse_fails(const char *text, const char *want) {
    Dataset *ds = (Dataset *)1;
    PailErr err = {0};
    ck_assert_int_eq(dataset_parse(&ds, text, strlen(text), "data/x.jsonl", &err), -1);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(err.msg, want), "want '%s' in: %s", want, err.msg);
}

START_TEST(test_parse_rows) {
    const char *text =
        "\xEF\xBB\xBF{\"prompt\": \"12+34=\", \"answer\": \"46\"}\r\n"
        "\n"
        "   \n"
        "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"2+2?\"}], "
        "\"answer\": 4, \"meta\": {\"source\": \"hand\"}}\n"
        "{\"prompt\": \"caf\xC3\xA9\"}";  // no final newline
    Dataset *ds = parse_ok(text);
    ck_assert_int_eq(ds->n, 3);
    ck_assert_str_eq(ds->rows[0].prompt, "12+34=");
    ck_assert_ptr_null(ds->rows[0].messages);
    ck_assert_int_eq(ds->rows[0].line, 1);
    ck_assert_str_eq(json_string_value(json_object_get(ds->rows[0].fields, "answer")), "46");
    ck_assert_ptr_null(ds->rows[1].prompt);
    ck_assert_int_eq(json_array_size(ds->rows[1].messages), 2);
    ck_assert_int_eq(ds->rows[1].line, 4);
    ck_assert_int_eq(json_integer_value(json_object_get(ds->rows[1].fields, "answer")), 4);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ds->rows[1].fields, "meta"), "source")), "hand");
    ck_assert_str_eq(ds->rows[2].prompt, "caf\xC3\xA9");
    ck_assert_int_eq(ds->rows[2].line, 5);
    char hex[65];
    sha256_hex(text, strlen(text), hex);
    ck_assert_str_eq(ds->sha256, hex);
    PailErr err;
    ck_assert_int_eq(dataset_check_field(ds, "answer", "--reward exact_answer", &err), -1);
    ck_assert_msg(strstr(err.msg, "mem.jsonl: 1 of 3 rows lack \"answer\" as a string or a number (needed by --reward "
                                  "exact_answer): line 5"), "%s", err.msg);
    dataset_free(ds);
}
END_TEST

// The shipped task: every prompt "a+b=" with answer a+b, 0 <= a, b <= 99,
// train and eval disjoint and together all 10,000 pairs.
START_TEST(test_addition_task) {
    static unsigned char seen[100][100];
    memset(seen, 0, sizeof seen);
    const char *files[2] = {"train", "eval"};
    const int64_t want_n[2] = {9000, 1000};
    for (int f = 0; f < 2; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/data/addition/%s.jsonl", root_dir(), files[f]);
        Dataset *ds;
        PailErr err;
        ck_assert_msg(dataset_load(&ds, path, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(ds->n, want_n[f]);
        ck_assert_int_eq(dataset_check_field(ds, "answer", NULL, &err), 0);
        for (int64_t i = 0; i < ds->n; i++) {
            int a, b, used = 0;
            ck_assert_ptr_nonnull(ds->rows[i].prompt);
            ck_assert_msg(sscanf(ds->rows[i].prompt, "%d+%d=%n", &a, &b, &used) == 2 && used == (int)strlen(ds->rows[i].prompt),
                          "%s:%lld: prompt '%s'", path, (long long)ds->rows[i].line, ds->rows[i].prompt);
            ck_assert(a >= 0 && a <= 99 && b >= 0 && b <= 99);
            char want[16];
            snprintf(want, sizeof want, "%d", a + b);
            ck_assert_str_eq(json_string_value(json_object_get(ds->rows[i].fields, "answer")), want);
            ck_assert_msg(!seen[a][b], "%d+%d appears twice (train/eval overlap?)", a, b);
            seen[a][b] = 1;
        }
        dataset_free(ds);
    }
    for (int a = 0; a < 100; a++)
        for (int b = 0; b < 100; b++) ck_assert_msg(seen[a][b], "%d+%d is missing", a, b);
}
END_TEST

static Dataset *rows_dataset(int n) {
    char *text = malloc((size_t)n * 32 + 1);
    size_t len = 0;
    for (int i = 0; i < n; i++) len += (size_t)sprintf(text + len, "{\"prompt\": \"p%d\"}\n", i);
    Dataset *ds = parse_ok(text);
    free(text);
    return ds;
}

START_TEST(test_sampler_shuffle) {
    const int n = 10;
    Dataset *ds = rows_dataset(n);
    DatasetSampler a, b, c;
    PailErr err;
    ck_assert_int_eq(dataset_sampler_init(&a, ds, 42, "w0", &err), 0);
    ck_assert_int_eq(dataset_sampler_init(&b, ds, 42, "w0", &err), 0);
    ck_assert_int_eq(dataset_sampler_init(&c, ds, 42, "w1", &err), 0);
    enum { EPOCHS = 2000 };
    static int64_t seq[EPOCHS * 10];
    int pos_count[10][10] = {{0}};  // [row][position in epoch]
    int same_as_w1 = 0, same_epoch_order = 0;
    for (int e = 0; e < EPOCHS; e++) {
        int hit[10] = {0};
        for (int i = 0; i < n; i++) {
            int64_t r = dataset_sampler_next(&a);
            ck_assert_int_eq(dataset_sampler_next(&b), r);  // same seed and worker: same rows
            same_as_w1 += dataset_sampler_next(&c) == r;
            ck_assert(r >= 0 && r < n);
            hit[r]++;
            pos_count[r][i]++;
            seq[e * n + i] = r;
        }
        for (int r = 0; r < n; r++) ck_assert_msg(hit[r] == 1, "epoch %d is not a permutation", e);
        if (e > 0 && !memcmp(&seq[e * n], &seq[(e - 1) * n], (size_t)n * sizeof seq[0])) same_epoch_order++;
    }
    // Reshuffled each epoch: two epochs in a row agree with probability 1/10! each.
    ck_assert_int_le(same_epoch_order, 1);
    // Another worker's stream: agrees on a position 1 time in 10 (20,000 draws).
    ck_assert_msg(same_as_w1 > 1600 && same_as_w1 < 2400, "w0/w1 agree on %d of 20000 draws", same_as_w1);
    // Uniform positions: each (row, position) count is Binomial(2000, 0.1): mean 200, sd 13.4.
    for (int r = 0; r < n; r++)
        for (int i = 0; i < n; i++)
            ck_assert_msg(pos_count[r][i] > 130 && pos_count[r][i] < 270, "row %d at position %d: %d times", r, i, pos_count[r][i]);
    // Another seed: another order.
    DatasetSampler d;
    ck_assert_int_eq(dataset_sampler_init(&d, ds, 43, "w0", &err), 0);
    int same = 0;
    for (int i = 0; i < 1000; i++) same += dataset_sampler_next(&d) == seq[i];
    ck_assert_int_lt(same, 200);
    // Seek: a restarted worker resumes where it was.
    for (int64_t k = 0; k < 100; k += 7) {
        DatasetSampler e2;
        ck_assert_int_eq(dataset_sampler_init(&e2, ds, 42, "w0", &err), 0);
        dataset_sampler_seek(&e2, k);
        for (int i = 0; i < 25; i++) ck_assert_int_eq(dataset_sampler_next(&e2), seq[k + i]);
        dataset_sampler_free(&e2);
    }
    dataset_sampler_free(&a);
    dataset_sampler_free(&b);
    dataset_sampler_free(&c);
    dataset_sampler_free(&d);
    dataset_free(ds);
    // One row: every draw is row 0.
    ds = rows_dataset(1);
    ck_assert_int_eq(dataset_sampler_init(&a, ds, 1, "w", &err), 0);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(dataset_sampler_next(&a), 0);
    dataset_sampler_free(&a);
    dataset_free(ds);
}
END_TEST

START_TEST(test_sampler_partition) {
    const int n = 10;
    Dataset *ds = rows_dataset(n);
    PailErr err;
    for (int count = 1; count <= 10; count++) {
        int hit[10] = {0};
        for (int k = 0; k < count; k++) {
            DatasetSampler s;
            ck_assert_msg(dataset_sampler_init_partition(&s, ds, k, count, &err) == 0, "%s", err.msg);
            int m = (n - k + count - 1) / count;  // rows k, k+count, ... < n
            for (int rep = 0; rep < 3; rep++)
                for (int j = 0; j < m; j++) {
                    int64_t r = dataset_sampler_next(&s);
                    ck_assert_int_eq(r, k + j * count);
                    if (rep == 0) hit[r]++;
                }
            dataset_sampler_seek(&s, m + 1);
            ck_assert_int_eq(dataset_sampler_next(&s), m > 1 ? k + count : k);
            dataset_sampler_free(&s);
        }
        for (int r = 0; r < n; r++) ck_assert_msg(hit[r] == 1, "count %d: row %d drawn %d times", count, r, hit[r]);
    }
    DatasetSampler s;
    ck_assert_int_eq(dataset_sampler_init_partition(&s, ds, 10, 12, &err), -1);
    ck_assert_msg(strstr(err.msg, "partition 10 of 12 is empty (the dataset has 10 rows)"), "%s", err.msg);
    ck_assert_int_eq(dataset_sampler_init_partition(&s, ds, 3, 3, &err), -1);
    ck_assert_msg(strstr(err.msg, "worker index 3 of 3"), "%s", err.msg);
    ck_assert_int_eq(dataset_sampler_init_partition(&s, ds, 0, 0, &err), -1);
    ck_assert_int_eq(dataset_sampler_init_partition(&s, ds, -1, 2, &err), -1);
    dataset_free(ds);
}
END_TEST

START_TEST(test_store_url) {
    char dir[] = "/tmp/pail-dataset-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128], url[160];
    snprintf(path, sizeof path, "%s/task.jsonl", dir);
    const char *text = "{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n{\"prompt\": \"2+2=\", \"answer\": \"4\"}\n";
    PailErr err;
    ck_assert_int_eq(fs_write_file_atomic(path, text, strlen(text), &err), 0);
    Dataset *local, *remote;
    ck_assert_msg(dataset_load(&local, path, &err) == 0, "%s", err.msg);
    snprintf(url, sizeof url, "file://%s", path);
    ck_assert_msg(dataset_load(&remote, url, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(remote->n, 2);
    ck_assert_str_eq(remote->sha256, local->sha256);
    for (int i = 0; i < 2; i++) {
        ck_assert_str_eq(remote->rows[i].prompt, local->rows[i].prompt);
        ck_assert(json_equal(remote->rows[i].fields, local->rows[i].fields));
    }
    ck_assert_msg(strstr(remote->source, "task.jsonl"), "%s", remote->source);
    dataset_free(local);
    dataset_free(remote);
    // Errors through the store name the URL; a bad row names the URL and line.
    snprintf(url, sizeof url, "file://%s/missing.jsonl", dir);
    ck_assert_int_eq(dataset_load(&remote, url, &err), -1);
    ck_assert_msg(strstr(err.msg, "missing.jsonl"), "%s", err.msg);
    const char *bad = "{\"prompt\": \"ok\"}\n{\"question\": \"no prompt\"}\n";
    ck_assert_int_eq(fs_write_file_atomic(path, bad, strlen(bad), &err), 0);
    snprintf(url, sizeof url, "file://%s", path);
    ck_assert_int_eq(dataset_load(&remote, url, &err), -1);
    ck_assert_msg(strstr(err.msg, "task.jsonl:2: neither \"prompt\" nor \"messages\""), "%s", err.msg);
    // An environment program's rows: any object, through a path and a URL; a prompt
    // or messages that is there is still checked.
    ck_assert_msg(dataset_load_objects(&remote, url, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(remote->n, 2);
    ck_assert_str_eq(remote->rows[0].prompt, "ok");
    ck_assert(!remote->rows[1].prompt && !remote->rows[1].messages);
    ck_assert_str_eq(json_string_value(json_object_get(remote->rows[1].fields, "question")), "no prompt");
    dataset_free(remote);
    const char *bad2 = "{\"question\": 1}\n{\"prompt\": 7}\n";
    ck_assert_int_eq(fs_write_file_atomic(path, bad2, strlen(bad2), &err), 0);
    ck_assert_int_eq(dataset_load_objects(&remote, path, &err), -1);
    ck_assert_msg(strstr(err.msg, "task.jsonl:2: \"prompt\" is not a string"), "%s", err.msg);
    const char *bad3 = "{\"question\": 1}\n[1, 2]\n";
    ck_assert_int_eq(fs_write_file_atomic(path, bad3, strlen(bad3), &err), 0);
    ck_assert_int_eq(dataset_load_objects(&remote, path, &err), -1);
    ck_assert_msg(strstr(err.msg, "task.jsonl:2: a row must be a JSON object"), "%s", err.msg);
    ck_assert_int_eq(dataset_load(&remote, "file://relative/x.jsonl", &err), -1);
    ck_assert_msg(strstr(err.msg, "absolute path"), "%s", err.msg);
    ck_assert_int_eq(dataset_load(&remote, "http://example.com/x.jsonl", &err), -1);
    ck_assert_msg(strstr(err.msg, "use a local path, file:///abs/file.jsonl or s3://bucket/key"), "%s", err.msg);
    ck_assert_int_eq(dataset_load(&remote, "s3://bucket-only", &err), -1);
    ck_assert_msg(strstr(err.msg, "no key after the bucket"), "%s", err.msg);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_parse_errors) {
    parse_fails("", "data/x.jsonl: empty dataset");
    parse_fails("\n  \n\r\n", "data/x.jsonl: empty dataset");
    parse_fails("{\"prompt\": \"a\"}\n{\"prompt\": \"b\"\n", "data/x.jsonl:2: bad JSON at column");
    parse_fails("{\"prompt\": \"a\"}\n\n{\"question\": \"b\"}\n", "data/x.jsonl:3: neither \"prompt\" nor \"messages\"");
    parse_fails("[1, 2]\n", "data/x.jsonl:1: a row must be a JSON object");
    parse_fails("\"text\"\n", "data/x.jsonl:1:");
    parse_fails("{\"prompt\": 5}\n", "data/x.jsonl:1: \"prompt\" is not a string");
    parse_fails("{\"prompt\": \"\"}\n", "data/x.jsonl:1: \"prompt\" is empty");
    parse_fails("{\"prompt\": \"a\", \"messages\": []}\n", "data/x.jsonl:1: both \"prompt\" and \"messages\"");
    parse_fails("{\"messages\": []}\n", "data/x.jsonl:1: \"messages\" is not a non-empty array");
    parse_fails("{\"messages\": \"hi\"}\n", "\"messages\" is not a non-empty array");
    parse_fails("{\"messages\": [\"hi\"]}\n", "data/x.jsonl:1: \"messages\"[0] is not an object");
    parse_fails("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"content\": \"b\"}]}\n",
                "data/x.jsonl:1: \"messages\"[1] has no string \"role\"");
    parse_fails("{\"messages\": [{\"role\": \"user\", \"content\": 3}]}\n", "\"messages\"[0] \"content\" is not a string, a list or null");
    parse_fails("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": {}}\n", "\"tools\" is not an array");
    parse_fails("{\"prompt\": \"a\", \"prompt\": \"b\"}\n", "data/x.jsonl:1: bad JSON");  // duplicate key
    parse_fails("{\"prompt\": \"a\"} {\"prompt\": \"b\"}\n", "data/x.jsonl:1: bad JSON");  // two values on a line
    parse_fails("{\"prompt\": \"\xFF\"}\n", "data/x.jsonl:1: bad JSON");                    // invalid UTF-8
    const char nul[] = "{\"prompt\": \"a\"}\n{\"prompt\"\0: \"b\"}\n";
    Dataset *ds;
    PailErr err;
    ck_assert_int_eq(dataset_parse(&ds, nul, sizeof nul - 1, "n.jsonl", &err), -1);
    ck_assert_msg(strstr(err.msg, "n.jsonl:2: NUL byte"), "%s", err.msg);
    ck_assert_int_eq(dataset_load(&ds, "/nonexistent/dir/x.jsonl", &err), -1);
    ck_assert_msg(strstr(err.msg, "/nonexistent/dir/x.jsonl") && err.code == PAIL_ERR_NOT_FOUND, "%s", err.msg);
    ck_assert_int_eq(dataset_load(&ds, "/tmp", &err), -1);
    ck_assert_msg(strstr(err.msg, "is a directory"), "%s", err.msg);
}
END_TEST

// Every prefix of a valid file either loads (at a line boundary or a complete
// last line) or fails with a message naming the file; nothing else (ASan run).
// A field check counts every row that lacks the field (absent, null, an object)
// and lists the first misses' line numbers, then "..." when they do not all fit.
START_TEST(test_check_field) {
    Buf text = {0};
    char line[128];
    for (int i = 1; i <= 500; i++) {
        // lines 3, 7, 9 and every line from 400 on lack a usable "answer"
        if (i == 3) snprintf(line, sizeof line, "{\"prompt\": \"p%d\"}\n", i);
        else if (i == 7) snprintf(line, sizeof line, "{\"prompt\": \"p%d\", \"answer\": null}\n", i);
        else if (i == 9) snprintf(line, sizeof line, "{\"prompt\": \"p%d\", \"answer\": {\"a\": 1}}\n", i);
        else if (i >= 400) snprintf(line, sizeof line, "{\"prompt\": \"p%d\", \"solution\": \"%d\"}\n", i, i);
        else snprintf(line, sizeof line, "{\"prompt\": \"p%d\", \"answer\": %s}\n", i, i % 2 ? "\"4\"" : "4.5");
        ck_assert_int_eq(buf_append(&text, line, strlen(line)), 0);
    }
    Dataset *ds;
    PailErr err = {0};
    ck_assert_msg(dataset_parse(&ds, (char *)text.data, text.len, "data/x.jsonl", &err) == 0, "%s", err.msg);
    buf_free(&text);
    ck_assert_int_eq(dataset_check_field(ds, "answer", "--reward exact_answer", &err), -1);
    ck_assert_msg(strstr(err.msg, "data/x.jsonl: 104 of 500 rows lack \"answer\" as a string or a number (needed by "
                                  "--reward exact_answer): lines 3, 7, 9, 400, 401, "), "%s", err.msg);
    size_t n = strlen(err.msg);
    ck_assert_msg(n > 5 && !strcmp(err.msg + n - 5, ", ..."), "%s", err.msg);
    ck_assert_msg(n < 400, "one short line: %s", err.msg);
    ck_assert_int_eq(dataset_check_field(ds, "prompt", NULL, &err), 0);
    ck_assert_int_eq(dataset_check_field(ds, "solution", NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "data/x.jsonl: 399 of 500 rows lack \"solution\" as a string or a number: lines 1, 2,"),
                  "%s", err.msg);
    dataset_free(ds);
}
END_TEST

START_TEST(test_truncations) {
    const char *text =
        "{\"prompt\": \"12+34=\", \"answer\": \"46\"}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xC3\xA9?\"}], \"answer\": 4.5}\n"
        "{\"prompt\": \"x\", \"extra\": [1, {\"a\": null}]}\n";
    size_t len = strlen(text);
    int loaded = 0;
    for (size_t n = 0; n <= len; n++) {
        char *copy = malloc(n ? n : 1);  // exact size, so ASan sees any overread
        memcpy(copy, text, n);
        Dataset *ds;
        PailErr err;
        if (dataset_parse(&ds, copy, n, "t.jsonl", &err) == 0) {
            loaded++;
            ck_assert(ds->n >= 1 && ds->n <= 3);
            dataset_free(ds);
        } else {
            ck_assert_msg(!strncmp(err.msg, "t.jsonl", 7), "%s", err.msg);
        }
        free(copy);
    }
    ck_assert_int_ge(loaded, 3);  // the three line ends (+ the complete last lines before them)
}
END_TEST

int main(void) {
    Suite *s = suite_create("rollout_dataset");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_parse_rows);
    tcase_add_test(core, test_addition_task);
    tcase_add_test(core, test_sampler_shuffle);
    tcase_add_test(core, test_sampler_partition);
    tcase_add_test(core, test_store_url);
    tcase_add_test(limits, test_parse_errors);
    tcase_add_test(limits, test_truncations);
    tcase_add_test(limits, test_check_field);
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
