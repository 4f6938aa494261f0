// The eval worker (grpo-rollout --eval, grpo-ctl eval): scores an adapter
// version on every row of the eval dataset and writes the result (see
// evalworker.c). A part of the worker (worker_int.h): the loop that picks the
// versions is worker.c's.
#pragma once
#include "core/err.h"

typedef struct Worker Worker;

// Evaluates the adapter on the engine (version v, -1: the base model; label
// names it in the log) and writes the result. 0 / -1 with err.
int evalworker_version(Worker *w, long v, const char *label, PailErr *err);
// grpo-ctl eval: the adapter file --adapter, else the run's newest version,
// else the base model, evaluated once. 0 / -1 with err.
int evalworker_once(Worker *w, PailErr *err);
