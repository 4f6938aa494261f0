// The relay's key file and role policy. A line is `ACCESS_KEY_ID SECRET ROLE
// [PREFIX]`; '#' starts a comment. Roles decide which keys (relative to the
// line's PREFIX, the run prefix) a client may write; everyone may read inside
// its prefix. Pure functions, no I/O besides relay_keys_load: fuzzed and unit
// tested directly.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "core/err.h"
#include "store/store.h"

typedef enum { ROLE_READER = 0, ROLE_ROLLOUT, ROLE_TRAINER, ROLE_OPERATOR } RelayRole;

typedef struct {
    char id[128];
    char secret[128];            // never logged
    RelayRole role;
    char prefix[STORE_MAX_KEY];  // "" (whole bucket: operator, reader) or "runs/x" (no trailing '/')
    int line;                    // in the key file, for messages
} RelayKey;

typedef struct {
    RelayKey *keys;  // owned
    int n;
} RelayKeys;

// Parses key-file text (name is used in messages). Duplicate ids, unknown
// roles, malformed prefixes, secrets shorter than 16 bytes, a trainer or
// rollout key without a prefix, and a trainer's or rollout key's prefix inside
// another's are errors naming the line. Returns 0 / -1.
int relay_keys_parse(RelayKeys *out, const char *text, size_t n, const char *name, PailErr *err);
int relay_keys_load(RelayKeys *out, const char *path, PailErr *err);
void relay_keys_free(RelayKeys *k);
const RelayKey *relay_keys_find(const RelayKeys *k, const char *id);  // NULL when unknown
const char *relay_role_name(RelayRole r);
int relay_role_parse(const char *s, RelayRole *out);  // 0 / -1

typedef enum { ACCESS_READ, ACCESS_WRITE, ACCESS_DELETE } RelayAccess;
// May this client do `what` on object key `key` (already validated with
// store_key_check)? Returns true / false; *why (when non-NULL) says why not.
// For trainer and rollout the prefix is the run's root: the role folders count
// directly below it only ("runs/x" + "/adapters/v00000001.h5"), inside them
// only the run layout's keys (doc/protocol.md; also grpo-ctl doctor's probe
// names), and without a prefix they write nothing. For the operator they
// count below any folder inside its prefix (or the bucket).
bool relay_policy_allows(RelayRole role, const char *prefix, RelayAccess what, const char *key,
                         const char **why);
// May this client list under `list_prefix` (may be "")? Only inside its prefix.
bool relay_policy_allows_list(const char *prefix, const char *list_prefix);
