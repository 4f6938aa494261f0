// The exact_answer reward's text handling (reward_answer.c): find a completion's
// final answer (\boxed{...}, text after a marker, or the last number) and compare it
// with a reference, numerically when both are numbers ("1,000" = "1000.0" = "1e3").
// Exposed for the tests and for anyone checking answers offline.
#pragma once
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    double value;
    bool integer;       // written without a fraction or exponent: compared digit by digit
    bool negative;
    char digits[80];    // integer: the digits without leading zeros or separators
} RewardNumber;

typedef enum { ANSWER_NONE = 0, ANSWER_BOXED, ANSWER_MARKER, ANSWER_LAST_NUMBER } AnswerSource;

// Parses all of s (after trimming) as one number: sign, digits with optional ","
// thousands groups, fraction, exponent; tolerates "$", "\$", a trailing "%" or
// "\%", LaTeX "{,}" separators and a final '.'. Returns true on success.
bool reward_number_parse(const char *s, size_t len, RewardNumber *out);
// Integers: same sign and digits; otherwise |a-b| <= 1e-9 * max(|a|,|b|).
bool reward_number_equal(const RewardNumber *a, const RewardNumber *b);
// Writes the completion's final answer to out (truncated to cap-1 bytes) and says
// where it came from: the last balanced \boxed{...}; else, when marker is non-empty,
// the rest of the line after its last occurrence (ANSWER_NONE when it is absent);
// else the last number in the text.
AnswerSource reward_answer_extract(const char *text, const char *marker, char *out, size_t cap);
// True when answer equals reference: as numbers when both parse, else as strings
// with surrounding whitespace trimmed and inner runs collapsed (case-sensitive).
bool reward_answer_equal(const char *answer, const char *reference);
// exact_answer: extract, then compare. For a marker answer that is not a number
// itself ("72 apples"), its first number is compared with a numeric reference.
bool reward_answer_match(const char *completion, const char *marker, const char *reference);
