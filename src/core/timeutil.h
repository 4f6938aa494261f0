// Clocks and sleeps: monotonic milliseconds for deadlines, wall-clock seconds
// for file attributes, and an interruptible sleep.
#pragma once
#include <stdint.h>

int64_t time_mono_ms(void);   // CLOCK_MONOTONIC, for deadlines and durations
double time_mono_s(void);
int64_t time_unix_s(void);    // wall clock, for created_unix and logs
void time_sleep_ms(int64_t ms);  // returns early on a signal
