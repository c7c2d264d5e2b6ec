/*
 * probe_samples.h - order statistics of timing samples.
 *
 * fabreg_tail_latency and fabreg_stress report the same figures of a set of
 * per-call times (percentiles, maximum, mean, minimum); computing them in one
 * place keeps the two reports' definitions equal (nearest-rank percentiles,
 * docs/workloads.md).  Only for after the timed part: it sorts.
 *
 * Part of fabreg; written for the project.
 */
#ifndef PROBE_SAMPLES_H
#define PROBE_SAMPLES_H

/* Figures of a set of samples, in the samples' own unit. */
struct samples_summary {
    double min;
    double p50;
    double p90;
    double p99;
    double max;
    double mean;
};

/* Sort the n >= 1 samples ascending (in place) and summarise them. */
void samples_summarize(double *samples, long n, struct samples_summary *out);

/* Nearest-rank percentile p (0..100) of n >= 1 samples sorted ascending. */
double samples_percentile(const double *sorted, long n, double p);

#endif /* PROBE_SAMPLES_H */
