// The executables' OpenMP wait policy (see threads.h): set it, exec again once.
#include "core/threads.h"
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MARKER "PAIL_THREADS_REEXEC"

static char note[256] = "OpenMP waits: libgomp's default (threads_policy_apply was not called)";

void threads_policy_apply(char **argv) {
    const char *pol = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    const char *mark = getenv(MARKER);
    if (mark) {  // the re-executed process: libgomp has read it; hide it from our children
        bool ours = spin && !pol && !strcmp(mark, spin);
        if (ours)
            snprintf(note, sizeof note, "OpenMP waits: GOMP_SPINCOUNT=%s (pail's choice; set OMP_WAIT_POLICY or "
                     "GOMP_SPINCOUNT to choose)", spin);
        else  // not ours (someone else set the marker): never exec twice
            snprintf(note, sizeof note, "OpenMP waits: libgomp's default (" MARKER " was already set)");
        unsetenv(MARKER);
        if (ours) unsetenv("GOMP_SPINCOUNT");
        return;
    }
    if (pol || spin) {
        snprintf(note, sizeof note, "OpenMP waits: %s%s%s%s%s (set by the environment)", pol ? "OMP_WAIT_POLICY=" : "",
                 pol ? pol : "", pol && spin ? " " : "", spin ? "GOMP_SPINCOUNT=" : "", spin ? spin : "");
        return;
    }
    if (!argv || !argv[0] || setenv("GOMP_SPINCOUNT", THREADS_SPINCOUNT, 1) || setenv(MARKER, THREADS_SPINCOUNT, 1)) {
        snprintf(note, sizeof note, "OpenMP waits: libgomp's default (could not set GOMP_SPINCOUNT)");
        unsetenv("GOMP_SPINCOUNT");
        unsetenv(MARKER);
        return;
    }
    execv("/proc/self/exe", argv);
    int e = errno;  // still here: carry on as started
    unsetenv("GOMP_SPINCOUNT");
    unsetenv(MARKER);
    snprintf(note, sizeof note, "OpenMP waits: libgomp's default (re-executing /proc/self/exe to set "
             "GOMP_SPINCOUNT=" THREADS_SPINCOUNT " failed: %s)", strerror(e));
}

const char *threads_policy_note(void) { return note; }
