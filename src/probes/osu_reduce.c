/*
 * osu_reduce - fabreg probe: MPI_Reduce latency (root 0).
 *
 * Method (as OSU 7.x osu_reduce): MPI_SUM over `size` MPI_CHARs to rank 0;
 * a barrier precedes every call, every call is timed on every rank; warm-up
 * calls are not counted.  Each rank's mean is reduced to rank 0, which prints
 * the average over ranks (and with -f the minimum, maximum and iterations).
 */
#include "probe_common.h"

#include <string.h>

static const struct probe_info info = {
    "osu_reduce", "OSU MPI Reduce Latency Test", PROBE_COLLECTIVE,
};

static void op(const struct probe_run *run, struct probe_coll_bufs *b, size_t size)
{
    (void)run;
    MPI_Reduce(b->send, b->recv, (int)size, MPI_CHAR, MPI_SUM, 0, MPI_COMM_WORLD);
}

static void prepare(const struct probe_run *run, struct probe_coll_bufs *b, size_t size,
                    int iter)
{
    probe_fill(b->send, size, run->rank, 0, iter);
    memset(b->recv, 0xff, size);
}

static int check(const struct probe_run *run, const struct probe_coll_bufs *b, size_t size,
                 int iter)
{
    const unsigned char *got = (const unsigned char *)b->recv;
    int wrong = 0, r;
    size_t k;

    if (run->rank != 0) {
        return 0; /* only the root receives a result */
    }
    for (k = 0; k < size; k++) {
        unsigned sum = 0;

        for (r = 0; r < run->nranks; r++) {
            sum += probe_pattern(r, 0, k, iter);
        }
        if (got[k] != (unsigned char)(sum & 0xffu)) {
            wrong++;
        }
    }
    return wrong;
}

int main(int argc, char *argv[])
{
    static const struct probe_collective coll = {
        op, prepare, check, 0, 0, 1,
    };
    struct probe_run run;

    probe_start(&run, &info, &argc, &argv);
    probe_finish(&run, probe_run_collective(&run, &coll));
    return 0;
}
