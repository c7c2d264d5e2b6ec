/*
 * osu_allgather - fabreg probe: MPI_Allgather latency.
 *
 * Method (as OSU 7.x osu_allgather): every rank contributes `size` MPI_CHARs
 * and receives every rank's block; every call is timed on every rank and
 * followed by a barrier; warm-up calls are not counted.  Each rank's mean is
 * reduced to rank 0, which prints the average over ranks (and with -f the
 * minimum, maximum and iterations).
 */
#include "probe_common.h"

#include <string.h>

static void op(const struct probe_run *run, struct probe_coll_bufs *b, size_t size)
{
    (void)run;
    MPI_Allgather(b->send, (int)size, MPI_CHAR, b->recv, (int)size, MPI_CHAR,
                  MPI_COMM_WORLD);
}

static void prepare(const struct probe_run *run, struct probe_coll_bufs *b, size_t size,
                    int iter)
{
    probe_fill(b->send, size, run->rank, 0, iter);
    memset(b->recv, 0xff, size * (size_t)run->nranks);
}

/* Block j of the receive buffer is rank j's contribution. */
static int check(const struct probe_run *run, const struct probe_coll_bufs *b, size_t size,
                 int iter)
{
    int wrong = 0, j;

    for (j = 0; j < run->nranks; j++) {
        wrong += probe_check(b->recv + (size_t)j * size, size, j, 0, iter);
    }
    return wrong;
}

int main(int argc, char *argv[])
{
    static const struct probe_collective allgather = {
        .info = {"osu_allgather", "OSU MPI Allgather Latency Test", PROBE_COLLECTIVE},
        .op = op,
        .prepare = prepare,
        .check = check,
        .recv_per_rank = 1,
    };

    probe_collective_main(&allgather, argc, argv);
}
