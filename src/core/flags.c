// Long-flag parser (see flags.h). Defaults live in each tool's flag table, the
// one place they are written.
#include "core/flags.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int parse_long(const char *s, long min, long max, long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int parse_double(const char *s, double min, double max, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < min || v > max) return -1;
    *out = v;
    return 0;
}

static const Flag *find_flag(const Flag *fl, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(fl[i].name) == len && !strncmp(fl[i].name, name, len)) return &fl[i];
    return NULL;
}

// Edit distance between a and b (insert, delete, substitute, swap of two
// neighbours: "temprature", "temperture", "tmeperature" are all 1 from
// "temperature"); stops counting at cap.
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb, size_t cap) {
    if (la > 64 || lb > 64) return cap;
    size_t d[66][66];
    for (size_t i = 0; i <= la; i++) d[i][0] = i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb] < cap ? d[la][lb] : cap;
}

const char *flags_closest(const char *word, size_t len, const char *const *names, size_t stride, int n) {
    const char *best = NULL, *prefixed = NULL;
    size_t best_d = len <= 4 ? 2 : len / 3 + 1;  // a near miss: at most a third of the word (1 for short ones)
    int nprefixed = 0;
    for (int i = 0; i < n; i++) {
        const char *name = *(const char *const *)((const char *)names + (size_t)i * stride);
        size_t ln = strlen(name);
        if (len >= 3 && ln > len && !strncmp(name, word, len)) { prefixed = name; nprefixed++; }
        size_t d = edit_distance(word, len, name, ln, best_d);
        if (d < best_d) { best_d = d; best = name; }
    }
    if (best) return best;
    return nprefixed == 1 ? prefixed : NULL;  // "--temp": the one flag it begins
}

// Other trainers' names for pail's flags (TRL's GRPOConfig, as --kebab-case or
// --snake_case): an unknown one is answered with the flag meant here, when the
// tool has it, and how the meaning differs.
static const struct { const char *theirs, *ours, *note; } CONVENTIONS[] = {
    {"num-generations", "group-size", ""},
    {"learning-rate", "lr", ""},
    {"max-completion-length", "max-new-tokens", ""},
    {"max-prompt-length", "max-prompt-tokens", ""},
    {"per-device-train-batch-size", "groups-per-step",
     " (pail counts prompt groups of --group-size completions: TRL's batch size / num_generations)"},
    {"max-steps", "steps", ""},
    {"lr-scheduler-type", "lr-schedule", ""},
    {"loss-type", "loss", ""},
    {"importance-sampling-level", "ratio", ""},
    {"reward-funcs", "reward", ""},
    {"gradient-checkpointing", "recompute", ""},
    {"lora-r", "lora-rank", ""},
    {"lora-target-modules", "lora-targets", ""},
    {"epsilon", "epsilon-low", " (and --epsilon-high)"},
};

// "TRL's --num-generations is --group-size here" into out, or 0 when name is
// none of CONVENTIONS or the tool has no such flag.
static int convention_hint(const Flag *fl, int n, const char *name, size_t len, char *out, size_t cap) {
    char k[64];
    if (len >= sizeof k) return 0;
    for (size_t i = 0; i < len; i++) k[i] = name[i] == '_' ? '-' : name[i];
    k[len] = 0;
    for (size_t i = 0; i < sizeof CONVENTIONS / sizeof CONVENTIONS[0]; i++)
        if (!strcmp(k, CONVENTIONS[i].theirs) && find_flag(fl, n, CONVENTIONS[i].ours, strlen(CONVENTIONS[i].ours))) {
            snprintf(out, cap, "TRL's --%s is --%s here%s", CONVENTIONS[i].theirs, CONVENTIONS[i].ours, CONVENTIONS[i].note);
            return 1;
        }
    return 0;
}

