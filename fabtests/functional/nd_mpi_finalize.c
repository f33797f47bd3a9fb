/*
 * nd_mpi_finalize: messages sent just before MPI_Finalize must arrive.
 *
 * libfabric#6720: over ofi_rxm a small send completes at once (an inject)
 * while the connection to its peer is still being made; a sender that then
 * finalizes closes its endpoint with the message still queued, and the
 * receiver waits for ever. MPICH works around it with a barrier in
 * MPI_Finalize, but only for the provider name "verbs;ofi_rxm"; under
 * "nd;ofi_rxm" no barrier runs, so the provider stack itself must deliver.
 *
 * Even ranks send COUNT messages (-n, default 100) of 1 to 256 bytes to the
 * next rank with MPI_Send, as the first traffic between the two (the
 * connection is made by the first of them), and call MPI_Finalize at once.
 * Odd ranks wait a moment (-d milliseconds, default 20: the sender is gone
 * or going), then receive and check every byte. A lost message leaves the
 * receiver waiting: the script that runs this bounds it
 * (fabtests/scripts/nd_mpich.sh, finalize). Run with an even number of
 * ranks. Prints "nd_mpi_finalize: N passed, M failed" on each receiving
 * rank and exits non-zero on any wrong byte.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LARGEST 256

static unsigned char pattern(int message, size_t i, int from)
{
	return (unsigned char)((unsigned)message * 31u + i * 7u + (unsigned)from * 101u + 1u);
}

static size_t size_of(int message) { return (size_t)(message % LARGEST) + 1; }

int main(int argc, char **argv)
{
	int count = 100, delay_ms = 20, opt, rank, nranks, failures = 0;
	unsigned char buf[LARGEST];

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	while ((opt = getopt(argc, argv, "n:d:")) != -1) {
		switch (opt) {
		case 'n': count = atoi(optarg); break;
		case 'd': delay_ms = atoi(optarg); break;
		default:
			if (rank == 0)
				fprintf(stderr, "usage: nd_mpi_finalize [-n COUNT] [-d MS]\n");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (nranks % 2 || count < 1) {
		if (rank == 0)
			fprintf(stderr, "nd_mpi_finalize: needs an even number of ranks and -n >= 1\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}

	if (rank % 2 == 0) {
		for (int m = 0; m < count; m++) {
			size_t size = size_of(m);
			for (size_t i = 0; i < size; i++)
				buf[i] = pattern(m, i, rank);
			MPI_Send(buf, (int)size, MPI_BYTE, rank + 1, m, MPI_COMM_WORLD);
		}
	} else {
		struct timespec pause = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
		nanosleep(&pause, NULL);
		for (int m = 0; m < count; m++) {
			size_t size = size_of(m);
			MPI_Status status;
			int got = -1;
			memset(buf, 0, sizeof(buf));
			MPI_Recv(buf, LARGEST, MPI_BYTE, rank - 1, m, MPI_COMM_WORLD, &status);
			MPI_Get_count(&status, MPI_BYTE, &got);
			int ok = got == (int)size;
			for (size_t i = 0; ok && i < size; i++)
				ok = buf[i] == pattern(m, i, rank - 1);
			if (!ok) {
				failures++;
				fprintf(stderr, "rank %d: FAIL message %d from rank %d: %d bytes, wanted %zu, or wrong content\n",
					rank, m, rank - 1, got, size);
			}
		}
		printf("nd_mpi_finalize: %d passed, %d failed\n", count - failures, failures);
		fflush(stdout);
	}
	MPI_Finalize();
	return failures ? 1 : 0;
}
