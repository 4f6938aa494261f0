// Learning-rate schedule (see schedule.h). The cosine is HF's
// get_cosine_schedule_with_warmup with a floor: after warmup,
// lr * (min + (1 - min) * (1 + cos(pi * t)) / 2), t = (step - warmup) / (steps - warmup).
#include "grpo/schedule.h"
#include <math.h>

double lr_schedule_at(const LrSchedule *s, int64_t step) {
    double lr = s->lr;
    if (s->warmup_steps > 0 && step < s->warmup_steps) return lr * (double)(step + 1) / (double)s->warmup_steps;
    if (s->kind == SCHEDULE_COSINE) {
        double span = (double)(s->steps - s->warmup_steps), t = span > 0 ? (double)(step - s->warmup_steps) / span : 1;
        if (t > 1) t = 1;
        return lr * (s->min_lr_ratio + (1 - s->min_lr_ratio) * 0.5 * (1 + cos(M_PI * t)));
    }
    return lr;
}
