// The trainer's supply of rollout groups: lists the rollout versions inside
// the staleness window (no start-after cursor: shards arrive late and out of
// order), loads and checks each new shard (verified sha256, format, the run's
// base and tokenizer, group size), rejects bad ones (recorded under
// trainer/rejected/ and counted, never trained on), drops what fell out of the
// window, and hands out whole groups in a deterministic order (oldest version
// first, then key, then group). What has been consumed is part of the trainer
// state, so a resumed trainer neither repeats nor skips a group.
// Replay mode reads every shard under another run's rollouts/ in key order,
// or, with a record (feed_replay_record), exactly the groups another trainer
// consumed, in its order.
//
// Late shards: a worker can check the window, stall (frozen, a long retry) and
// land its upload after the trainer's last listing of that version. Versions
// that left the window are therefore re-listed, one LIST with start-after
// every late_every_s, for late_grace_s after they left; a newcomer there is
// counted as dropped. feed_refresh_all forces that listing (before the final
// publish); late_listed_unix / late_listed_from say what the counts cover:
// every shard of a version >= late_listed_from that landed before
// late_listed_unix was seen and counted.
//
// The consumption record: every committed take is appended as runs of
// consecutive groups of one shard, (step, key, first group, count); the trainer
// stores the runs since its previous state in each state it writes (so the
// chain of states holds every committed step's groups in order) and resets it.
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "shard/shard.h"
#include "store/store.h"

typedef struct {
    char key[256];        // rollouts/v%08d/<worker>-%06d.h5
    int64_t version;
    int32_t n_groups;     // -1 until loaded; 0 for a rejected shard
    int32_t used;         // groups handed out and committed
    int32_t taken;        // handed out by feed_take, not yet committed (not persisted)
    bool loaded;
    RolloutShard shard;   // when loaded
} FeedShard;

typedef struct {
    const char *base_sha256, *tokenizer_sha256;  // the run's; shards must match
    int64_t vocab;                               // token ids must be below it
    int group_size;                              // required G (0: any)
    int max_staleness;                           // versions behind the current one still used
    bool replay;                                 // every shard in key order, no staleness
    double late_grace_s;                         // re-list a version this long after it left the window
    double late_every_s;                         // how often (0: at every refresh)
} FeedConfig;

typedef struct {
    int64_t consumed, dropped, rejected;  // shards, cumulative
    int64_t groups_dropped;               // groups lost with dropped shards
} FeedStats;

// One run of the consumption record: groups first..first+count-1 of a shard,
// consumed in that order by step `step` (a step skipped for non-finite
// gradients uses its groups up under the number of the step that follows it).
typedef struct {
    int64_t step;
    char key[256];
    int32_t first, count;
} FeedRecord;

typedef struct {
    Store *st;            // borrowed: where the shards are (the run, or the replay source)
    Store *rejects;       // borrowed: where trainer/rejected/ goes (the run)
    FeedConfig cfg;
    FeedShard **shards;   // sorted by (version, key); each entry owned and never moved, so the
    int n, cap;           // GroupRefs of a step stay valid while the list is refreshed
    FeedStats stats;
    int64_t listed_lo;    // the oldest version of the window last listed (-1: none yet)
    struct { int64_t version; double left; } *gone;  // versions out of the window, still re-listed
    int gone_n, gone_cap;                           // (oldest first; left: time_mono_s)
    double late_listed;          // time_mono_s of the last re-listing (0: none yet)
    int64_t late_listed_unix;    // its wall clock, and the oldest version it covered (-1: none)
    int64_t late_listed_from;
    char last_error[512]; // of the last rejected shard, for logs
    FeedRecord *rec;      // committed since the last feed_record_reset (owned)
    int rec_n, rec_cap;
    struct { FeedShard *e; int32_t group; } *seq;  // replay of a record: the groups in order (owned)
    int seq_n, seq_pos, seq_taken;                 // committed / handed out, not committed
} Feed;

// One group handed out for a step: borrowed pointers into a loaded shard.
typedef struct {
    const FeedShard *src; // the shard entry (stable until feed_commit)
    int group;            // group index in the shard
    int64_t version;      // adapter version that generated it
    const RolloutShard *s;
} GroupRef;

void feed_init(Feed *f, Store *st, Store *rejects, const FeedConfig *cfg);
void feed_free(Feed *f);
// Lists new shards for current_version's window (or, in replay, all of them),
// drops what fell out of the window. 0 / -1 on a store error (nothing lost).
int feed_refresh(Feed *f, int64_t current_version, PailErr *err);
// The same, with the re-listing of the versions that left the window now.
int feed_refresh_all(Feed *f, int64_t current_version, PailErr *err);
// Hands out up to want groups not yet used, loading shards as needed (bad
// shards are rejected on the way). *got may be < want: wait and refresh.
int feed_take(Feed *f, int want, GroupRef *out, int *got, PailErr *err);
// Marks the groups of the last take as consumed by step `step` (after the step
// succeeded or was skipped), appends them to the record; frees shards whose
// groups are all used. -1 only when out of memory for the record.
int feed_commit(Feed *f, const GroupRef *refs, int n, int64_t step);
void feed_record_reset(Feed *f);  // after the record went into a published state
// Replay mode: hand out exactly these groups, in this order (another trainer's
// record); the feed lists nothing. -1 when out of memory.
int feed_replay_record(Feed *f, const FeedRecord *rec, int n, PailErr *err);
// Number of shards with groups not used yet (not yet loaded ones count); with a
// replayed record, the groups of the record not handed out yet.
int64_t feed_pending_shards(const Feed *f);

// Persisted consumption: (key, version, n_groups, used) per shard still tracked.
int feed_export(const Feed *f, char ***keys, int64_t **versions, int32_t **n_groups, int32_t **used, int *n);
int feed_import(Feed *f, char *const *keys, const int64_t *versions, const int32_t *n_groups, const int32_t *used,
                int n, PailErr *err);
