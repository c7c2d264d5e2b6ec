/*
 * probe_common.h - shared pieces of the fabreg benchmark probes.
 *
 * The probes are small C + MPI programs that measure what the OSU
 * Micro-Benchmarks measure, the same way, and print their results in the
 * OSU 7.x text format so that one parser serves both.  This header holds
 * what every one of these osu_* probes needs: option parsing, the OSU default
 * iteration counts, page-aligned buffers, the output layout, the per-size
 * frame around a point-to-point timed loop, a data pattern for -c, and the
 * driver shared by the blocking collectives.  (fabreg's own workload probes,
 * fabreg_*.c, use probe_workload.h and probe_samples.h instead.)
 *
 * Part of fabreg; written for the project, not derived from OSU code.
 */
#ifndef PROBE_COMMON_H
#define PROBE_COMMON_H

#include <stddef.h>

#include <mpi.h>

enum probe_family {
    PROBE_LATENCY,    /* osu_latency: exactly two ranks, "Latency (us)"      */
    PROBE_BANDWIDTH,  /* osu_bw, osu_bibw: two ranks, -W, "Bandwidth (MB/s)" */
    PROBE_COLLECTIVE  /* blocking collectives: >= 2 ranks, -f, averages      */
};

/* What a probe is: fixed per program. */
struct probe_info {
    const char *name;          /* program name, e.g. "osu_latency"          */
    const char *title;         /* OSU title, e.g. "OSU MPI Latency Test"    */
    enum probe_family family;
};

/* What the user asked for, after defaults and options. */
struct probe_options {
    size_t min_size;
    size_t max_size;
    int iters_small;   /* iterations for sizes <= PROBE_LARGE_MESSAGE */
    int iters_large;   /* iterations for larger sizes                 */
    int skip_small;    /* warm-up iterations, not timed               */
    int skip_large;
    int window;        /* -W, bandwidth probes only                   */
    int full;          /* -f, collectives only                        */
    int validate;      /* -c                                          */
};

/* One running probe: identity, options and place in MPI_COMM_WORLD. */
struct probe_run {
    const struct probe_info *info;
    struct probe_options opt;
    int rank;
    int nranks;
};

/*
 * -c preparation of one iteration where both ranks send (osu_latency,
 * osu_bibw): write this rank's pattern for `peer`, clear the receive buffer,
 * then synchronise, so that the timed part starts together.
 */
void probe_prepare_exchange(const struct probe_run *run, char *s_buf, char *r_buf,
                            size_t size, int peer, int iter);

/*
 * -c data pattern: fill `buf` with the bytes rank `from` writes for rank `to`
 * in iteration `iter` (byte k depends on all four).  Values stay small (0..7) so that sums over
 * ranks in MPI_CHAR reductions do not overflow for up to 16 ranks.
 */
void probe_fill(void *buf, size_t len, int from, int to, int iter);
/* Number of bytes of buf that differ from the pattern. */
int probe_check(const void *buf, size_t len, int from, int to, int iter);

/*
 * Point-to-point probe description, run by probe_run_pt2pt(), which does
 * what is the same in every one: buffers, header, the sizes with their OSU
 * iteration counts, touching the buffers and a barrier before each size, the
 * row after it and the stop after a validation failure.  The probe's own
 * timed loop stays whole inside its run_size(), so the driver adds nothing to
 * it (one call per size, outside the timing).
 */
struct probe_pt2pt_bufs {
    char *send;
    char *recv;
    MPI_Request *requests;  /* PROBE_BANDWIDTH: 2 x window, else NULL */
    MPI_Status *statuses;   /* PROBE_BANDWIDTH: window (a real array: MPICH's
                               MPI_STATUSES_IGNORE trips gcc's -Wstringop-overflow
                               on MPI_Waitall), else NULL */
};

struct probe_pt2pt {
    struct probe_info info;  /* family PROBE_LATENCY or PROBE_BANDWIDTH */
    /*
     * One size on both ranks: `skip` warm-up then `iterations` timed
     * iterations; returns the figure rank 0 prints and adds the -c errors
     * this rank saw to *errors.
     */
    double (*run_size)(const struct probe_run *run, const struct probe_pt2pt_bufs *b,
                       size_t size, int iterations, int skip, int *errors);
};


/* The whole program of a point-to-point probe: start, run, finish. */
void probe_pt2pt_main(const struct probe_pt2pt *pt2pt, int argc, char **argv)
    __attribute__((noreturn));

/*
 * Blocking collective description, run by probe_run_collective().
 * Buffers are sized for the largest message, times the number of ranks where
 * a collective needs one block per rank.
 */
struct probe_coll_bufs {
    char *send;
    char *recv;
};

struct probe_collective {
    struct probe_info info;  /* family PROBE_COLLECTIVE */
    /* The timed operation: one collective of `size` bytes (MPI_CHAR). */
    void (*op)(const struct probe_run *run, struct probe_coll_bufs *b, size_t size);
    /* -c only: write the expected inputs of iteration `iter` (untimed). */
    void (*prepare)(const struct probe_run *run, struct probe_coll_bufs *b,
                    size_t size, int iter);
    /* -c only: count wrong bytes in the result of iteration `iter`. */
    int (*check)(const struct probe_run *run, const struct probe_coll_bufs *b,
                 size_t size, int iter);
    int send_per_rank;   /* send buffer holds one block per rank (alltoall)    */
    int recv_per_rank;   /* recv buffer holds one block per rank (all* gathers) */
    int barrier_before;  /* barrier before each operation (osu_reduce) instead
                            of after it (the other collectives)               */
};


/* The whole program of a blocking collective probe: start, run, finish. */
void probe_collective_main(const struct probe_collective *coll, int argc, char **argv)
    __attribute__((noreturn));

/*
 * -c for the MPI_SUM reductions (osu_allreduce, osu_reduce): every rank
 * contributes its pattern (as sender to rank 0) and the result buffer is
 * cleared; the check counts result bytes that differ from the sum of all
 * ranks' patterns (on every rank: use it only where the result arrives).
 */
void probe_prepare_reduction(const struct probe_run *run, struct probe_coll_bufs *b,
                             size_t size, int iter);
int probe_check_reduction(const struct probe_run *run, const struct probe_coll_bufs *b,
                          size_t size, int iter);

#endif /* PROBE_COMMON_H */
