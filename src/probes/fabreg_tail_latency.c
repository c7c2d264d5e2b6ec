/*
 * fabreg_tail_latency: per-iteration latency of allreduce or alltoall, with
 * optional background traffic on the same nodes and links.
 *
 * The ranks are split: the last 2*B ranks form B background pairs that stream
 * large messages both ways until the measurement ends; the others form the
 * measured communicator. Every measured iteration starts after a barrier and its
 * time is the slowest rank's; rank 0 sorts the iteration times and prints one
 * machine-readable block (see docs/workloads.md):
 *
 *   # fabreg_tail_latency v1 op=allreduce size=8 iterations=2000 ranks=4 measured_ranks=2
 *   #   background_pairs=1 background_size=1048576  (one line in the real output)
 *   # p50_us p90_us p99_us max_us mean_us min_us p99_over_p50
 *   10.1 11.2 30.5 95.0 11.0 9.2 3.02
 *   # end fabreg_tail_latency status=ok background_rounds=1234
 *
 * The collective algorithm is chosen outside the probe (OpenMPI coll_tuned MCA
 * parameters, MPICH MPIR_CVAR_* variables), so one binary compares algorithms.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <getopt.h>

#define TAG_STOP 11
#define TAG_CTRL 12
#define TAG_BG 13

struct options {
    int alltoall;
    long size;
    int iterations, warmup, bg_pairs, bg_window;
    long bg_size;
};

static int parse_options(int argc, char **argv, struct options *o, int quiet)
{
    static struct option longopts[] = {
        {"op", required_argument, 0, 'o'},
        {"size", required_argument, 0, 's'},
        {"iterations", required_argument, 0, 'i'},
        {"warmup", required_argument, 0, 'x'},
        {"background-pairs", required_argument, 0, 'b'},
        {"background-size", required_argument, 0, 'B'},
        {"background-window", required_argument, 0, 'W'},
        {0, 0, 0, 0},
    };
    int c;
    if (quiet) opterr = 0;
    o->alltoall = 0; o->size = 8; o->iterations = 1000; o->warmup = 100;
    o->bg_pairs = 0; o->bg_size = 1 << 20; o->bg_window = 4;
    while ((c = getopt_long(argc, argv, "o:s:i:x:b:B:W:", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (!strcmp(optarg, "allreduce")) o->alltoall = 0;
            else if (!strcmp(optarg, "alltoall")) o->alltoall = 1;
            else {
                if (!quiet)
                    fprintf(stderr, "fabreg_tail_latency: unknown op '%s' "
                            "(allreduce, alltoall)\n", optarg);
                return 1;
            }
            break;
        case 's': o->size = atol(optarg); break;
        case 'i': o->iterations = atoi(optarg); break;
        case 'x': o->warmup = atoi(optarg); break;
        case 'b': o->bg_pairs = atoi(optarg); break;
        case 'B': o->bg_size = atol(optarg); break;
        case 'W': o->bg_window = atoi(optarg); break;
        default:
            if (!quiet)
                fprintf(stderr, "usage: %s [-o allreduce|alltoall] [-s bytes] [-i iterations] "
                        "[-x warmup] [-b background_pairs] [-B background_bytes] "
                        "[-W background_window]\n", argv[0]);
            return 1;
        }
    }
    if (o->size < 1 || o->iterations < 1 || o->warmup < 0 || o->bg_pairs < 0 ||
        o->bg_size < 1 || o->bg_window < 1) {
        if (!quiet) fprintf(stderr, "fabreg_tail_latency: sizes and counts must be positive\n");
        return 1;
    }
    return 0;
}

/* One background pair: both sides exchange `window` large messages per round;
 * the leader learns from world rank 0 when to stop and tells its partner. */
