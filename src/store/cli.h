// The store flags of every tool that opens a run's bucket (grpo-train,
// grpo-rollout, grpo-ctl's store-facing subcommands): one spelling, one help
// text. STORE_CLI_FLAGS(v) expands to those entries of a Flag table.
#pragma once
#include <stdbool.h>
#include "core/flags.h"
#include "store/retry.h"
#include "store/store.h"

typedef struct {
    char *endpoint, *region, *ca_bundle;
    bool allow_http;
    double max_outage;  // seconds one request keeps being retried (StoreOptions.retry_seconds)
} StoreCliFlags;

#define STORE_CLI_STR_(x) #x
#define STORE_CLI_STR(x) STORE_CLI_STR_(x)

#define STORE_CLI_FLAGS(v)                                                                                  \
    {"endpoint", FLAG_STRING, &(v)->endpoint, NULL, 1, 0,                                                  \
     "s3 endpoint URL, e.g. https://host:9000 (env AWS_ENDPOINT_URL; none: AWS S3)"},                     \
    {"region", FLAG_STRING, &(v)->region, NULL, 1, 0, "s3 region (env AWS_REGION, AWS_DEFAULT_REGION; us-east-1)"}, \
    {"ca-bundle", FLAG_STRING, &(v)->ca_bundle, NULL, 1, 0, "PEM file of CAs to trust for https (env AWS_CA_BUNDLE)"}, \
    {"allow-http", FLAG_BOOL, &(v)->allow_http, "false", 1, 0,                                             \
     "allow plain http:// to a non-loopback endpoint (credentials travel in clear)"},                     \
    {"max-outage", FLAG_DOUBLE, &(v)->max_outage, STORE_CLI_STR(RETRY_DEFAULT_BUDGET_S), 0.1, 1e7,         \
     "seconds a failing store request is retried (bucket or relay down, connections reset, 5xx) before "    \
     "the tool gives up; a still-failing request is logged every 30 s (after SIGTERM: 20 s for grpo-train, "  \
     "5 s for grpo-rollout)"}

// The StoreOptions those flags describe (the rest at their defaults).
static inline StoreOptions store_cli_options(const StoreCliFlags *v) {
    return (StoreOptions){.endpoint = v->endpoint, .region = v->region, .ca_bundle = v->ca_bundle,
                          .allow_http = v->allow_http, .retry_seconds = v->max_outage};
}
