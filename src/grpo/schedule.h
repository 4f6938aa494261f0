// The learning-rate schedule of grpo-train and its --sft warm-up: linear
// warmup, then constant or cosine decay to a floor. A pure function of the
// step, so a resumed run continues the curve exactly.
#pragma once
#include <stdint.h>

typedef enum { SCHEDULE_CONSTANT, SCHEDULE_COSINE } LrScheduleKind;

typedef struct {
    LrScheduleKind kind;
    double lr;              // peak learning rate
    double min_lr_ratio;    // cosine floor as a fraction of lr, in [0, 1]
    int64_t warmup_steps;   // steps 0..warmup-1 ramp linearly: lr * (step + 1) / warmup
    int64_t steps;          // total steps: the cosine reaches its floor at the last one
} LrSchedule;

// The learning rate of optimizer step `step` (0-based). Past `steps` the
// cosine stays at its floor.
double lr_schedule_at(const LrSchedule *s, int64_t step);