static long background(const struct options *o, int me, int partner, int leader)
{
    char *sbuf = malloc(o->bg_size * o->bg_window), *rbuf = malloc(o->bg_size * o->bg_window);
    MPI_Request *req = malloc(sizeof(*req) * 2 * o->bg_window);
    MPI_Status *stat = malloc(sizeof(*stat) * 2 * o->bg_window);
    MPI_Request stop_req = MPI_REQUEST_NULL;
    int stop = 0, dummy = 0, k;
    long rounds = 0;
    memset(sbuf, me & 0xff, o->bg_size * o->bg_window);
    if (leader) MPI_Irecv(&dummy, 1, MPI_INT, 0, TAG_STOP, MPI_COMM_WORLD, &stop_req);
    for (;;) {
        if (leader) {
            MPI_Test(&stop_req, &stop, MPI_STATUS_IGNORE);
            MPI_Send(&stop, 1, MPI_INT, partner, TAG_CTRL, MPI_COMM_WORLD);
        } else {
            MPI_Recv(&stop, 1, MPI_INT, partner, TAG_CTRL, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        if (stop) break;
        for (k = 0; k < o->bg_window; k++) {
            MPI_Irecv(rbuf + k * o->bg_size, (int)o->bg_size, MPI_BYTE, partner, TAG_BG,
                      MPI_COMM_WORLD, &req[2 * k]);
            MPI_Isend(sbuf + k * o->bg_size, (int)o->bg_size, MPI_BYTE, partner, TAG_BG,
                      MPI_COMM_WORLD, &req[2 * k + 1]);
        }
        MPI_Waitall(2 * o->bg_window, req, stat);
        rounds++;
    }
    free(sbuf); free(rbuf); free(req); free(stat);
    return rounds;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted values. */
static double percentile(const double *v, int n, double p)
{
    int idx = (int)(p / 100.0 * n + 0.999999) - 1;
    if (idx < 0) idx = 0;
    if (idx >= n) idx = n - 1;
    return v[idx];
}

static void measure(const struct options *o, MPI_Comm comm, double *times)
{
    int n, i;
    long count;
    char *sbuf, *rbuf;
    MPI_Comm_size(comm, &n);
    /* allreduce: size bytes of doubles; alltoall: size bytes to every peer. */
    count = o->alltoall ? o->size : (o->size + 7) / 8;
    sbuf = malloc(o->alltoall ? o->size * n : count * 8);
    rbuf = malloc(o->alltoall ? o->size * n : count * 8);
    memset(sbuf, 1, o->alltoall ? o->size * n : count * 8);
    for (i = -o->warmup; i < o->iterations; i++) {
        double t;
        MPI_Barrier(comm);
        t = MPI_Wtime();
        if (o->alltoall)
            MPI_Alltoall(sbuf, (int)count, MPI_BYTE, rbuf, (int)count, MPI_BYTE, comm);
        else
            MPI_Allreduce(sbuf, rbuf, (int)count, MPI_DOUBLE, MPI_SUM, comm);
        t = MPI_Wtime() - t;
        if (i >= 0) times[i] = t;
    }
    free(sbuf); free(rbuf);
}

int main(int argc, char **argv)
{
    struct options o;
    int rank, nranks, measured, color;
    MPI_Comm comm;
    double *times = NULL, *slowest = NULL;
    long rounds = 0, total_rounds = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (parse_options(argc, argv, &o, rank != 0)) {
        MPI_Finalize();
        return 2;
    }
    measured = nranks - 2 * o.bg_pairs;
    if (measured < 2) {
        if (rank == 0)
            fprintf(stderr, "fabreg_tail_latency: %d ranks leave %d for the measurement after "
                    "%d background pairs; need at least 2\n", nranks, measured, o.bg_pairs);
        MPI_Finalize();
        return 2;
    }
    color = rank < measured ? 0 : 1;
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &comm);
    MPI_Barrier(MPI_COMM_WORLD);

    if (color == 0) {
        int p;
        times = malloc(sizeof(double) * o.iterations);
        if (rank == 0) slowest = malloc(sizeof(double) * o.iterations);
        measure(&o, comm, times);
        MPI_Reduce(times, slowest, o.iterations, MPI_DOUBLE, MPI_MAX, 0, comm);
        if (rank == 0)
            for (p = 0; p < o.bg_pairs; p++) {
                int stop = 1;
                MPI_Send(&stop, 1, MPI_INT, measured + 2 * p, TAG_STOP, MPI_COMM_WORLD);
            }
    } else {
        int offset = rank - measured;
        int leader = offset % 2 == 0;
        rounds = background(&o, rank, leader ? rank + 1 : rank - 1, leader);
        if (!leader) rounds = 0;  /* count each pair's rounds once */
    }
    MPI_Reduce(&rounds, &total_rounds, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

    if (rank == 0) {
        int n = o.iterations, i;
        double sum = 0, p50, p99;
        qsort(slowest, n, sizeof(double), cmp_double);
        for (i = 0; i < n; i++) sum += slowest[i];
        p50 = percentile(slowest, n, 50);
        p99 = percentile(slowest, n, 99);
        printf("# fabreg_tail_latency v1 op=%s size=%ld iterations=%d ranks=%d measured_ranks=%d "
               "background_pairs=%d background_size=%ld\n", o.alltoall ? "alltoall" : "allreduce",
               o.size, n, nranks, measured, o.bg_pairs, o.bg_size);
        printf("# p50_us p90_us p99_us max_us mean_us min_us p99_over_p50\n");
        printf("%.3f %.3f %.3f %.3f %.3f %.3f %.4f\n", p50 * 1e6,
               percentile(slowest, n, 90) * 1e6, p99 * 1e6, slowest[n - 1] * 1e6,
               sum / n * 1e6, slowest[0] * 1e6, p50 > 0 ? p99 / p50 : 0.0);
        printf("# end fabreg_tail_latency status=ok background_rounds=%ld\n", total_rounds);
        fflush(stdout);
    }
    free(times); free(slowest);
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return 0;
}
