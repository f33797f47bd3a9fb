/*
 * nd_mpi_bench.c: MPI-level benchmarks in the style of the OSU
 * micro-benchmarks, for comparing libfabric providers under Open MPI (run by
 * fabtests/scripts/nd_mpi_bench.sh). Two ranks for the point-to-point tests, any
 * number for allreduce. Buffers are allocated once and reused, as
 * applications do, which is what a registration cache serves. Every
 * transfer's content is checked (first, middle and last bytes; the whole
 * buffer on the first iteration of each size), so a fast wrong answer fails.
 *
 *   nd_mpi_bench [-t lat|bw|bibw|allreduce|all] [-s SIZE] [-m MIN_SIZE] [-n ITERATIONS]
 *
 * Prints "TEST SIZE VALUE UNIT" lines on rank 0; exits non-zero on a
 * content mismatch.
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WINDOW 8

static int rank, nranks;
static unsigned char *send_buf[WINDOW], *recv_buf[WINDOW];

static unsigned char byte_at(size_t i, int seed) { return (unsigned char)(i * 131 + seed * 7 + 1); }

static void fill(unsigned char *buf, size_t len, int seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = byte_at(i, seed);
}

static void check(const unsigned char *buf, size_t len, int seed, int full, const char *test)
{
	if (!len)
		return;
	size_t probes[3] = {0, len / 2, len - 1};
	for (size_t i = 0; full ? i < len : i < 3; i++) {
		size_t at = full ? i : probes[i];
		if (buf[at] != byte_at(at, seed)) {
			fprintf(stderr, "rank %d: %s: byte %zu of %zu is %u, expected %u\n", rank, test, at,
				len, buf[at], byte_at(at, seed));
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
}

static size_t iterations_for(size_t size, size_t forced)
{
	if (forced)
		return forced;
	if (size <= 4096)
		return 200;
	if (size <= 65536)
		return 40;
	return size <= (1 << 20) ? 20 : 8;
}

static void lat(size_t size, size_t iters)
{
	int peer = !rank;
	double start = 0;
	for (size_t i = 0; i < iters + 2; i++) {
		if (i == 2) /* two rounds of warm-up */
			start = MPI_Wtime();
		int seed = (int)i;
		if (rank == 0) {
			fill(send_buf[0], size, seed);
			MPI_Send(send_buf[0], (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
			MPI_Recv(recv_buf[0], (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			check(recv_buf[0], size, seed + 1, i == 0, "lat");
		} else {
			MPI_Recv(recv_buf[0], (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			check(recv_buf[0], size, seed, i == 0, "lat");
			fill(send_buf[0], size, seed + 1);
			MPI_Send(send_buf[0], (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
		}
	}
	if (rank == 0)
		printf("lat %zu %.2f us\n", size, (MPI_Wtime() - start) * 1e6 / (2.0 * iters));
}

/* One window each way (bidirectional) or from rank 0 to rank 1, then a
 * zero-byte acknowledgement. */
static void bw(size_t size, size_t iters, int bidirectional)
{
	int peer = !rank;
	int sends = bidirectional || rank == 0, recvs = bidirectional || rank == 1;
	MPI_Request req[2 * WINDOW];
	double start = 0;
	for (int w = 0; w < WINDOW; w++)
		fill(send_buf[w], size, w);
	for (size_t i = 0; i < iters + 1; i++) {
		if (i == 1)
			start = MPI_Wtime();
		int n = 0;
		if (recvs)
			for (int w = 0; w < WINDOW; w++)
				MPI_Irecv(recv_buf[w], (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[n++]);
		if (sends)
			for (int w = 0; w < WINDOW; w++)
				MPI_Isend(send_buf[w], (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[n++]);
		MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
		if (recvs)
			for (int w = 0; w < WINDOW; w++) {
				check(recv_buf[w], size, w, i == 0, bidirectional ? "bibw" : "bw");
				recv_buf[w][0] ^= 0xff; /* a stale buffer fails the next check */
			}
		if (rank == 0)
			MPI_Recv(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		else
			MPI_Send(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
	}
	double seconds = MPI_Wtime() - start;
	double bytes = (double)size * WINDOW * iters * (bidirectional ? 2 : 1);
	if (rank == 0)
		printf("%s %zu %.1f MB/s\n", bidirectional ? "bibw" : "bw", size, bytes / seconds / 1e6);
}

static void allreduce(size_t size, size_t iters)
{
	size_t count = size / sizeof(double);
	double *in = (double *)send_buf[0], *out = (double *)recv_buf[0];
	double start = 0;
	for (size_t i = 0; i < iters + 2; i++) {
		if (i == 2)
			start = MPI_Wtime();
		for (size_t k = 0; k < count; k++)
			in[k] = (double)(rank + 1) * (double)(k % 1000 + i);
		MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		double ranks_sum = nranks * (nranks + 1) / 2.0;
		for (size_t k = 0; k < count; k += (i == 0 ? 1 : count / 3 + 1)) {
			if (out[k] != ranks_sum * (double)(k % 1000 + i)) {
				fprintf(stderr, "rank %d: allreduce: element %zu is %g\n", rank, k, out[k]);
				MPI_Abort(MPI_COMM_WORLD, 2);
			}
		}
	}
	if (rank == 0)
		printf("allreduce %zu %.2f us\n", size, (MPI_Wtime() - start) * 1e6 / iters);
}

int main(int argc, char **argv)
{
	const char *test = "all";
	size_t only_size = 0, min_size = 0, forced_iters = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	int opt;
	while ((opt = getopt(argc, argv, "t:s:m:n:")) != -1) {
		if (opt == 't')
			test = optarg;
		else if (opt == 's')
			only_size = strtoull(optarg, NULL, 0);
		else if (opt == 'm')
			min_size = strtoull(optarg, NULL, 0);
		else if (opt == 'n')
			forced_iters = strtoull(optarg, NULL, 0);
	}
	static const size_t sizes[] = {8, 64, 512, 4096, 32768, 65536, 262144, 1 << 20, 4 << 20};
	const size_t max = 4 << 20;
	for (int w = 0; w < WINDOW; w++) {
		send_buf[w] = malloc(max);
		recv_buf[w] = malloc(max);
		if (!send_buf[w] || !recv_buf[w])
			MPI_Abort(MPI_COMM_WORLD, 1);
		memset(recv_buf[w], 0, max);
	}
	int p2p = nranks == 2;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t size = sizes[k];
		if ((only_size && size != only_size) || size < min_size)
			continue;
		size_t iters = iterations_for(size, forced_iters);
		if (p2p && (!strcmp(test, "lat") || !strcmp(test, "all")))
			lat(size, iters);
		if (p2p && (!strcmp(test, "bw") || !strcmp(test, "all")))
			bw(size, iters, 0);
		if (p2p && (!strcmp(test, "bibw") || !strcmp(test, "all")))
			bw(size, iters, 1);
		if ((!strcmp(test, "allreduce") || !strcmp(test, "all")) && size >= 8 && size <= (1 << 20))
			allreduce(size, iters);
		fflush(stdout);
	}
	for (int w = 0; w < WINDOW; w++) {
		free(send_buf[w]);
		free(recv_buf[w]);
	}
	MPI_Finalize();
	return 0;
}
