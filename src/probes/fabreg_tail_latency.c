/*
 * fabreg_tail_latency: per-iteration latency of allreduce or alltoall, quiet and
 * under background traffic on the same nodes and links, in one run.
 *
 * The ranks are split: the last 2*B ranks (with -I: the odd ranks, so that on
 * several nodes each node has measured and background ranks and every
 * background pair spans two nodes) form B background pairs that stream large
 * messages both ways; the others form the measured communicator. The
 * measurement alternates blocks of iterations with the background off (its
 * ranks sleep) and on (its ranks stream in bursts: each round of large messages
 * is followed by a pause, so traffic fills -D percent of the time, default 25),
 * so both samples see the same host
 * and any slow drift in the machine's load hits both alike. Every iteration
 * starts after a barrier; its time is the slowest measured rank's. Rank 0
 * prints one machine-readable block (see docs/workloads.md):
 *
 *   # fabreg_tail_latency v2 op=allreduce size=65536 iterations=500 blocks=5 ranks=4
 *   #   measured_ranks=2 background_pairs=1 background_size=524288   (one line really)
 *   # phase p50_us p90_us p99_us max_us mean_us min_us p99_over_p50
 *   quiet 51.2 60.1 90.5 300.1 55.0 49.0 1.77
 *   loaded 66.5 105.4 3212.1 5608.0 90.0 64.7 48.3
 *   # end fabreg_tail_latency status=ok background_rounds=140
 *
 * Without background pairs only the quiet row is printed. With -T SECONDS the
 * iterations per phase are those that fit the seconds (never more than -i, never
 * fewer than -M), costed by the wall time of the warm-up loop, barriers included:
 * a run no earlier launch has costed keeps to its time. The collective
 * algorithm is chosen outside the probe (Open MPI coll_tuned MCA parameters,
 * MPICH MPIR_CVAR_* variables), so one binary compares algorithms.
 */
#include "probe_samples.h"
#include "probe_workload.h"

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG_PHASE 11
#define TAG_CTRL 12
#define TAG_BG 13
#define TAG_ACK 14

enum phase { OFF = 0, ON = 1, STOP = 2 };

struct options {
    int alltoall;
    long size;
    int iterations, warmup, blocks, bg_pairs, bg_window, duty, interleave, min_iterations;
    long bg_size;
    double budget_s;
};

static const char *const ops[] = {"allreduce", "alltoall", NULL};

#define FIELD(name) offsetof(struct options, name)
static const struct workload_option option_table[] = {
    {.name = "op", .letter = 'o', .type = WORKLOAD_CHOICE, .offset = FIELD(alltoall),
     .choices = ops, .invalid = "unknown op '%s' (allreduce, alltoall)"},
    {.name = "size", .letter = 's', .type = WORKLOAD_LONG, .offset = FIELD(size)},
    {.name = "iterations", .letter = 'i', .type = WORKLOAD_INT, .offset = FIELD(iterations)},
    {.name = "warmup", .letter = 'x', .type = WORKLOAD_INT, .offset = FIELD(warmup)},
    {.name = "blocks", .letter = 'k', .type = WORKLOAD_INT, .offset = FIELD(blocks)},
    {.name = "background-pairs", .letter = 'b', .type = WORKLOAD_INT,
     .offset = FIELD(bg_pairs)},
    {.name = "background-size", .letter = 'B', .type = WORKLOAD_LONG, .offset = FIELD(bg_size)},
    {.name = "background-window", .letter = 'W', .type = WORKLOAD_INT,
     .offset = FIELD(bg_window)},
    {.name = "background-duty", .letter = 'D', .type = WORKLOAD_INT, .offset = FIELD(duty)},
    {.name = "interleave", .letter = 'I', .type = WORKLOAD_FLAG, .offset = FIELD(interleave)},
    {.name = "time-budget", .letter = 'T', .type = WORKLOAD_DOUBLE, .offset = FIELD(budget_s)},
    {.name = "min-iterations", .letter = 'M', .type = WORKLOAD_INT,
     .offset = FIELD(min_iterations)},
    {.name = NULL},
};
#undef FIELD

