/*
 * osu_bibw - fabreg probe: bidirectional point-to-point bandwidth.
 *
 * Method (as OSU 7.x osu_bibw): per iteration both ranks post a window of
 * non-blocking receives (default 64, -W) and then a window of non-blocking
 * sends of `size` MPI_CHARs to each other, and wait for all of them.  Each
 * iteration is timed on rank 0; warm-up iterations are not counted;
 * bandwidth in MB/s (10^6 bytes) = 2 * size * window * iterations / total time.
 * A barrier separates sizes.
 */
#include "probe_common.h"

/* One size: windows both ways at once, each iteration timed on rank 0; MB/s both ways. */
static double run_size(const struct probe_run *run, const struct probe_pt2pt_bufs *b,
                       size_t size, int iterations, int skip, int *errors)
{
    char *const s_buf = b->send, *const r_buf = b->recv;
    const int rank = run->rank, peer = 1 - run->rank;
    const int window = run->opt.window, validate = run->opt.validate;
    MPI_Request *const send_requests = b->requests, *const recv_requests = b->requests + window;
    MPI_Status *const statuses = b->statuses;
    const int count = (int)size;
    /* Rank 0 receives on tag 10 and sends on tag 100; rank 1 the reverse. */
    const int recv_tag = rank == 0 ? 10 : 100;
    const int send_tag = rank == 0 ? 100 : 10;
    double total = 0.0, t_start = 0.0, t_end;
    int i, j;

    for (i = 0; i < iterations + skip; i++) {
        if (validate) {
            probe_prepare_exchange(run, s_buf, r_buf, size, peer, i);
        }
        if (rank == 0) {
            t_start = MPI_Wtime();
        }
        for (j = 0; j < window; j++) {
            MPI_Irecv(r_buf, count, MPI_CHAR, peer, recv_tag, MPI_COMM_WORLD,
                      &recv_requests[j]);
        }
        for (j = 0; j < window; j++) {
            MPI_Isend(s_buf, count, MPI_CHAR, peer, send_tag, MPI_COMM_WORLD,
                      &send_requests[j]);
        }
        if (rank == 0) {
            MPI_Waitall(window, send_requests, statuses);
            MPI_Waitall(window, recv_requests, statuses);
            t_end = MPI_Wtime();
            if (i >= skip) {
                total += t_end - t_start;
            }
        } else {
            MPI_Waitall(window, recv_requests, statuses);
            MPI_Waitall(window, send_requests, statuses);
        }
        if (validate) {
            *errors += probe_check(r_buf, size, peer, rank, i);
        }
    }
    return (double)size / 1e6 * iterations * window * 2 / total;
}

int main(int argc, char *argv[])
{
    static const struct probe_pt2pt bibw = {
        .info = {"osu_bibw", "OSU MPI Bi-Directional Bandwidth Test", PROBE_BANDWIDTH},
        .run_size = run_size,
    };

    probe_pt2pt_main(&bibw, argc, argv);
}
