// How the computing executables' OpenMP threads wait (grpo-train, grpo-rollout,
// grpo-ctl). libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT once, when it is
// loaded, so a program can choose its own only by starting again: where the
// user set neither, threads_policy_apply sets pail's choice and re-executes the
// program once. doc/kernels.md ("Threads") has the measurements behind it.
#pragma once

// pail's choice: a thread that waits (at a barrier of an op, or between ops)
// spins this many times (~20 ns each here) before it sleeps in the kernel.
#define THREADS_SPINCOUNT "1000"

// Call first in main, before any thread is started or anything opened that
// should not survive an exec. When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT
// is set: sets GOMP_SPINCOUNT and execs /proc/self/exe with argv; returns only
// when the policy is already the user's or pail's, or the exec failed (then
// the process goes on with libgomp's own default, and the note says so). In the
// re-executed process it removes what it set from the environment again, so
// the programs it starts (a reward command) see the user's. A marker variable
// (PAIL_THREADS_REEXEC, holding the value set) stops a second exec.
void threads_policy_apply(char **argv);

// One line for the start-up log: the wait policy in effect and who chose it.
const char *threads_policy_note(void);
