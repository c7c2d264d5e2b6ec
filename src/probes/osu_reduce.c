/*
 * osu_reduce - fabreg probe: MPI_Reduce latency (root 0).
 *
 * Method (as OSU 7.x osu_reduce): MPI_SUM over `size` MPI_CHARs to rank 0;
 * a barrier precedes every call, every call is timed on every rank; warm-up
 * calls are not counted.  Each rank's mean is reduced to rank 0, which prints
 * the average over ranks (and with -f the minimum, maximum and iterations).
 */
#include "probe_common.h"

static void op(const struct probe_run *run, struct probe_coll_bufs *b, size_t size)
{
    (void)run;
    MPI_Reduce(b->send, b->recv, (int)size, MPI_CHAR, MPI_SUM, 0, MPI_COMM_WORLD);
}

/* Only the root receives a result. */
static int check(const struct probe_run *run, const struct probe_coll_bufs *b, size_t size,
                 int iter)
{
    return run->rank == 0 ? probe_check_reduction(run, b, size, iter) : 0;
}

int main(int argc, char *argv[])
{
    static const struct probe_collective reduce = {
        .info = {"osu_reduce", "OSU MPI Reduce Latency Test", PROBE_COLLECTIVE},
        .op = op,
        .prepare = probe_prepare_reduction,
        .check = check,
        .barrier_before = 1,
    };

    probe_collective_main(&reduce, argc, argv);
}
