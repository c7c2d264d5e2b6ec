/* A minimal MPI ping-pong between ranks 0 and 1 for transport tests: it makes the MPI open
 * a connection and move a few messages, so the transport it chose shows in its logs. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    char buf[4096] = {0};
    int rank, size, i;
    double t0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    t0 = MPI_Wtime();
    for (i = 0; i < 200 && size > 1; i++) {
        if (rank == 0) {
            MPI_Send(buf, sizeof buf, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, sizeof buf, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, sizeof buf, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, sizeof buf, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("ping-pong %d B x 200 between %d ranks: %.2f us per round trip\n",
               (int)sizeof buf, size, (MPI_Wtime() - t0) / 200 * 1e6);
    MPI_Finalize();
    return 0;
}