static int list_push(FlagList *l, const char *v) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        char **items = realloc(l->items, cap * sizeof *items);
        if (!items) return -1;
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n] = strdup(v);
    return l->items[l->n++] ? 0 : -1;
}

static int set_value(const Flag *f, const char *v, const char *where, PailErr *err) {
    switch (f->type) {
    case FLAG_BOOL:
        if (!v || !strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) *(bool *)f->dst = true;
        else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) *(bool *)f->dst = false;
        else return err_set(err, PAIL_ERR_INVALID, "%s--%s: '%s' is not true or false", where, f->name, v);
        return 0;
    case FLAG_INT: {
        long mn = f->min <= f->max ? (long)f->min : -__LONG_MAX__ - 1;
        long mx = f->min <= f->max ? (long)f->max : __LONG_MAX__;
        if (parse_long(v, mn, mx, (long *)f->dst) < 0) {
            if (f->min <= f->max)
                return err_set(err, PAIL_ERR_INVALID, "%s--%s: '%s' is not an integer in [%ld, %ld]",
                               where, f->name, v ? v : "", mn, mx);
            return err_set(err, PAIL_ERR_INVALID, "%s--%s: '%s' is not an integer", where, f->name,
                           v ? v : "");
        }
        return 0;
    }
    case FLAG_DOUBLE: {
        double mn = f->min <= f->max ? f->min : -INFINITY;
        double mx = f->min <= f->max ? f->max : INFINITY;
        if (parse_double(v, mn, mx, (double *)f->dst) < 0) {
            if (f->min <= f->max)
                return err_set(err, PAIL_ERR_INVALID, "%s--%s: '%s' is not a number in [%g, %g]",
                               where, f->name, v ? v : "", mn, mx);
            return err_set(err, PAIL_ERR_INVALID, "%s--%s: '%s' is not a number", where, f->name,
                           v ? v : "");
        }
        return 0;
    }
    case FLAG_STRING: {
        char **dst = f->dst;
        free(*dst);
        *dst = v ? strdup(v) : NULL;
        return 0;
    }
    case FLAG_LIST:
        if (list_push(f->dst, v) < 0) return err_set(err, PAIL_ERR_NOMEM, "out of memory");
        return 0;
    }
    return 0;
}

static void list_clear(FlagList *l) {
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

static int set_defaults(const Flag *fl, int n, PailErr *err) {
    for (int i = 0; i < n; i++) {
        const Flag *f = &fl[i];
        if (f->type == FLAG_LIST) {
            list_clear(f->dst);
            if (f->def && *f->def) {  // comma-separated default items
                char *copy = strdup(f->def), *save = NULL;
                for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
                    list_push(f->dst, t);
                free(copy);
            }
        } else if (f->type == FLAG_STRING) {
            *(char **)f->dst = NULL;
            if (f->def && set_value(f, f->def, "default ", err) < 0) return -1;
        } else if (f->type == FLAG_BOOL) {
            *(bool *)f->dst = f->def && !strcmp(f->def, "true");
        } else if (f->def && set_value(f, f->def, "default ", err) < 0) {
            return -1;
        }
    }
    return 0;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static int load_config(const Flag *fl, int n, const char *path, PailErr *err) {
    FILE *f = fopen(path, "r");
    if (!f) return err_set(err, PAIL_ERR_NOT_FOUND, "--config %s: %s", path, strerror(errno));
    char line[4096];
    int lineno = 0, rc = 0;
    bool list_reset[256] = {0};
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = err_set(err, PAIL_ERR_INVALID, "config %s:%d: expected 'key = value'", path, lineno);
            break;
        }
        *eq = 0;
        char *key = trim(s), *val = trim(eq + 1);
        for (char *p = key; *p; p++) if (*p == '_') *p = '-';
        const Flag *fg = find_flag(fl, n, key, strlen(key));
        char hint[256];
        if (!fg && convention_hint(fl, n, key, strlen(key), hint, sizeof hint)) {
            rc = err_set(err, PAIL_ERR_INVALID, "config %s:%d: unknown key '%s': %s", path, lineno, key, hint);
            break;
        }
        if (!fg || !strcmp(key, "config") || !strcmp(key, "help")) {
            const char *near = fg ? NULL : flags_closest(key, strlen(key), &fl[0].name, sizeof fl[0], n);
            if (near) rc = err_set(err, PAIL_ERR_INVALID, "config %s:%d: unknown key '%s': did you mean %s?", path, lineno, key, near);
            else rc = err_set(err, PAIL_ERR_INVALID, "config %s:%d: unknown key '%s'", path, lineno, key);
            break;
        }
        if (fg->type == FLAG_LIST && !list_reset[fg - fl]) {  // a list in the file replaces the default
            list_clear(fg->dst);
            list_reset[fg - fl] = true;
        }
        char where[512];
        snprintf(where, sizeof where, "config %s:%d: ", path, lineno);
        if (set_value(fg, val, where, err) < 0) { rc = -1; break; }
    }
    fclose(f);
    return rc;
}

