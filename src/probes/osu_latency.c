/*
 * osu_latency - fabreg probe: point-to-point latency between two ranks.
 *
 * Method (as OSU 7.x osu_latency): for each size, rank 0 sends a message of
 * `size` MPI_CHARs to rank 1 with MPI_Send and waits for the same-size reply
 * with MPI_Recv (ping-pong).  Each round trip is timed on rank 0; warm-up
 * round trips are not counted; latency = total time / (2 * iterations).
 * A barrier separates sizes.  Output in the OSU 7.x text format.
 */
#include "probe_common.h"

/* One size: ping-pong round trips, each timed on rank 0; returns the latency in us. */
static double run_size(const struct probe_run *run, const struct probe_pt2pt_bufs *b,
                       size_t size, int iterations, int skip, int *errors)
{
    char *const s_buf = b->send, *const r_buf = b->recv;
    const int rank = run->rank, peer = 1 - run->rank, validate = run->opt.validate;
    const int count = (int)size;
    double total = 0.0, t_start, t_end;
    int i;

    for (i = 0; i < iterations + skip; i++) {
        if (validate) {
            probe_prepare_exchange(run, s_buf, r_buf, size, peer, i);
        }
        if (rank == 0) {
            t_start = MPI_Wtime();
            MPI_Send(s_buf, count, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(r_buf, count, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            t_end = MPI_Wtime();
            if (i >= skip) {
                total += t_end - t_start;
            }
        } else {
            MPI_Recv(r_buf, count, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(s_buf, count, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
        if (validate) {
            *errors += probe_check(r_buf, size, peer, rank, i);
        }
    }
    return total * 1e6 / (2.0 * iterations);
}

int main(int argc, char *argv[])
{
    static const struct probe_pt2pt latency = {
        .info = {"osu_latency", "OSU MPI Latency Test", PROBE_LATENCY},
        .run_size = run_size,
    };

    probe_pt2pt_main(&latency, argc, argv);
}
