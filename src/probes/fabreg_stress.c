/*
 * fabreg_stress: keep large allreduce/alltoall traffic going for a bounded time
 * and log rolling latencies (used by `fabreg stress`).
 *
 * The ranks run the listed collectives in turn, back to back, for -t seconds
 * and then stop by themselves. Rank 0 times every call; at the end of every
 * window (-w seconds) it appends one JSON object per collective to the log file
 * (--log, default stdout) and flushes it, so readers see it at once:
 *
 *   {"time": 1763700000.123, "op": "allreduce", "size": 4194304, "ranks": 2,
 *    "window_s": 1.002, "iterations": 37, "p50_us": 2100.5, "p99_us": 4100.2,
 *    "max_us": 5000.1, "mean_us": 2200.7}            (one line in the file)
 *
 * The format is documented in docs/workloads.md ("Stress mode").
 */
#include "probe_samples.h"
#include "probe_workload.h"

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define MAX_OPS 2
#define MAX_SAMPLES 1000000

struct options {
    double duration, window;
    long size;
    int ops[MAX_OPS], nops;  /* 0 = allreduce, 1 = alltoall */
    const char *log;
};

static const char *op_name(int op) { return op ? "alltoall" : "allreduce"; }

/* --ops: a comma-separated list of at most MAX_OPS collectives. */
static int parse_ops(const char *text, void *options)
{
    struct options *o = options;
    char buf[128], *tok, *save = NULL;
    snprintf(buf, sizeof(buf), "%s", text);
    o->nops = 0;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int op;
        if (!strcmp(tok, "allreduce")) op = 0;
        else if (!strcmp(tok, "alltoall")) op = 1;
        else return 1;
        if (o->nops == MAX_OPS) return 1;
        o->ops[o->nops++] = op;
    }
    return o->nops == 0;
}

#define FIELD(name) offsetof(struct options, name)
static const struct workload_option option_table[] = {
    {.name = "duration", .letter = 't', .type = WORKLOAD_DOUBLE, .offset = FIELD(duration)},
    {.name = "window", .letter = 'w', .type = WORKLOAD_DOUBLE, .offset = FIELD(window)},
    {.name = "size", .letter = 's', .type = WORKLOAD_LONG, .offset = FIELD(size)},
    {.name = "ops", .letter = 'o', .type = WORKLOAD_CUSTOM, .parse = parse_ops,
     .invalid = "--ops takes allreduce and/or alltoall, comma-separated (got '%s')"},
    {.name = "log", .letter = 'l', .type = WORKLOAD_STRING, .offset = FIELD(log)},
    {.name = NULL},
};
#undef FIELD

static const struct workload_probe probe = {
    "fabreg_stress",
    "usage: %s [-t seconds] [-w window_seconds] [-s bytes] [-o allreduce,alltoall] "
    "[--log file]\n",
    option_table,
};

static double unix_time(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

static void log_window(FILE *out, int op, const struct options *o, int ranks, double window_s,
                       double *t, long n)
{
    struct samples_summary s;
    if (n == 0) return;
    samples_summarize(t, n, &s);
    fprintf(out, "{\"time\": %.3f, \"op\": \"%s\", \"size\": %ld, \"ranks\": %d, "
            "\"window_s\": %.3f, \"iterations\": %ld, \"p50_us\": %.3f, \"p99_us\": %.3f, "
            "\"max_us\": %.3f, \"mean_us\": %.3f}\n", unix_time(), op_name(op), o->size, ranks,
            window_s, n, s.p50 * 1e6, s.p99 * 1e6, s.max * 1e6, s.mean * 1e6);
    fflush(out);
}

int main(int argc, char **argv)
{
    struct options o = {.duration = 10, .window = 1, .size = 1 << 22, .ops = {0, 1}, .nops = 2,
                        .log = NULL};
    struct workload_run run;
    int rank, nranks, k;
    long count, n[MAX_OPS] = {0};
    char *sbuf, *rbuf;
    double *samples[MAX_OPS], start, window_start;
    FILE *out = stdout;
    int go[2] = {1, 1};  /* continue this window, continue the run */

    workload_start(&run, &probe, &o, &argc, &argv);
    rank = run.rank;
    nranks = run.nranks;
    if (o.duration <= 0 || o.window <= 0 || o.size < 8)
        workload_refuse(&run, "duration and window must be positive, size at least 8 bytes");
    if (rank == 0 && o.log) {
        out = fopen(o.log, "a");
        if (!out) {
            perror(o.log);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    /* allreduce: size bytes of doubles; alltoall: size bytes split over the peers. */
    count = o.size / 8;
    sbuf = workload_alloc(1, o.size);
    rbuf = workload_alloc(1, o.size);
    memset(sbuf, 1, o.size);
    for (k = 0; k < MAX_OPS; k++) samples[k] = workload_alloc(MAX_SAMPLES, sizeof(double));

    MPI_Barrier(MPI_COMM_WORLD);
    start = window_start = MPI_Wtime();
    while (go[1]) {
        for (k = 0; k < o.nops; k++) {
            int op = o.ops[k];
            double t = MPI_Wtime();
            if (op == 0)
                MPI_Allreduce(sbuf, rbuf, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            else
                MPI_Alltoall(sbuf, (int)(o.size / nranks), MPI_BYTE, rbuf,
                             (int)(o.size / nranks), MPI_BYTE, MPI_COMM_WORLD);
            t = MPI_Wtime() - t;
            if (rank == 0 && n[op] < MAX_SAMPLES) samples[op][n[op]++] = t;
        }
        if (rank == 0) {
            double now = MPI_Wtime();
            go[1] = now - start < o.duration;
            go[0] = go[1] && now - window_start < o.window;
        }
        MPI_Bcast(go, 2, MPI_INT, 0, MPI_COMM_WORLD);
        if (!go[0] && rank == 0) {
            double now = MPI_Wtime();
            for (k = 0; k < MAX_OPS; k++) {
                log_window(out, k, &o, nranks, now - window_start, samples[k], n[k]);
                n[k] = 0;
            }
            window_start = now;
        }
    }
    if (rank == 0 && out != stdout) fclose(out);
    for (k = 0; k < MAX_OPS; k++) free(samples[k]);
    free(sbuf); free(rbuf);
    MPI_Finalize();
    return 0;
}
