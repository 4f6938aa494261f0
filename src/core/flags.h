// Table-driven long-flag parser shared by every executable: `--name value`,
// `--name=value`, booleans as `--name` / `--name=false`, repeatable lists,
// ranges checked (no silent clamping), `--config FILE` of `key = value` lines
// where the command line wins, `--help` listing every flag with its default.
#pragma once
#include <stdbool.h>
#include <stdio.h>
#include "core/err.h"

typedef enum { FLAG_BOOL, FLAG_INT, FLAG_DOUBLE, FLAG_STRING, FLAG_LIST } FlagType;

typedef struct {
    char **items;  // owned
    int n, cap;
} FlagList;

typedef struct {
    const char *name;    // long name without "--"
    FlagType type;
    void *dst;           // bool*, long*, double*, char** (owned copy), FlagList*
    const char *def;     // default as text, NULL for none (strings: NULL pointer)
    double min, max;     // inclusive range for INT/DOUBLE; ignored when min > max
    const char *help;
} Flag;

enum { FLAGS_OK = 0, FLAGS_HELP = 1 };

// Sets defaults, reads --config FILE (when the table has a "config" flag), then
// argv. Non-flag arguments are collected into positional (pointers into argv,
// caller frees the array). Returns FLAGS_OK, FLAGS_HELP (usage printed to
// stdout), or -1 with err set (usage error: caller exits 2).
int flags_parse(const Flag *fl, int n, int argc, char **argv, char ***positional, int *npos,
                PailErr *err);
void flags_usage(FILE *out, const char *usage_line, const char *about, const Flag *fl, int n);
// flags_parse for a tool's command line, with the answers every tool gives:
// --help prints the usage to stdout and returns 0; a bad flag prints
// "prog: message" and the usage line to stderr and returns 2 (the exit status);
// otherwise -1: go on. positional / npos may be NULL as for flags_parse.
int flags_cli(const char *prog, const char *usage_line, const char *about, const Flag *fl, int n,
              int argc, char **argv, char ***positional, int *npos);
// "name = value" for every flag: the effective configuration, for logs.
void flags_print(FILE *out, const Flag *fl, int n);
// The name a mistyped word most likely meant: the nearest of n names (each a
// const char * at names + i*stride, so a table's .name field can be passed)
// within a small edit distance, else the one name word begins (3+ chars);
// NULL when none is close. Used for "did you mean --temperature?".
const char *flags_closest(const char *word, size_t len, const char *const *names, size_t stride, int n);

// Whether argv (before any "--") gives --name (as --name, --name=V or --name V).
bool flags_given(int argc, char **argv, const char *name);
void flags_free(const Flag *fl, int n);
// Parses a whole decimal integer / float with range check; -1 on bad text.
int parse_long(const char *s, long min, long max, long *out);
int parse_double(const char *s, double min, double max, double *out);
