/*
 * metrics.h - the metrics text being built (mooncake/metrics.h), for the
 * layers that render their own metrics into it: the shape of mc_metrics_t
 * and histograms.
 */
#ifndef MC_RUNTIME_METRICS_H
#define MC_RUNTIME_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/metrics.h"

/* The text of one scrape; grows as samples are appended. */
struct mc_metrics {
    char *p;
    size_t len, cap;
    int oom; /* an append failed: the text is cut short */
};

/* Appends printf-style text to m (m NULL: nothing). */
void mc__metrics_printf(mc_metrics_t *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Appends the samples of one histogram of the family name (its header
 * written before): name_bucket{labels,le="..."} for each of the n upper
 * bounds (seconds, ascending) and +Inf, cumulative, then name_sum (sum, in
 * seconds) and name_count. counts[0..n] are per bucket, not cumulative;
 * counts[n] is the overflow. labels may be NULL.
 */
void mc__metrics_histogram(mc_metrics_t *m, const char *name, const char *labels,
                           const double *bounds, const uint64_t *counts, size_t n, double sum);

#endif /* MC_RUNTIME_METRICS_H */
