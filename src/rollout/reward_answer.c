// Final-answer extraction and comparison for the exact_answer reward (see
// reward_answer.h). Works on (pointer, length) spans of the completion text; the
// only allocation is the string comparison's copies. Numbers as models write them:
// "1,000", "-3.5", "1e3", "$5", "50%".
#include "rollout/reward_answer.h"
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static void trim(const char **s, size_t *len) {
    while (*len && is_space(**s)) { (*s)++; (*len)--; }
    while (*len && is_space((*s)[*len - 1])) (*len)--;
}

static bool starts(const char *s, size_t len, const char *lit) {
    size_t n = strlen(lit);
    return len >= n && !memcmp(s, lit, n);
}

// Length of the number token at s[0..len) (0 when none): [sign] digits [,ddd]* [.digits]
// [e[sign]digits], or [sign] .digits. Thousands groups need a first group of 1-3
// digits and exactly 3 digits after each comma, so "1,2,3" is three numbers.
static size_t number_token(const char *s, size_t len) {
    size_t i = 0;
    if (i < len && (s[i] == '-' || s[i] == '+')) i++;
    size_t d0 = i;
    while (i < len && is_digit(s[i])) i++;
    size_t g = i - d0;
    if (g >= 1 && g <= 3) {
        while (i + 3 < len && s[i] == ',' && is_digit(s[i + 1]) && is_digit(s[i + 2]) && is_digit(s[i + 3]) &&
               !(i + 4 < len && is_digit(s[i + 4])))
            i += 4;
    }
    if (i < len && s[i] == '.' && i + 1 < len && is_digit(s[i + 1])) {
        i++;
        while (i < len && is_digit(s[i])) i++;
    } else if (g == 0) {
        return 0;  // a sign or a '.' without digits
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < len && (s[j] == '-' || s[j] == '+')) j++;
        if (j < len && is_digit(s[j])) {
            while (j < len && is_digit(s[j])) j++;
            // "2e3" is an exponent, "2eggs"/"2e3x" are not
            if (!(j < len && isalpha((unsigned char)s[j]))) i = j;
        }
    }
    return i;
}

bool reward_number_parse(const char *s, size_t len, RewardNumber *out) {
    char tmp[160];
    size_t n = 0;
    trim(&s, &len);
    // Strip what decorates a number but is not part of it; LaTeX "{,}" becomes ",".
    for (size_t i = 0; i < len;) {
        if (starts(s + i, len - i, "{,}")) { if (n + 1 >= sizeof tmp) return false; tmp[n++] = ','; i += 3; continue; }
        if (starts(s + i, len - i, "\\$") || starts(s + i, len - i, "\\%") || starts(s + i, len - i, "\\,") ||
            starts(s + i, len - i, "\\!")) { i += 2; continue; }
        if (s[i] == '$') { i++; continue; }
        if (n + 1 >= sizeof tmp) return false;
        tmp[n++] = s[i++];
    }
    tmp[n] = 0;
    const char *t = tmp;
    trim(&t, &n);
    if (n && t[n - 1] == '%') { n--; trim(&t, &n); }
    if (n && t[n - 1] == '.') n--;  // end of a sentence: "is 42."
    if (n >= 3 && !memcmp(t, "\xE2\x88\x92", 3)) {  // U+2212 MINUS SIGN
        memmove(tmp, "-", 1);
        memmove(tmp + 1, t + 3, n - 3);
        t = tmp;
        n -= 2;
    }
    if (!n || number_token(t, n) != n) return false;
    // Canonical text without separators, for strtod and the integer digits.
    char canon[160];
    size_t m = 0;
    bool integer = true;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == ',') continue;
        if (t[i] == '.' || t[i] == 'e' || t[i] == 'E') integer = false;
        canon[m++] = t[i];
    }
    canon[m] = 0;
    char *end;
    double v = strtod(canon, &end);
    if (*end || !isfinite(v)) return false;
    memset(out, 0, sizeof *out);
    out->value = v;
    out->integer = integer;
    out->negative = canon[0] == '-';
    if (integer) {
        const char *d = canon + (canon[0] == '-' || canon[0] == '+');
        while (*d == '0' && d[1]) d++;
        if (strlen(d) >= sizeof out->digits) {
            out->integer = false;  // too long for exact digits: compare as a double
        } else {
            strcpy(out->digits, d);
            if (!strcmp(d, "0")) out->negative = false;  // -0 == 0
        }
    }
    return true;
}

bool reward_number_equal(const RewardNumber *a, const RewardNumber *b) {
    if (a->integer && b->integer) return a->negative == b->negative && !strcmp(a->digits, b->digits);
    // 1e-9 relative: far below any intended difference between two answers, far
    // above the rounding of a decimal written to 15+ significant digits.
    double d = fabs(a->value - b->value), m = fmax(fabs(a->value), fabs(b->value));
    return d <= 1e-9 * m;
}

