/*
 * osu_bcast - fabreg probe: MPI_Bcast latency (root 0).
 *
 * Method (as OSU 7.x osu_bcast): broadcast of `size` MPI_CHARs from rank 0;
 * every call is timed on every rank and followed by a barrier; warm-up calls
 * are not counted.  Each rank's mean is reduced to rank 0, which prints the
 * average over ranks (and with -f the minimum, maximum and iterations).
 */
#include "probe_common.h"

#include <string.h>

/* One buffer, as in OSU: the root's data is broadcast in place. */
static void op(const struct probe_run *run, struct probe_coll_bufs *b, size_t size)
{
    (void)run;
    MPI_Bcast(b->send, (int)size, MPI_CHAR, 0, MPI_COMM_WORLD);
}

static void prepare(const struct probe_run *run, struct probe_coll_bufs *b, size_t size,
                    int iter)
{
    if (run->rank == 0) {
        probe_fill(b->send, size, 0, 0, iter);
    } else {
        memset(b->send, 0xff, size);
    }
}

static int check(const struct probe_run *run, const struct probe_coll_bufs *b, size_t size,
                 int iter)
{
    (void)run;
    return probe_check(b->send, size, 0, 0, iter);
}

int main(int argc, char *argv[])
{
    static const struct probe_collective bcast = {
        .info = {"osu_bcast", "OSU MPI Broadcast Latency Test", PROBE_COLLECTIVE},
        .op = op,
        .prepare = prepare,
        .check = check,
    };

    probe_collective_main(&bcast, argc, argv);
}
