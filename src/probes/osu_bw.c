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

#include <stdlib.h>
#include <string.h>

static const struct probe_info info = {
    "osu_bw", "OSU MPI Bandwidth Test", PROBE_BANDWIDTH,
};

int main(int argc, char *argv[])
{
    struct probe_run run;
    MPI_Request *requests;
    MPI_Status *statuses; /* a real array: MPICH's MPI_STATUSES_IGNORE trips gcc's
                             -Wstringop-overflow on MPI_Waitall */
    char *s_buf, *r_buf;
    size_t size;
    int window, failed = 0;

    probe_start(&run, &info, &argc, &argv);
    window = run.opt.window;
    requests = malloc(sizeof(*requests) * (size_t)window);
    statuses = malloc(sizeof(*statuses) * (size_t)window);
    s_buf = probe_alloc(&run, run.opt.max_size);
    r_buf = probe_alloc(&run, run.opt.max_size);
    if (requests == NULL || statuses == NULL) {
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
    }
    probe_print_header(&run);

    for (size = probe_first_size(&run); size <= run.opt.max_size;
         size = probe_next_size(size)) {
        const int iterations = probe_iterations(&run, size);
        const int skip = probe_skip(&run, size);
        const int count = (int)size;
        double total = 0.0, t_start, t_end;
        int errors = 0, i, j;

        memset(s_buf, 'a', size);
        memset(r_buf, 'b', size);
        MPI_Barrier(MPI_COMM_WORLD);

        for (i = 0; i < iterations + skip; i++) {
            if (run.opt.validate) {
                if (run.rank == 0) {
                    probe_fill(s_buf, size, 0, 1, i);
                } else {
                    memset(r_buf, 0xff, size);
                }
                MPI_Barrier(MPI_COMM_WORLD);
            }
            if (run.rank == 0) {
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
                if (run.opt.validate) {
                    errors += probe_check(r_buf, size, 0, 1, i);
                }
            }
        }

        if (run.opt.validate) {
            errors = probe_sum_errors(errors);
        }
        probe_print_pt2pt_row(&run, size,
                              (double)size / 1e6 * iterations * window / total, errors);
        if (errors) {
            probe_report_failure(&run, size);
            failed = 1;
            break;
        }
    }

    free(requests);
    free(statuses);
    free(s_buf);
    free(r_buf);
    probe_finish(&run, failed);
    return 0;
}
