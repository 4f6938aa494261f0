// The executables' OpenMP wait policy and OpenBLAS kernels (see threads.h):
// set what the user left unset, exec again once.
#include "core/threads.h"
#include <cblas.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MARKER "PAIL_THREADS_REEXEC"

static char note[512] = "OpenMP waits: libgomp's default (threads_policy_apply was not called)";

const char *threads_blas_core_for(const char *detected, bool avx2, bool avx512) {
    // the cores OpenBLAS's dynamic x86 build falls back to for a CPU it does not
    // know (0.3.21: "Prescott" for an unknown Intel family 6 model), or older
    static const char *const fallback[] = {"Prescott", "Katmai", "Coppermine", "Northwood", "Banias", "Core2",
                                           "Penryn", "Dunnington", "Nehalem", "Atom", "Sandybridge", NULL};
    if (!detected || !avx2) return NULL;
    for (int i = 0; fallback[i]; i++)
        if (!strcasecmp(detected, fallback[i])) return avx512 ? "SkylakeX" : "Haswell";
    return NULL;
}

// What the first process set, as the marker records it: "SPIN,CORE" (either may be empty).
static void marker_split(const char *mark, char *spin, char *core, size_t cap) {
    const char *c = strchr(mark, ',');
    size_t n = c ? (size_t)(c - mark) : strlen(mark);
    snprintf(spin, cap, "%.*s", (int)(n < cap ? n : cap - 1), mark);
    snprintf(core, cap, "%s", c ? c + 1 : "");
}

void threads_policy_apply(char **argv) {
    const char *pol = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    const char *mark = getenv(MARKER), *core_env = getenv("OPENBLAS_CORETYPE");
    if (mark) {  // the re-executed process: libgomp and OpenBLAS have read them; hide them from our children
        char mspin[64], mcore[64];
        marker_split(mark, mspin, mcore, sizeof mspin);
        bool spin_ours = *mspin && spin && !pol && !strcmp(mspin, spin);
        bool core_ours = *mcore && core_env && !strcmp(mcore, core_env);
        size_t n = 0;
        if (spin_ours)
            n += snprintf(note + n, sizeof note - n, "OpenMP waits: GOMP_SPINCOUNT=%s (pail's choice; set "
                          "OMP_WAIT_POLICY or GOMP_SPINCOUNT to choose)", spin);
        else if (pol || spin)
            n += snprintf(note + n, sizeof note - n, "OpenMP waits: %s%s%s%s%s (set by the environment)",
                          pol ? "OMP_WAIT_POLICY=" : "", pol ? pol : "", pol && spin ? " " : "",
                          spin ? "GOMP_SPINCOUNT=" : "", spin ? spin : "");
        else
            n += snprintf(note + n, sizeof note - n, "OpenMP waits: libgomp's default%s",
                          core_ours ? "" : " (" MARKER " was already set)");  // not ours: never exec twice
        if (core_ours && n < sizeof note)
            snprintf(note + n, sizeof note - n, "; OpenBLAS: OPENBLAS_CORETYPE=%s (pail's choice: OpenBLAS does not "
                     "know this CPU and fell back to slower kernels; set OPENBLAS_CORETYPE to choose)", core_env);
        unsetenv(MARKER);
        if (spin_ours) unsetenv("GOMP_SPINCOUNT");
        if (core_ours) unsetenv("OPENBLAS_CORETYPE");
        return;
    }
    __builtin_cpu_init();
    const char *core = core_env ? NULL
                                : threads_blas_core_for(openblas_get_corename(), __builtin_cpu_supports("avx2") &&
                                                        __builtin_cpu_supports("fma"),
                                                        __builtin_cpu_supports("avx512f") &&
                                                        __builtin_cpu_supports("avx512bw") &&
                                                        __builtin_cpu_supports("avx512vl") &&
                                                        __builtin_cpu_supports("avx512dq"));
    bool want_spin = !pol && !spin;
    if (!want_spin && !core) {
        snprintf(note, sizeof note, "OpenMP waits: %s%s%s%s%s (set by the environment)", pol ? "OMP_WAIT_POLICY=" : "",
                 pol ? pol : "", pol && spin ? " " : "", spin ? "GOMP_SPINCOUNT=" : "", spin ? spin : "");
        return;
    }
    char mval[128];
    snprintf(mval, sizeof mval, "%s,%s", want_spin ? THREADS_SPINCOUNT : "", core ? core : "");
    if (!argv || !argv[0] || (want_spin && setenv("GOMP_SPINCOUNT", THREADS_SPINCOUNT, 1)) ||
        (core && setenv("OPENBLAS_CORETYPE", core, 1)) || setenv(MARKER, mval, 1)) {
        snprintf(note, sizeof note, "OpenMP waits: libgomp's default (could not set the environment)");
        if (want_spin) unsetenv("GOMP_SPINCOUNT");
        if (core) unsetenv("OPENBLAS_CORETYPE");
        unsetenv(MARKER);
        return;
    }
    execv("/proc/self/exe", argv);
    int e = errno;  // still here: carry on as started
    if (want_spin) unsetenv("GOMP_SPINCOUNT");
    if (core) unsetenv("OPENBLAS_CORETYPE");
    unsetenv(MARKER);
    snprintf(note, sizeof note, "OpenMP waits: libgomp's default (re-executing /proc/self/exe to set "
             "GOMP_SPINCOUNT / OPENBLAS_CORETYPE failed: %s)", strerror(e));
}

const char *threads_policy_note(void) { return note; }
