// How the computing executables' OpenMP threads wait (grpo-train, grpo-rollout,
// grpo-ctl), and which OpenBLAS kernels they run. libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT once, when it is
// loaded, so a program can choose its own only by starting again: where the
// user set neither, threads_policy_apply sets pail's choice and re-executes the
// program once. doc/kernels.md ("Threads") has the measurements behind it.
#pragma once

// pail's choice: a thread that waits (at a barrier of an op, or between ops)
// spins this many times (~20 ns each here) before it sleeps in the kernel.
#define THREADS_SPINCOUNT "1000"

// Call first in main, before any thread is started or anything opened that
// should not survive an exec. When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT
// is set it sets GOMP_SPINCOUNT; when OPENBLAS_CORETYPE is unset and OpenBLAS
// fell back to old kernels on a CPU it does not know (0.3.21 on Sapphire /
// Emerald Rapids: "Prescott", SSE3, sgemm 4-5x slower) it sets
// OPENBLAS_CORETYPE to SkylakeX (AVX-512) or Haswell (AVX2); OpenBLAS too reads
// it only at load. Either way it then execs /proc/self/exe with argv; returns only
// when the policy is already the user's or pail's, or the exec failed (then
// the process goes on with libgomp's own default, and the note says so). In the
// re-executed process it removes what it set from the environment again, so
// the programs it starts (a reward command) see the user's. A marker variable
// (PAIL_THREADS_REEXEC, holding the value set) stops a second exec.
void threads_policy_apply(char **argv);

// The OpenBLAS core to run instead of the detected one (NULL: keep it), for
// tests: a fallback core on a CPU with AVX2 (and AVX-512).
#include <stdbool.h>
const char *threads_blas_core_for(const char *detected, bool avx2, bool avx512);

// One line for the start-up log: the wait policy in effect and who chose it.
const char *threads_policy_note(void);
