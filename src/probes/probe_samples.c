/*
 * probe_samples.c - order statistics of timing samples (see probe_samples.h).
 */
#include "probe_samples.h"

#include <stdlib.h>

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double samples_percentile(const double *sorted, long n, double p)
{
    /* The smallest value with at least p % of the samples at or below it. */
    long idx = (long)(p / 100.0 * n + 0.999999) - 1;

    if (idx < 0) {
        idx = 0;
    }
    if (idx >= n) {
        idx = n - 1;
    }
    return sorted[idx];
}

void samples_summarize(double *samples, long n, struct samples_summary *out)
{
    double sum = 0.0;
    long i;

    qsort(samples, (size_t)n, sizeof(double), compare_doubles);
    for (i = 0; i < n; i++) { /* ascending, as the reports always summed */
        sum += samples[i];
    }
    out->min = samples[0];
    out->p50 = samples_percentile(samples, n, 50);
    out->p90 = samples_percentile(samples, n, 90);
    out->p99 = samples_percentile(samples, n, 99);
    out->max = samples[n - 1];
    out->mean = sum / n;
}