static const struct workload_probe probe = {
    "fabreg_tail_latency",
    "usage: %s [-o allreduce|alltoall] [-s bytes] [-i iterations] [-x warmup] [-k blocks] "
    "[-b background_pairs] [-B background_bytes] [-W background_window] "
    "[-D background_duty_percent] [-I] [-T seconds] [-M min_iterations]\n",
    option_table,
};

/* Wait for a request, sleeping `nap` microseconds between polls (0: spin), so
 * idle background ranks leave the CPUs to the measured ones. */
static void wait_request(MPI_Request *req, useconds_t nap)
{
    int done = 0;
    while (!done) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (!done && nap) usleep(nap);
    }
}

/* Poll interval while the background is off (rare wake-ups: the quiet phase
 * must stay quiet) and between bursts. */
#define NAP_OFF 2000
#define NAP_BURST 100

static void exchange(const struct options *o, char *sbuf, char *rbuf, int partner,
                     MPI_Request *req, MPI_Status *stat)
{
    int k;
    for (k = 0; k < o->bg_window; k++) {
        MPI_Irecv(rbuf + k * o->bg_size, (int)o->bg_size, MPI_BYTE, partner, TAG_BG,
                  MPI_COMM_WORLD, &req[2 * k]);
        MPI_Isend(sbuf + k * o->bg_size, (int)o->bg_size, MPI_BYTE, partner, TAG_BG,
                  MPI_COMM_WORLD, &req[2 * k + 1]);
    }
    MPI_Waitall(2 * o->bg_window, req, stat);
}

/* One background pair. The leader takes phase changes from world rank 0, passes
 * each round's phase to its partner, and acknowledges a change once it has
 * reached it (before the first round when switched on). */
static long background(const struct options *o, int me, int partner, int leader)
{
    char *sbuf = workload_alloc(o->bg_window, o->bg_size);
    char *rbuf = workload_alloc(o->bg_window, o->bg_size);
    MPI_Request *req = workload_alloc(2 * o->bg_window, sizeof(*req));
    MPI_Status *stat = workload_alloc(2 * o->bg_window, sizeof(*stat));
    MPI_Request phase_req = MPI_REQUEST_NULL, ctrl_req;
    int state = OFF, msg = OFF, ack = 1;
    long rounds = 0;
    memset(sbuf, me & 0xff, o->bg_size * o->bg_window);
    if (leader) MPI_Irecv(&msg, 1, MPI_INT, 0, TAG_PHASE, MPI_COMM_WORLD, &phase_req);
    for (;;) {
        int changed = 0;
        if (leader) {
            if (state == OFF) {
                wait_request(&phase_req, NAP_OFF);
                changed = 1;
            } else {
                MPI_Test(&phase_req, &changed, MPI_STATUS_IGNORE);
            }
            if (changed) {
                state = msg;
                if (state != STOP)
                    MPI_Irecv(&msg, 1, MPI_INT, 0, TAG_PHASE, MPI_COMM_WORLD, &phase_req);
            }
            MPI_Send(&state, 1, MPI_INT, partner, TAG_CTRL, MPI_COMM_WORLD);
            /* Acknowledge before the first burst, not after it: the measured block then
             * starts inside a burst instead of in the pause that follows it, whatever
             * the block and burst lengths (a block shorter than one burst-and-pause cycle
             * would otherwise never see traffic). */
            if (changed && state != STOP)
                MPI_Send(&ack, 1, MPI_INT, 0, TAG_ACK, MPI_COMM_WORLD);
        } else {
            int incoming;
            MPI_Irecv(&incoming, 1, MPI_INT, partner, TAG_CTRL, MPI_COMM_WORLD, &ctrl_req);
            wait_request(&ctrl_req, state != ON ? NAP_OFF : o->duty < 100 ? NAP_BURST : 0);
            state = incoming;
        }
        if (state == STOP) break;
        if (state == ON) {
            double t = MPI_Wtime();
            exchange(o, sbuf, rbuf, partner, req, stat);
            rounds++;
            /* Bursts: stream for a round, then pause so traffic fills `duty` % of the time. */
            if (leader && o->duty < 100) {
                t = (MPI_Wtime() - t) * (100.0 - o->duty) / o->duty;
                usleep((useconds_t)(t * 1e6));
            }
        }
    }
    free(sbuf); free(rbuf); free(req); free(stat);
    return rounds;
}

