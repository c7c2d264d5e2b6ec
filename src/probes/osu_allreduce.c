/*
 * osu_allreduce - fabreg probe: MPI_Allreduce latency.
 *
 * Method (as OSU 7.x osu_allreduce): MPI_SUM over `size` MPI_CHARs; every
 * call is timed on every rank and followed by a barrier; warm-up calls are
 * not counted.  Each rank's mean is reduced to rank 0, which prints the
 * average over ranks (and with -f the minimum, maximum and iterations).
 */
#include "probe_common.h"

static void op(const struct probe_run *run, struct probe_coll_bufs *b, size_t size)
{
    (void)run;
    MPI_Allreduce(b->send, b->recv, (int)size, MPI_CHAR, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char *argv[])
{
    static const struct probe_collective allreduce = {
        .info = {"osu_allreduce", "OSU MPI Allreduce Latency Test", PROBE_COLLECTIVE},
        .op = op,
        .prepare = probe_prepare_reduction,
        .check = probe_check_reduction,
    };

    probe_collective_main(&allreduce, argc, argv);
}
