// grpo-ctl put / get / ls / stat / rm over any store URL, and the store flags
// and URL splitting that every store-facing subcommand shares.
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/log.h"
#include "ctl/ctl.h"
#include "model/model_path.h"
#include "store/versions.h"

void ctl_store_flags(Flag *out, CtlStoreFlags *d) {
    Flag f[CTL_STORE_NFLAGS] = {
        STORE_CLI_FLAGS(&d->s),
        {"addressing", FLAG_STRING, &d->addressing, "auto", 1, 0,
         "s3 bucket addressing: auto, path or virtual"},
    };
    memcpy(out, f, sizeof f);
}

StoreOptions ctl_store_options(const CtlStoreFlags *sf) { return store_cli_options(&sf->s); }

int ctl_parse(const char *usage, const char *about, Flag *fl, int n, int argc, char **argv, char ***pos,
              int *npos) {
    int rc = flags_cli(argv[0], usage, about, fl, n, argc, argv, pos, npos);
    if (rc >= 0) return rc;
    for (int i = 0; i < n; i++)  // every subcommand's --model names its folder by one rule (model_path.h)
        if (!strcmp(fl[i].name, "model") && fl[i].type == FLAG_STRING && *(char **)fl[i].dst &&
            model_path_cli(argv[0], (char **)fl[i].dst) != 0) {
            if (pos) {
                free(*pos);
                *pos = NULL;
            }
            return 1;
        }
    return -1;
}

int ctl_open_url(const char *url, const CtlStoreFlags *sf, Store **st, char *key, size_t keycap,
                 PailErr *err) {
    char root[STORE_MAX_KEY + 64];
    const char *k;
    if (store_split_url(url, root, sizeof root, &k, err) < 0) return -1;
    if (strlen(k) >= keycap) return err_set(err, PAIL_ERR_INVALID, "URL '%s': key too long", url);
    snprintf(key, keycap, "%s", k);
    StoreOptions opt = ctl_store_options(sf);
    if (sf->addressing && !strcmp(sf->addressing, "path")) opt.addressing = 1;
    else if (sf->addressing && !strcmp(sf->addressing, "virtual")) opt.addressing = 2;
    else if (sf->addressing && strcmp(sf->addressing, "auto"))
        return err_set(err, PAIL_ERR_INVALID, "--addressing '%s': use auto, path or virtual", sf->addressing);
    return store_open(st, root, &opt, err);
}

// The URL of a key in the store that `url` was split from.
static void key_url(const char *url, const char *key, char *out, size_t cap) {
    if (!strncmp(url, "file://", 7)) snprintf(out, cap, "file:///%s", key);
    else {
        const char *slash = strchr(url + 5, '/');
        int n = slash ? (int)(slash - url) : (int)strlen(url);
        snprintf(out, cap, "%.*s/%s", n, url, key);
    }
}

static int fail(const char *prog, const PailErr *err) {
    fprintf(stderr, "%s: %s\n", prog, err->msg);
    return err->code == PAIL_ERR_INVALID && strstr(err->msg, "URL '") ? 2 : 1;
}

static bool is_url(const char *s) { return !strncmp(s, "file://", 7) || !strncmp(s, "s3://", 5); }

// put takes URL FILE; FILE URL (aws s3 cp's order) is swapped when it is
// unambiguous: exactly one argument is a URL and the other an existing local
// path or "-". Otherwise says which order it wants.
static int put_order(const char *prog, char **pos) {
    struct stat sb;
    bool u0 = is_url(pos[0]), u1 = is_url(pos[1]);
    bool local0 = !strcmp(pos[0], "-") || stat(pos[0], &sb) == 0;
    if (u0 && !u1) return 0;
    if (u1 && !u0 && local0) {
        char *t = pos[0];
        pos[0] = pos[1];
        pos[1] = t;
        return 0;
    }
    if (u0 && u1)
        fprintf(stderr, "%s: '%s' and '%s' are both URLs: put uploads a local FILE to a URL (grpo-ctl put URL FILE)\n",
                prog, pos[0], pos[1]);
    else if (u1)
        fprintf(stderr, "%s: FILE '%s' does not exist (grpo-ctl put URL FILE, or FILE URL)\n", prog, pos[0]);
    else
        fprintf(stderr, "%s: neither '%s' nor '%s' is a file:///abs/dir/key or s3://bucket/key URL "
                "(grpo-ctl put URL FILE, or FILE URL)\n", prog, pos[0], pos[1]);
    return -1;
}