/* World rank of the i-th background rank: the last ones, or with -I the odd ones. */
static int background_rank(const struct options *o, int measured, int i)
{
    return o->interleave ? 2 * i + 1 : measured + i;
}

/* World rank 0 switches every background pair and waits until each has switched. */
static void set_background(const struct options *o, int phase, int measured)
{
    int p, ack;
    for (p = 0; p < o->bg_pairs; p++)
        MPI_Send(&phase, 1, MPI_INT, background_rank(o, measured, 2 * p), TAG_PHASE,
                 MPI_COMM_WORLD);
    if (phase == STOP) return;
    for (p = 0; p < o->bg_pairs; p++)
        MPI_Recv(&ack, 1, MPI_INT, background_rank(o, measured, 2 * p), TAG_ACK,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static void report(const char *phase, double *t, int n)
{
    struct samples_summary s;
    samples_summarize(t, n, &s);
    printf("%s %.3f %.3f %.3f %.3f %.3f %.3f %.4f\n", phase, s.p50 * 1e6, s.p90 * 1e6,
           s.p99 * 1e6, s.max * 1e6, s.mean * 1e6, s.min * 1e6,
           s.p50 > 0 ? s.p99 / s.p50 : 0.0);
}

struct buffers { char *s, *r; long count; };

/* The iterations per phase that fit o->budget_s, costed by `warm_s` for o->warmup
 * iterations (rank 0's wall time); the same on every measured rank. */
static int iterations_within(const struct options *o, double warm_s, int phases, MPI_Comm comm)
{
    int fit = o->iterations, floor = o->min_iterations;
    if (o->budget_s > 0 && o->warmup > 0 && warm_s > 0) {
        double per = warm_s / o->warmup * phases;
        if (o->budget_s / per < o->iterations) fit = (int)(o->budget_s / per);
    }
    if (floor < o->blocks) floor = o->blocks;
    if (floor > o->iterations) floor = o->iterations;
    if (fit < floor) fit = floor;
    MPI_Bcast(&fit, 1, MPI_INT, 0, comm);
    return fit;
}

static double one_iteration(const struct options *o, MPI_Comm comm, struct buffers *b)
{
    double t;
    MPI_Barrier(comm);
    t = MPI_Wtime();
    if (o->alltoall)
        MPI_Alltoall(b->s, (int)b->count, MPI_BYTE, b->r, (int)b->count, MPI_BYTE, comm);
    else
        MPI_Allreduce(b->s, b->r, (int)b->count, MPI_DOUBLE, MPI_SUM, comm);
    return MPI_Wtime() - t;
}

int main(int argc, char **argv)
{
    struct options o = {.alltoall = 0, .size = 8, .iterations = 1000, .warmup = 100,
                        .blocks = 5, .bg_pairs = 0, .bg_size = 512 << 10, .bg_window = 2,
                        .duty = 25, .interleave = 0, .min_iterations = 1,
                        .budget_s = 0.0};
    struct workload_run run;
    int rank, nranks, measured, color;
    MPI_Comm comm;
    long rounds = 0, total_rounds = 0;

    workload_start(&run, &probe, &o, &argc, &argv);
    rank = run.rank;
    nranks = run.nranks;
    if (o.size < 1 || o.iterations < 1 || o.warmup < 0 || o.bg_pairs < 0 ||
        o.bg_size < 1 || o.bg_window < 1 || o.blocks < 1 || o.blocks > o.iterations ||
        o.duty < 1 || o.duty > 100 || o.budget_s < 0 || o.min_iterations < 1)
        workload_refuse(&run, "sizes and counts must be positive "
                        "(blocks <= iterations, duty 1..100 %%, -T >= 0)");
    measured = nranks - 2 * o.bg_pairs;
    if (measured < 2)
        workload_refuse(&run, "%d ranks leave %d for the measurement after "
                        "%d background pairs; need at least 2", nranks, measured, o.bg_pairs);
    if (o.interleave && (nranks % 2 || nranks / 2 != 2 * o.bg_pairs))
        workload_refuse(&run, "-I needs every odd rank in a background "
                        "pair: %d ranks, so %d background pairs, not %d", nranks, nranks / 4,
                        o.bg_pairs);
    color = o.interleave ? rank % 2 : rank >= measured;
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &comm);

    if (color == 0) {
        int n, per_block, b, i, nq = 0, nl = 0;
        int phases = o.bg_pairs > 0 ? 2 : 1;
        double *quiet, *loaded, *quiet_max = NULL, *loaded_max = NULL, warm_s;
        struct buffers buf;
        size_t bytes;
        MPI_Comm_size(comm, &n);
        /* allreduce: size bytes of doubles; alltoall: size bytes to every peer. */
        buf.count = o.alltoall ? o.size : (o.size + 7) / 8;
        bytes = o.alltoall ? (size_t)o.size * n : (size_t)buf.count * 8;
        buf.s = workload_alloc(1, bytes); buf.r = workload_alloc(1, bytes);
        memset(buf.s, 1, bytes);
        warm_s = MPI_Wtime();
        for (i = 0; i < o.warmup; i++) one_iteration(&o, comm, &buf);
        warm_s = MPI_Wtime() - warm_s;
        o.iterations = iterations_within(&o, warm_s, phases, comm);
        per_block = o.iterations / o.blocks;
        quiet = workload_alloc(per_block * o.blocks, sizeof(double));
        loaded = workload_alloc(per_block * o.blocks, sizeof(double));
        for (b = 0; b < o.blocks * phases; b++) {
            int on = phases == 2 && b % 2 == 1;
            if (phases == 2 && rank == 0) set_background(&o, on ? ON : OFF, measured);
            for (i = 0; i < per_block; i++) {
                double t = one_iteration(&o, comm, &buf);
                if (on) loaded[nl++] = t; else quiet[nq++] = t;
            }
        }
        if (rank == 0 && o.bg_pairs > 0) set_background(&o, STOP, measured);
        if (rank == 0) {
            quiet_max = workload_alloc(nq, sizeof(double));
            loaded_max = workload_alloc(nl > 0 ? nl : 1, sizeof(double));
        }
        MPI_Reduce(quiet, quiet_max, nq, MPI_DOUBLE, MPI_MAX, 0, comm);
        if (nl > 0) MPI_Reduce(loaded, loaded_max, nl, MPI_DOUBLE, MPI_MAX, 0, comm);
        MPI_Reduce(&rounds, &total_rounds, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("# fabreg_tail_latency v2 op=%s size=%ld iterations=%d blocks=%d ranks=%d "
                   "measured_ranks=%d background_pairs=%d background_size=%ld\n",
                   ops[o.alltoall], o.size, nq, o.blocks, nranks, measured,
                   o.bg_pairs, o.bg_size);
            printf("# phase p50_us p90_us p99_us max_us mean_us min_us p99_over_p50\n");
            report("quiet", quiet_max, nq);
            if (nl > 0) report("loaded", loaded_max, nl);
            printf("# end fabreg_tail_latency status=ok background_rounds=%ld\n", total_rounds);
            fflush(stdout);
        }
        free(buf.s); free(buf.r); free(quiet); free(loaded); free(quiet_max); free(loaded_max);
    } else {
        int index = o.interleave ? rank / 2 : rank - measured;  /* among background ranks */
        int leader = index % 2 == 0;
        int partner = background_rank(&o, measured, leader ? index + 1 : index - 1);
        rounds = background(&o, rank, partner, leader);
        if (!leader) rounds = 0;  /* count each pair's rounds once */
        MPI_Reduce(&rounds, &total_rounds, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    }
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return 0;
}
