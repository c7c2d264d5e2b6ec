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

#include <stdlib.h>
#include <string.h>

static const struct probe_info info = {
    "osu_bibw", "OSU MPI Bi-Directional Bandwidth Test", PROBE_BANDWIDTH,
};

int main(int argc, char *argv[])
{
    struct probe_run run;
    MPI_Request *send_requests, *recv_requests;
    MPI_Status *statuses; /* a real array: MPICH's MPI_STATUSES_IGNORE trips gcc's
                             -Wstringop-overflow on MPI_Waitall */
    char *s_buf, *r_buf;
    size_t size;
    int window, peer, failed = 0;

    probe_start(&run, &info, &argc, &argv);
    window = run.opt.window;
    peer = 1 - run.rank;
    send_requests = malloc(sizeof(*send_requests) * (size_t)window);
    recv_requests = malloc(sizeof(*recv_requests) * (size_t)window);
    statuses = malloc(sizeof(*statuses) * (size_t)window);
    s_buf = probe_alloc(&run, run.opt.max_size);
    r_buf = probe_alloc(&run, run.opt.max_size);
    if (send_requests == NULL || recv_requests == NULL || statuses == NULL) {
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
    }
    probe_print_header(&run);

    for (size = probe_first_size(&run); size <= run.opt.max_size;
         size = probe_next_size(size)) {
        const int iterations = probe_iterations(&run, size);
        const int skip = probe_skip(&run, size);
        const int count = (int)size;
        /* Rank 0 receives on tag 10 and sends on tag 100; rank 1 the reverse. */
        const int recv_tag = run.rank == 0 ? 10 : 100;
        const int send_tag = run.rank == 0 ? 100 : 10;
        double total = 0.0, t_start = 0.0, t_end;
        int errors = 0, i, j;

        memset(s_buf, 'a', size);
        memset(r_buf, 'b', size);
        MPI_Barrier(MPI_COMM_WORLD);

        for (i = 0; i < iterations + skip; i++) {
            if (run.opt.validate) {
                probe_fill(s_buf, size, run.rank, peer, i);
                memset(r_buf, 0xff, size);
                MPI_Barrier(MPI_COMM_WORLD);
            }
            if (run.rank == 0) {
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
            if (run.rank == 0) {
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
            if (run.opt.validate) {
                errors += probe_check(r_buf, size, peer, run.rank, i);
            }
        }

        if (run.opt.validate) {
            errors = probe_sum_errors(errors);
        }
        probe_print_pt2pt_row(&run, size,
                              (double)size / 1e6 * iterations * window * 2 / total, errors);
        if (errors) {
            probe_report_failure(&run, size);
            failed = 1;
            break;
        }
    }

    free(send_requests);
    free(recv_requests);
    free(statuses);
    free(s_buf);
    free(r_buf);
    probe_finish(&run, failed);
    return 0;
}