int ctl_put(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    bool create_only = false, versioned = false;
    FlagList metas = {0};
    char *content_type = NULL;
    Flag fl[CTL_STORE_NFLAGS + 4] = {
        {"create-only", FLAG_BOOL, &create_only, "false", 1, 0, "fail if the key exists (If-None-Match: *)"},
        {"versioned", FLAG_BOOL, &versioned, "false", 1, 0,
         "publish as a pail versioned object: create-only with x-amz-meta-pail-sha256"},
        {"meta", FLAG_LIST, &metas, NULL, 1, 0, "user metadata NAME=VALUE (x-amz-meta-NAME)"},
        {"content-type", FLAG_STRING, &content_type, NULL, 1, 0, "Content-Type of the object"},
    };
    ctl_store_flags(fl + 4, &sf);
    int n = CTL_STORE_NFLAGS + 4;
    char **pos = NULL;
    int npos = 0, rc;
    const char *usage = "grpo-ctl put [flags] URL FILE|-   (or FILE URL, as aws s3 cp)";
    if ((rc = ctl_parse(usage, "Uploads a local file to URL (multipart above 16 MiB on s3). The two arguments may "
                        "come in either order when exactly one is a file:// or s3:// URL.", fl, n, argc, argv,
                        &pos, &npos)) >= 0)
        goto out;
    rc = 2;
    if (npos != 2) {
        fprintf(stderr, "%s: expected URL and FILE\nusage: %s\n", argv[0], usage);
        goto out;
    }
    if (put_order(argv[0], pos) < 0) goto out;
    StoreMeta meta[STORE_MAX_META];
    if (metas.n > STORE_MAX_META - 1) {
        fprintf(stderr, "%s: at most %d --meta\n", argv[0], STORE_MAX_META - 1);
        goto out;
    }
    for (int i = 0; i < metas.n; i++) {
        char *eq = strchr(metas.items[i], '=');
        if (!eq || eq == metas.items[i]) {
            fprintf(stderr, "%s: --meta '%s': expected NAME=VALUE\n", argv[0], metas.items[i]);
            goto out;
        }
        snprintf(meta[i].name, sizeof meta[i].name, "%.*s", (int)(eq - metas.items[i]), metas.items[i]);
        snprintf(meta[i].value, sizeof meta[i].value, "%s", eq + 1);
    }
    PailErr err = {0};
    Store *st = NULL;
    char key[STORE_MAX_KEY + 1];
    if (ctl_open_url(pos[0], &sf, &st, key, sizeof key, &err) < 0) { rc = fail(argv[0], &err); goto out; }
    struct stat sb;
    const char *src = pos[1];
    bool stream = !strcmp(src, "-") || (stat(src, &sb) == 0 && !S_ISREG(sb.st_mode));
    StorePutOpts opt = {.create_only = create_only, .nmeta = metas.n, .meta = meta, .content_type = content_type};
    if (stream) {  // stdin ("-"), /dev/null, a pipe: read it whole, then one put
        Buf body = {0};
        rc = fs_read_file(strcmp(src, "-") ? src : "/dev/stdin", &body, &err);
        if (rc == 0)
            rc = versioned ? versioned_put(st, key, body.data, body.len, &err)
                           : store_put(st, key, body.data, body.len, &opt, &err);
        buf_free(&body);
    } else if (versioned) {
        rc = versioned_put_file(st, key, src, &err);
    } else {
        rc = store_put_file(st, key, src, &opt, &err);
    }
    rc = rc < 0 ? fail(argv[0], &err) : 0;
    store_close(st);
out:
    free(pos);
    flags_free(fl, n);
    return rc;
}