int flags_parse(const Flag *fl, int n, int argc, char **argv, char ***positional, int *npos,
                PailErr *err) {
    if (n > 256) return err_set(err, PAIL_ERR_INVALID, "too many flags");
    if (set_defaults(fl, n, err) < 0) return -1;
    char **pos = calloc(argc + 1, sizeof *pos);
    int np = 0;
    bool list_reset[256] = {0};
    const Flag *cfg = find_flag(fl, n, "config", 6);
    // Pass 1: --help and --config, so the command line can override the file.
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { free(pos); return FLAGS_HELP; }
        if (cfg && !strncmp(argv[i], "--config", 8) && (argv[i][8] == 0 || argv[i][8] == '=')) {
            const char *path = argv[i][8] == '=' ? argv[i] + 9 : (i + 1 < argc ? argv[i + 1] : NULL);
            if (!path) { free(pos); return err_set(err, PAIL_ERR_INVALID, "--config needs a file"); }
            if (load_config(fl, n, path, err) < 0) { free(pos); return -1; }
            // lists given in the file are replaced again by the command line
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            while (++i < argc) pos[np++] = argv[i];
            break;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == 0) {
            if (a[0] == '-' && a[1] != 0) {
                free(pos);
                return err_set(err, PAIL_ERR_INVALID, "unknown flag '%s' (flags are long: --name)", a);
            }
            pos[np++] = argv[i];
            continue;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const Flag *f = find_flag(fl, n, name, len);
        const char *val = eq ? eq + 1 : NULL;
        if (!f && len > 3 && !strncmp(name, "no-", 3) && !eq) {
            f = find_flag(fl, n, name + 3, len - 3);
            if (f && f->type == FLAG_BOOL) { *(bool *)f->dst = false; continue; }
            f = NULL;
        }
        if (!f) {
            free(pos);
            char hint[256];
            if (convention_hint(fl, n, name, len, hint, sizeof hint))
                return err_set(err, PAIL_ERR_INVALID, "unknown flag '--%.*s': %s", (int)len, name, hint);
            const char *near = flags_closest(name, len, &fl[0].name, sizeof fl[0], n);
            if (near) return err_set(err, PAIL_ERR_INVALID, "unknown flag '--%.*s': did you mean --%s?", (int)len, name, near);
            return err_set(err, PAIL_ERR_INVALID, "unknown flag '--%.*s' (see --help)", (int)len, name);
        }
        if (f->type != FLAG_BOOL && !val) {
            if (i + 1 >= argc) {
                free(pos);
                return err_set(err, PAIL_ERR_INVALID, "--%s needs a value", f->name);
            }
            val = argv[++i];
        }
        if (cfg && f == cfg) continue;
        if (f->type == FLAG_LIST && !list_reset[f - fl]) {
            list_clear(f->dst);
            list_reset[f - fl] = true;
        }
        if (set_value(f, val, "", err) < 0) { free(pos); return -1; }
    }
    if (positional) *positional = pos; else free(pos);
    if (npos) *npos = np;
    return FLAGS_OK;
}

