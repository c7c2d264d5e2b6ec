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
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <getopt.h>
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

static int parse_ops(const char *text, struct options *o)
{
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

static int parse_options(int argc, char **argv, struct options *o, int quiet)
{
    static struct option longopts[] = {
        {"duration", required_argument, 0, 't'},
        {"window", required_argument, 0, 'w'},
        {"size", required_argument, 0, 's'},
        {"ops", required_argument, 0, 'o'},
        {"log", required_argument, 0, 'l'},
        {0, 0, 0, 0},
    };
    int c;
    if (quiet) opterr = 0;
    o->duration = 10; o->window = 1; o->size = 1 << 22; o->log = NULL;
    o->nops = 2; o->ops[0] = 0; o->ops[1] = 1;
    while ((c = getopt_long(argc, argv, "t:w:s:o:l:", longopts, NULL)) != -1) {
        switch (c) {
        case 't': o->duration = atof(optarg); break;
        case 'w': o->window = atof(optarg); break;
        case 's': o->size = atol(optarg); break;
        case 'l': o->log = optarg; break;
        case 'o':
            if (parse_ops(optarg, o)) {
                if (!quiet)
                    fprintf(stderr, "fabreg_stress: --ops takes allreduce and/or alltoall, "
                            "comma-separated (got '%s')\n", optarg);
                return 1;
            }
            break;
        default:
            if (!quiet)
                fprintf(stderr, "usage: %s [-t seconds] [-w window_seconds] [-s bytes] "
                        "[-o allreduce,alltoall] [--log file]\n", argv[0]);
            return 1;
        }
    }
    if (o->duration <= 0 || o->window <= 0 || o->size < 8) {
        if (!quiet)
            fprintf(stderr, "fabreg_stress: duration and window must be positive, "
                    "size at least 8 bytes\n");
        return 1;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *v, long n, double p)
{
    long idx = (long)(p / 100.0 * n + 0.999999) - 1;
    if (idx < 0) idx = 0;
    if (idx >= n) idx = n - 1;
    return v[idx];
}

static double unix_time(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

static void log_window(FILE *out, int op, const struct options *o, int ranks, double window_s,
                       double *t, long n)
{
    double sum = 0;
    long i;
    if (n == 0) return;
    qsort(t, n, sizeof(double), cmp_double);
    for (i = 0; i < n; i++) sum += t[i];
    fprintf(out, "{\"time\": %.3f, \"op\": \"%s\", \"size\": %ld, \"ranks\": %d, "
            "\"window_s\": %.3f, \"iterations\": %ld, \"p50_us\": %.3f, \"p99_us\": %.3f, "
            "\"max_us\": %.3f, \"mean_us\": %.3f}\n", unix_time(), op_name(op), o->size, ranks,
            window_s, n, percentile(t, n, 50) * 1e6, percentile(t, n, 99) * 1e6,
            t[n - 1] * 1e6, sum / n * 1e6);
    fflush(out);
}

int main(int argc, char **argv)
{
    struct options o;
    int rank, nranks, k;
    long count, n[MAX_OPS] = {0};
    char *sbuf, *rbuf;
    double *samples[MAX_OPS], start, window_start;
    FILE *out = stdout;
    int go[2] = {1, 1};  /* continue this window, continue the run */

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (parse_options(argc, argv, &o, rank != 0)) {
        MPI_Finalize();
        return 2;
    }
    if (rank == 0 && o.log) {
        out = fopen(o.log, "a");
        if (!out) {
            perror(o.log);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    /* allreduce: size bytes of doubles; alltoall: size bytes split over the peers. */
    count = o.size / 8;
    sbuf = malloc(o.size);
    rbuf = malloc(o.size);
    memset(sbuf, 1, o.size);
    for (k = 0; k < MAX_OPS; k++) samples[k] = malloc(sizeof(double) * MAX_SAMPLES);

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
