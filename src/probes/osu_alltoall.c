/*
 * osu_alltoall - fabreg probe: MPI_Alltoall latency.
 *
 * Method (as OSU 7.x osu_alltoall): every rank sends `size` MPI_CHARs to
 * every rank; every call is timed on every rank and followed by a barrier;
 * warm-up calls are not counted.  Each rank's mean is reduced to rank 0,
 * which prints the average over ranks (and with -f the minimum, maximum and
 * iterations).
 */
#include "probe_common.h"

#include <string.h>

static void op(const struct probe_run *run, struct probe_coll_bufs *b, size_t size)
{
    (void)run;
    MPI_Alltoall(b->send, (int)size, MPI_CHAR, b->recv, (int)size, MPI_CHAR,
                 MPI_COMM_WORLD);
}

/* Block j of the send buffer goes to rank j. */
static void prepare(const struct probe_run *run, struct probe_coll_bufs *b, size_t size,
                    int iter)
{
    int j;

    for (j = 0; j < run->nranks; j++) {
        probe_fill(b->send + (size_t)j * size, size, run->rank, j, iter);
    }
    memset(b->recv, 0xff, size * (size_t)run->nranks);
}

/* Block j of the receive buffer came from rank j. */
static int check(const struct probe_run *run, const struct probe_coll_bufs *b, size_t size,
                 int iter)
{
    int wrong = 0, j;

    for (j = 0; j < run->nranks; j++) {
        wrong += probe_check(b->recv + (size_t)j * size, size, j, run->rank, iter);
    }
    return wrong;
}

int main(int argc, char *argv[])
{
    static const struct probe_collective alltoall = {
        .info = {"osu_alltoall", "OSU MPI All-to-All Personalized Exchange Latency Test",
                 PROBE_COLLECTIVE},
        .op = op,
        .prepare = prepare,
        .check = check,
        .send_per_rank = 1,
        .recv_per_rank = 1,
    };

    probe_collective_main(&alltoall, argc, argv);
}
