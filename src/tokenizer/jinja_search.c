// Substring search for the chat-template interpreter, linear in time whatever the input.
// Forward: glibc's memmem (Two-Way, O(n + m), for long needles; a bounded shift table for short
// ones). Backward: a forward memmem over reversed copies of both strings, made once per
// operation, so rfind and rsplit stay O(n + m) too; a naive scan back from the end is O(n * m)
// ('a'*1600000).rfind('a'*800000 ~ 'b') took 12.7 s that way). Every search charges the bytes it
// reads to the render's work budget (jr_work).
#define _GNU_SOURCE  // memmem
#include <stdlib.h>
#include <string.h>
#include "tokenizer/jinja_internal.h"

// Needles up to this long are searched backward in place: at most this many compares a byte.
#define JR_SHORT_NEEDLE 16

int jr_find(JRender *r, const char *h, size_t n, const char *nd, size_t m, size_t *at) {
    const char *hit = m <= n ? memmem(h, n, nd, m) : NULL;
    // Two-Way reads the needle (its factorization) and the haystack up to the hit, a few times each at most.
    if (jr_work(r, (hit ? (size_t)(hit - h) : n) + 2 * m) < 0) return -1;
    if (!hit) return 0;
    *at = (size_t)(hit - h);
    return 1;
}

static char *reversed(const char *p, size_t n) {
    char *q = malloc(n ? n : 1);
    if (q)
        for (size_t i = 0; i < n; i++) q[i] = p[n - 1 - i];
    return q;
}

int jr_rsearch_init(JRSearch *s, JRender *r, const char *h, size_t n, const char *nd, size_t m) {
    *s = (JRSearch){.r = r, .h = h, .n = n, .nd = nd, .m = m};
    if (m <= JR_SHORT_NEEDLE || m > n) return 0;
    if (jr_work(r, n + m) < 0) return -1;
    s->rh = reversed(h, n);
    s->rn = reversed(nd, m);
    if (!s->rh || !s->rn) {
        jr_rsearch_free(s);
        return jr_fail(r, "out of memory");
    }
    return 0;
}

int jr_rsearch_prev(JRSearch *s, size_t end, size_t *at) {
    size_t m = s->m;
    if (m > end) return 0;
    if (!s->rh) {  // short needle: back from the end, at most JR_SHORT_NEEDLE compares a position
        for (size_t k = end - m + 1; k-- > 0;)
            if (!memcmp(s->h + k, s->nd, m)) {
                *at = k;
                return jr_work(s->r, (end - k) * m) < 0 ? -1 : 1;
            }
        return jr_work(s->r, (end - m + 1) * m) < 0 ? -1 : 0;
    }
    // h[0..end) reversed is rh[n - end .. n); an occurrence at q there starts at end - q - m here.
    size_t q;
    int found = jr_find(s->r, s->rh + (s->n - end), end, s->rn, m, &q);
    if (found == 1) *at = end - q - m;
    return found;
}

void jr_rsearch_free(JRSearch *s) {
    free(s->rh);
    free(s->rn);
    s->rh = s->rn = NULL;
}
