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

#include <stdlib.h>
#include <string.h>

static const struct probe_info info = {
    "osu_latency", "OSU MPI Latency Test", PROBE_LATENCY,
};

int main(int argc, char *argv[])
{
    struct probe_run run;
    char *s_buf, *r_buf;
    size_t size;
    int peer, failed = 0;

    probe_start(&run, &info, &argc, &argv);
    peer = 1 - run.rank;
    s_buf = probe_alloc(&run, run.opt.max_size);
    r_buf = probe_alloc(&run, run.opt.max_size);
    probe_print_header(&run);

    for (size = probe_first_size(&run); size <= run.opt.max_size;
         size = probe_next_size(size)) {
        const int iterations = probe_iterations(&run, size);
        const int skip = probe_skip(&run, size);
        const int count = (int)size;
        double total = 0.0, t_start, t_end;
        int errors = 0, i;

        /* Touch the buffers before use. */
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
            if (run.opt.validate) {
                errors += probe_check(r_buf, size, peer, run.rank, i);
            }
        }

        if (run.opt.validate) {
            errors = probe_sum_errors(errors);
        }
        probe_print_pt2pt_row(&run, size, total * 1e6 / (2.0 * iterations), errors);
        if (errors) {
            probe_report_failure(&run, size);
            failed = 1;
            break;
        }
    }

    free(s_buf);
    free(r_buf);
    probe_finish(&run, failed);
    return 0;
}