int ctl_get(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    bool verify = false;
    char *range = NULL;
    Flag fl[CTL_STORE_NFLAGS + 2] = {
        {"verify", FLAG_BOOL, &verify, "false", 1, 0, "check size and x-amz-meta-pail-sha256 (versioned objects)"},
        {"range", FLAG_STRING, &range, NULL, 1, 0, "bytes START-END (inclusive), to stdout or FILE"},
    };
    ctl_store_flags(fl + 2, &sf);
    int n = CTL_STORE_NFLAGS + 2;
    char **pos = NULL;
    int npos = 0, rc;
    const char *usage = "grpo-ctl get [flags] URL [FILE|-]";
    if ((rc = ctl_parse(usage, "Downloads URL to FILE (written atomically) or to stdout (- or no FILE).", fl, n,
                        argc, argv, &pos, &npos)) >= 0)
        goto out;
    rc = 2;
    if (npos < 1 || npos > 2) {
        fprintf(stderr, "%s: expected URL [FILE|-]\nusage: %s\n", argv[0], usage);
        goto out;
    }
    StoreGetOpts gopt = {.range_end = -1};
    if (range) {
        long long a, b;
        char tail;
        if (sscanf(range, "%lld-%lld%c", &a, &b, &tail) != 2 || a < 0 || b < a) {
            fprintf(stderr, "%s: --range '%s': expected START-END with 0 <= START <= END\n", argv[0], range);
            goto out;
        }
        gopt.range_start = a;
        gopt.range_end = b;
    }
    PailErr err = {0};
    Store *st = NULL;
    char key[STORE_MAX_KEY + 1];
    if (ctl_open_url(pos[0], &sf, &st, key, sizeof key, &err) < 0) { rc = fail(argv[0], &err); goto out; }
    const char *dst = npos == 2 ? pos[1] : "-";
    if (strcmp(dst, "-") && !range) {
        rc = verify ? versioned_get_file(st, key, dst, &err) : store_get_file(st, key, dst, NULL, &err);
    } else {
        Buf b = {0};
        rc = verify && !range ? versioned_get(st, key, &b, &err) : store_get(st, key, &b, &gopt, NULL, &err);
        if (rc == 0) {
            FILE *f = strcmp(dst, "-") ? fopen(dst, "wb") : stdout;
            if (!f || fwrite(b.data, 1, b.len, f) != b.len || (f != stdout && fclose(f) != 0) ||
                (f == stdout && fflush(stdout) != 0))
                rc = err_set(&err, PAIL_ERR_IO, "%s: write failed: %s", dst, strerror(errno));
        }
        buf_free(&b);
    }
    rc = rc < 0 ? fail(argv[0], &err) : 0;
    store_close(st);
out:
    free(pos);
    flags_free(fl, n);
    return rc;
}

int ctl_ls(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    bool recursive = false, keys_only = false;
    Flag fl[CTL_STORE_NFLAGS + 2] = {
        {"recursive", FLAG_BOOL, &recursive, "false", 1, 0, "list every key under URL (no folder grouping)"},
        {"keys", FLAG_BOOL, &keys_only, "false", 1, 0, "print only the URLs"},
    };
    ctl_store_flags(fl + 2, &sf);
    int n = CTL_STORE_NFLAGS + 2;
    char **pos = NULL;
    int npos = 0, rc;
    const char *usage = "grpo-ctl ls [flags] URL";
    if ((rc = ctl_parse(usage, "Lists keys under the prefix URL: size, mtime (UTC), URL; folders as PRE URL/.", fl,
                        n, argc, argv, &pos, &npos)) >= 0)
        goto out;
    rc = 2;
    if (npos != 1) {
        fprintf(stderr, "%s: expected one URL\nusage: %s\n", argv[0], usage);
        goto out;
    }
    PailErr err = {0};
    Store *st = NULL;
    char key[STORE_MAX_KEY + 1];
    if (ctl_open_url(pos[0], &sf, &st, key, sizeof key, &err) < 0) { rc = fail(argv[0], &err); goto out; }
    StoreList l = {0};
    char token[sizeof l.next_token] = "";
    rc = 0;
    for (;;) {
        StoreListOpts o = {.prefix = key, .delimiter = recursive ? NULL : "/",
                           .continuation = token[0] ? token : NULL};
        if (store_list(st, &o, &l, &err) < 0) { rc = fail(argv[0], &err); break; }
        char u[STORE_MAX_KEY + 300];
        for (int i = 0; i < l.nprefixes; i++) {
            key_url(pos[0], l.prefixes[i], u, sizeof u);
            if (keys_only) printf("%s\n", u);
            else printf("%12s  %20s  %s\n", "PRE", "", u);
        }
        for (int i = 0; i < l.n; i++) {
            key_url(pos[0], l.entries[i].key, u, sizeof u);
            if (keys_only) { printf("%s\n", u); continue; }
            char ts[32];
            time_t t = (time_t)l.entries[i].mtime;
            struct tm tm;
            gmtime_r(&t, &tm);
            strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
            printf("%12llu  %20s  %s\n", (unsigned long long)l.entries[i].size, ts, u);
        }
        if (!l.truncated || !l.next_token[0]) break;
        snprintf(token, sizeof token, "%s", l.next_token);
    }
    store_list_free(&l);
    store_close(st);
out:
    free(pos);
    flags_free(fl, n);
    return rc;
}

