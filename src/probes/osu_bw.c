/*
 * osu_bw - fabreg probe: unidirectional point-to-point bandwidth.
 *
 * Method (as OSU 7.x osu_bw): per iteration rank 0 posts a window of
 * non-blocking sends (default 64, -W) of `size` MPI_CHARs from one buffer,
 * waits for all of them, then waits for a 1-byte acknowledgement from rank 1,
 * which posted the matching window of receives.  Each iteration is timed on
 * rank 0; warm-up iterations are not counted; bandwidth in MB/s (10^6 bytes)
 * = size * window * iterations / total time.  A barrier separates sizes.
 */
#include "probe_common.h"

#include <string.h>

/* One size: windows from rank 0 to rank 1, each with its ack timed on rank 0; MB/s. */
static double run_size(const struct probe_run *run, const struct probe_pt2pt_bufs *b,
                       size_t size, int iterations, int skip, int *errors)
{
    char *const s_buf = b->send, *const r_buf = b->recv;
    MPI_Request *const requests = b->requests;
    MPI_Status *const statuses = b->statuses;
    const int rank = run->rank, window = run->opt.window, validate = run->opt.validate;
    const int count = (int)size;
    double total = 0.0, t_start, t_end;
    int i, j;

    for (i = 0; i < iterations + skip; i++) {
        if (validate) {
            if (rank == 0) {
                probe_fill(s_buf, size, 0, 1, i);
            } else {
                memset(r_buf, 0xff, size);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        if (rank == 0) {
            t_start = MPI_Wtime();
            for (j = 0; j < window; j++) {
                MPI_Isend(s_buf, count, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &requests[j]);
            }
            MPI_Waitall(window, requests, statuses);
            MPI_Recv(r_buf, 1, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            t_end = MPI_Wtime();
            if (i >= skip) {
                total += t_end - t_start;
            }
        } else {
            for (j = 0; j < window; j++) {
                MPI_Irecv(r_buf, count, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &requests[j]);
            }
            MPI_Waitall(window, requests, statuses);
            MPI_Send(s_buf, 1, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
            if (validate) {
                *errors += probe_check(r_buf, size, 0, 1, i);
            }
        }
    }
    return (double)size / 1e6 * iterations * window / total;
}

int main(int argc, char *argv[])
{
    static const struct probe_pt2pt bw = {
        .info = {"osu_bw", "OSU MPI Bandwidth Test", PROBE_BANDWIDTH},
        .run_size = run_size,
    };

    probe_pt2pt_main(&bw, argc, argv);
}