// Copies s[0..len) into out with whitespace trimmed and inner runs collapsed.
static void collapse(const char *s, size_t len, char *out, size_t cap) {
    size_t n = 0;
    bool sp = false;
    trim(&s, &len);
    for (size_t i = 0; i < len && n + 1 < cap; i++) {
        if (is_space(s[i])) { sp = true; continue; }
        if (sp && n + 2 < cap) out[n++] = ' ';
        sp = false;
        out[n++] = s[i];
    }
    out[n] = 0;
}

bool reward_answer_equal(const char *answer, const char *reference) {
    RewardNumber a, b;
    if (reward_number_parse(answer, strlen(answer), &a) && reward_number_parse(reference, strlen(reference), &b))
        return reward_number_equal(&a, &b);
    size_t la = strlen(answer) + 1, lb = strlen(reference) + 1;
    char *x = malloc(la), *y = malloc(lb);
    bool eq = false;
    if (x && y) {
        collapse(answer, la - 1, x, la);
        collapse(reference, lb - 1, y, lb);
        eq = !strcmp(x, y);
    }
    free(x);
    free(y);
    return eq;
}

static void copy_out(const char *s, size_t len, char *out, size_t cap) {
    trim(&s, &len);
    if (len >= cap) len = cap - 1;
    memcpy(out, s, len);
    out[len] = 0;
}

// The last \boxed{...} (or \fbox{...}) whose braces balance; a truncated one is skipped.
static bool last_boxed(const char *text, const char **start, size_t *len) {
    bool found = false;
    for (const char *p = text; (p = strstr(p, "\\"));) {
        const char *q = NULL;
        if (!strncmp(p, "\\boxed", 6)) q = p + 6;
        else if (!strncmp(p, "\\fbox", 5)) q = p + 5;
        p++;
        if (!q) continue;
        while (*q == ' ') q++;
        if (*q != '{') continue;
        int depth = 0;
        const char *r = q;
        for (; *r; r++) {
            if (*r == '{') depth++;
            else if (*r == '}' && --depth == 0) break;
        }
        if (!*r) continue;
        *start = q + 1;
        *len = (size_t)(r - q - 1);
        found = true;
    }
    return found;
}

// The last occurrence of needle in text, or NULL.
static const char *last_strstr(const char *text, const char *needle) {
    const char *last = NULL;
    for (const char *p = text; (p = strstr(p, needle)); p++) last = p;
    return last;
}

// Number tokens start at a digit, or at a sign or '.' that begins one. A sign
// right after a letter, digit or ')' is an operator: "12-5" is 12 and 5.
static bool last_number(const char *text, const char **start, size_t *len) {
    size_t n = strlen(text);
    bool found = false;
    for (size_t i = 0; i < n;) {
        char c = text[i];
        char prev = i ? text[i - 1] : ' ';
        bool can_start = is_digit(c) || c == '.' ||
                         ((c == '-' || c == '+') && !isalnum((unsigned char)prev) && prev != ')' && prev != '.');
        size_t k = can_start ? number_token(text + i, n - i) : 0;
        if (k) {
            *start = text + i;
            *len = k;
            found = true;
            i += k;
        } else {
            i++;
        }
    }
    return found;
}

AnswerSource reward_answer_extract(const char *text, const char *marker, char *out, size_t cap) {
    const char *s;
    size_t len;
    out[0] = 0;
    if (last_boxed(text, &s, &len)) {
        copy_out(s, len, out, cap);
        return ANSWER_BOXED;
    }
    if (marker && marker[0]) {
        const char *m = last_strstr(text, marker);
        if (!m) return ANSWER_NONE;
        s = m + strlen(marker);
        const char *nl = strchr(s, '\n');
        // "Answer:\n42": the answer may sit on the next line
        const char *t = s;
        while (*t == ' ' || *t == '\t') t++;
        if (nl == t) {
            s = nl + 1;
            nl = strchr(s, '\n');
        }
        copy_out(s, nl ? (size_t)(nl - s) : strlen(s), out, cap);
        return ANSWER_MARKER;
    }
    if (last_number(text, &s, &len)) {
        copy_out(s, len, out, cap);
        return ANSWER_LAST_NUMBER;
    }
    return ANSWER_NONE;
}

bool reward_answer_match(const char *completion, const char *marker, const char *reference) {
    char ans[512];
    AnswerSource src = reward_answer_extract(completion, marker, ans, sizeof ans);
    if (src == ANSWER_NONE) return false;
    if (reward_answer_equal(ans, reference)) return true;
    RewardNumber a, b;
    if (src != ANSWER_MARKER || !reward_number_parse(reference, strlen(reference), &b)) return false;
    // "#### 72 apples": the first number after the marker
    for (size_t i = 0; ans[i]; i++) {
        size_t k = number_token(ans + i, strlen(ans + i));
        if (k && (i == 0 || !is_digit(ans[i - 1]))) return reward_number_parse(ans + i, k, &a) && reward_number_equal(&a, &b);
    }
    return false;
}