int ctl_stat(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    Flag fl[CTL_STORE_NFLAGS];
    ctl_store_flags(fl, &sf);
    int n = CTL_STORE_NFLAGS;
    char **pos = NULL;
    int npos = 0, rc;
    const char *usage = "grpo-ctl stat [flags] URL";
    if ((rc = ctl_parse(usage, "Prints size, etag, mtime and user metadata of URL as JSON.", fl, n, argc, argv,
                        &pos, &npos)) >= 0)
        goto out;
    rc = 2;
    if (npos != 1) {
        fprintf(stderr, "%s: expected one URL\nusage: %s\n", argv[0], usage);
        goto out;
    }
    PailErr err = {0};
    Store *st = NULL;
    char key[STORE_MAX_KEY + 1];
    StoreStat ss;
    if (ctl_open_url(pos[0], &sf, &st, key, sizeof key, &err) < 0) { rc = fail(argv[0], &err); goto out; }
    if (store_head(st, key, &ss, &err) < 0) {
        rc = fail(argv[0], &err);
    } else {
        json_t *j = json_pack("{s:s, s:I, s:s, s:I}", "url", pos[0], "size", (json_int_t)ss.size, "etag",
                              ss.etag, "mtime", (json_int_t)ss.mtime);
        json_t *meta = json_object();
        for (int i = 0; i < ss.nmeta; i++) json_object_set_new(meta, ss.meta[i].name, json_string(ss.meta[i].value));
        json_object_set_new(j, "meta", meta);
        char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        printf("%s\n", text);
        free(text);
        json_decref(j);
        rc = 0;
    }
    store_close(st);
out:
    free(pos);
    flags_free(fl, n);
    return rc;
}

int ctl_rm(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    bool force = false;
    Flag fl[CTL_STORE_NFLAGS + 1] = {
        {"force", FLAG_BOOL, &force, "false", 1, 0, "succeed when the key does not exist"},
    };
    ctl_store_flags(fl + 1, &sf);
    int n = CTL_STORE_NFLAGS + 1;
    char **pos = NULL;
    int npos = 0, rc;
    const char *usage = "grpo-ctl rm [flags] URL";
    if ((rc = ctl_parse(usage, "Deletes the object at URL.", fl, n, argc, argv, &pos, &npos)) >= 0) goto out;
    rc = 2;
    if (npos != 1) {
        fprintf(stderr, "%s: expected one URL\nusage: %s\n", argv[0], usage);
        goto out;
    }
    PailErr err = {0};
    Store *st = NULL;
    char key[STORE_MAX_KEY + 1];
    if (ctl_open_url(pos[0], &sf, &st, key, sizeof key, &err) < 0) { rc = fail(argv[0], &err); goto out; }
    StoreStat ss;
    if (!force && store_head(st, key, &ss, &err) < 0) rc = fail(argv[0], &err);
    else rc = store_delete(st, key, &err) < 0 ? fail(argv[0], &err) : 0;
    store_close(st);
out:
    free(pos);
    flags_free(fl, n);
    return rc;
}
