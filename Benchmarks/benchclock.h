// The clock and the medians of the C benchmarks (aesgcm.c, gcm-ab.c).
#ifndef SLUICE_BENCHCLOCK_H
#define SLUICE_BENCHCLOCK_H

#include <stdlib.h>
#include <time.h>

/// Seconds on the monotonic clock.
static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static inline int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/// The median of the `n` values at `v` (sorted in place).
static inline double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), compare);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