static const char *type_meta(FlagType t) {
    switch (t) {
    case FLAG_INT: return " N";
    case FLAG_DOUBLE: return " X";
    case FLAG_STRING: return " S";
    case FLAG_LIST: return " S";
    default: return "";
    }
}

void flags_usage(FILE *out, const char *usage_line, const char *about, const Flag *fl, int n) {
    fprintf(out, "usage: %s\n", usage_line);
    if (about && *about) fprintf(out, "\n%s\n", about);
    fprintf(out, "\nflags:\n");
    for (int i = 0; i < n; i++) {
        char left[96];
        snprintf(left, sizeof left, "--%s%s", fl[i].name, type_meta(fl[i].type));
        fprintf(out, "  %-26s %s", left, fl[i].help ? fl[i].help : "");
        if (fl[i].type == FLAG_BOOL) fprintf(out, " (default: %s)", fl[i].def ? fl[i].def : "false");
        else if (fl[i].def) fprintf(out, " (default: %s)", fl[i].def);
        if (fl[i].type == FLAG_LIST) fprintf(out, " [repeatable]");
        if ((fl[i].type == FLAG_INT || fl[i].type == FLAG_DOUBLE) && fl[i].min <= fl[i].max)
            fprintf(out, " [%g..%g]", fl[i].min, fl[i].max);
        fputc('\n', out);
    }
    fprintf(out, "  %-26s %s\n", "--help", "print this help and exit");
}

void flags_print(FILE *out, const Flag *fl, int n) {
    for (int i = 0; i < n; i++) {
        const Flag *f = &fl[i];
        if (!strcmp(f->name, "config")) continue;
        fprintf(out, "  %s = ", f->name);
        switch (f->type) {
        case FLAG_BOOL: fprintf(out, "%s", *(bool *)f->dst ? "true" : "false"); break;
        case FLAG_INT: fprintf(out, "%ld", *(long *)f->dst); break;
        case FLAG_DOUBLE:  // a number without a default, not given, is NaN: shown empty, as an unset string
            if (!isnan(*(double *)f->dst)) fprintf(out, "%g", *(double *)f->dst);
            break;
        case FLAG_STRING: fprintf(out, "%s", *(char **)f->dst ? *(char **)f->dst : ""); break;
        case FLAG_LIST: {
            FlagList *l = f->dst;
            for (int j = 0; j < l->n; j++) fprintf(out, "%s%s", j ? "," : "", l->items[j]);
            break;
        }
        }
        fputc('\n', out);
    }
}

void flags_free(const Flag *fl, int n) {
    for (int i = 0; i < n; i++) {
        if (fl[i].type == FLAG_STRING) {
            free(*(char **)fl[i].dst);
            *(char **)fl[i].dst = NULL;
        } else if (fl[i].type == FLAG_LIST) {
            list_clear(fl[i].dst);
        }
    }
}

int flags_cli(const char *prog, const char *usage_line, const char *about, const Flag *fl, int n,
              int argc, char **argv, char ***positional, int *npos) {
    PailErr err = {0};
    int rc = flags_parse(fl, n, argc, argv, positional, npos, &err);
    if (rc == FLAGS_HELP) {
        flags_usage(stdout, usage_line, about, fl, n);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "%s: %s\nusage: %s (see --help)\n", prog, err.msg, usage_line);
        return 2;
    }
    return -1;
}

bool flags_given(int argc, char **argv, const char *name) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) break;
        if (a[0] == '-' && a[1] == '-' && !strncmp(a + 2, name, n) && (a[2 + n] == 0 || a[2 + n] == '=')) return true;
    }
    return false;
}
