/*
 * nd_mpi_check: what an MPI job needs from a libfabric provider, checked
 * byte by byte. Run with 2 or more ranks (fabtests/scripts/nd_mpi.sh runs it through
 * Open MPI's OFI MTL over "nd;ofi_rxm"):
 *
 *   - ping-pong between every pair of ranks, 1 B to 4 MiB (eager and
 *     rendezvous sizes of ofi_rxm; -m BYTES sets the largest), each
 *     message filled with a pattern that depends on its size, round and
 *     sender, and checked on arrival;
 *   - a window of non-blocking sends and receives in both directions;
 *   - MPI_Allreduce of integer vectors, checked against the closed form;
 *   - MPI_Alltoall, every block marked with its sender and receiver;
 *   - buffers that leave the address space between rounds (munmap,
 *     free with malloc_trim, madvise(MADV_DONTNEED), mremap) and come back
 *     at the same address, on both sides of a rendezvous-size exchange: a
 *     registration cache that missed the release would send the old
 *     pages' bytes, or land the new ones where the program no longer looks;
 *   - a barrier loop.
 *
 * Prints one line per check and "nd_mpi_check: N passed, M failed" on
 * rank 0; exits non-zero on any failure (every rank learns the verdict).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_SIZE (4u << 20)
#define ROUNDS 3
#define WINDOW 8

static int rank, nranks;
static int failures;
static size_t max_size = MAX_SIZE;

static unsigned char pattern(size_t i, size_t size, int round, int from)
{
	return (unsigned char)(i * 131u + size * 7u + (unsigned)round * 17u + (unsigned)from * 59u + 1u);
}

static void fill(unsigned char *buf, size_t size, int round, int from)
{
	for (size_t i = 0; i < size; i++)
		buf[i] = pattern(i, size, round, from);
}

/* Returns the index of the first wrong byte, or -1. */
static long first_mismatch(const unsigned char *buf, size_t size, int round, int from)
{
	for (size_t i = 0; i < size; i++)
		if (buf[i] != pattern(i, size, round, from))
			return (long)i;
	return -1;
}

static void check(int ok, const char *what, size_t size, long bad)
{
	if (ok)
		return;
	failures++;
	fprintf(stderr, "rank %d: FAIL %s, %zu bytes: first wrong byte at %ld\n", rank, what, size, bad);
}

/* One pair at a time, every pair: `low` pings, `high` pongs. */
static void ping_pong(unsigned char *buf)
{
	for (int low = 0; low < nranks; low++) {
		for (int high = low + 1; high < nranks; high++) {
			if (rank != low && rank != high)
				continue;
			const int peer = rank == low ? high : low;
			for (size_t size = 1; size <= max_size; size *= 4) {
				for (int round = 0; round < ROUNDS; round++) {
					long bad;
					if (rank == low) {
						fill(buf, size, round, rank);
						MPI_Send(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD);
						memset(buf, 0, size);
						MPI_Recv(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD,
							 MPI_STATUS_IGNORE);
						bad = first_mismatch(buf, size, round, peer);
						check(bad < 0, "pong payload", size, bad);
					} else {
						memset(buf, 0, size);
						MPI_Recv(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD,
							 MPI_STATUS_IGNORE);
						bad = first_mismatch(buf, size, round, peer);
						check(bad < 0, "ping payload", size, bad);
						fill(buf, size, round, rank);
						MPI_Send(buf, (int)size, MPI_BYTE, peer, round, MPI_COMM_WORLD);
					}
				}
			}
		}
	}
}

/* Rank 0 and rank 1 exchange a window of messages at once, both ways. */
static void windows(void)
{
	if (rank > 1)
		return;
	const int peer = 1 - rank;
	static const size_t sizes[] = {64, 16384, 262144};
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t size = sizes[s];
		unsigned char *out = malloc(size * WINDOW), *in = calloc(WINDOW, size);
		MPI_Request req[2 * WINDOW];
		if (!out || !in) {
			fprintf(stderr, "rank %d: out of memory\n", rank);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		for (int w = 0; w < WINDOW; w++) {
			fill(out + w * size, size, w, rank);
			MPI_Irecv(in + w * size, (int)size, MPI_BYTE, peer, 100 + w, MPI_COMM_WORLD, &req[w]);
		}
		for (int w = 0; w < WINDOW; w++)
			MPI_Isend(out + w * size, (int)size, MPI_BYTE, peer, 100 + w, MPI_COMM_WORLD,
				  &req[WINDOW + w]);
		MPI_Waitall(2 * WINDOW, req, MPI_STATUSES_IGNORE);
		for (int w = 0; w < WINDOW; w++) {
			long bad = first_mismatch(in + w * size, size, w, peer);
			check(bad < 0, "window payload", size, bad);
		}
		free(out);
		free(in);
	}
}

static void allreduce(void)
{
	enum { COUNT = 65536 };
	int64_t *in = malloc(COUNT * sizeof(*in)), *out = malloc(COUNT * sizeof(*out));
	if (!in || !out) {
		fprintf(stderr, "rank %d: out of memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (int i = 0; i < COUNT; i++)
		in[i] = (int64_t)(rank + 1) * (i + 1);
	MPI_Allreduce(in, out, COUNT, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
	/* sum over ranks r of (r + 1) * (i + 1) = (i + 1) * n(n + 1) / 2 */
	const int64_t ranks_sum = (int64_t)nranks * (nranks + 1) / 2;
	long bad = -1;
	for (int i = 0; i < COUNT && bad < 0; i++)
		if (out[i] != ranks_sum * (i + 1))
			bad = i;
	check(bad < 0, "allreduce sum", COUNT * sizeof(*out), bad);
	free(in);
	free(out);
}

/* Every rank sends every other a block marked with both ranks. */
static void alltoall(void)
{
	static const size_t blocks[] = {64, 65536};
	for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
		const size_t block = blocks[b];
		unsigned char *out = malloc(block * nranks), *in = calloc(nranks, block);
		if (!out || !in) {
			fprintf(stderr, "rank %d: out of memory\n", rank);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		for (int to = 0; to < nranks; to++)
			fill(out + to * block, block, to, rank);
		MPI_Alltoall(out, (int)block, MPI_BYTE, in, (int)block, MPI_BYTE, MPI_COMM_WORLD);
		for (int from = 0; from < nranks; from++) {
			long bad = first_mismatch(in + from * block, block, rank, from);
			check(bad < 0, "alltoall block", block, bad);
		}
		free(out);
		free(in);
	}
}

enum release_way { BY_MUNMAP, BY_FREE_AND_TRIM, BY_MADVISE, BY_MREMAP, RELEASE_WAYS };
static const char *const release_names[RELEASE_WAYS] = {
	[BY_MUNMAP] = "munmap, then mmap",
	[BY_FREE_AND_TRIM] = "free and malloc_trim, then malloc",
	[BY_MADVISE] = "madvise(MADV_DONTNEED)",
	[BY_MREMAP] = "mremap away, then mmap",
};
#define RELEASED_SIZE (256u << 10) /* past ofi_rxm's eager limit: the buffer itself is registered */
#define RELEASED_ROUNDS 4

/* Fresh anonymous memory at `at` when that is free, elsewhere if not. */
static unsigned char *map_at(unsigned char *at, size_t size)
{
	void *p = MAP_FAILED;
#ifdef MAP_FIXED_NOREPLACE
	if (at)
		p = mmap(at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
#endif
	if (p == MAP_FAILED)
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* mremap must move the buffer: a page mapped after it leaves no room to
 * grow in place. */
#define MREMAP_GUARD 4096u

/* A buffer for the next round; `before` is the last round's, released. */
static unsigned char *obtain(enum release_way way, unsigned char *before, size_t size)
{
	switch (way) {
	case BY_FREE_AND_TRIM:
		return malloc(size);
	case BY_MADVISE:
		return before ? before : map_at(NULL, size);
	case BY_MREMAP:
		return map_at(before, size + MREMAP_GUARD);
	default:
		return map_at(before, size);
	}
}

static void release(enum release_way way, unsigned char *buf, size_t size)
{
	switch (way) {
	case BY_MUNMAP:
		munmap(buf, size);
		break;
	case BY_FREE_AND_TRIM:
		free(buf);
		malloc_trim(0); /* the heap's top by sbrk, free pages inside it by madvise */
		break;
	case BY_MADVISE:
		madvise(buf, size, MADV_DONTNEED); /* the next touch maps zeroed pages */
		break;
	case BY_MREMAP: {
		/* Growing into the guard page moves the pages; the old range is
		 * left unmapped. (Not MREMAP_FIXED: older libucm drops the
		 * address it moves to.) */
		unsigned char *moved = mremap(buf, size, size + MREMAP_GUARD, MREMAP_MAYMOVE);
		if (moved == MAP_FAILED || moved == buf) {
			fprintf(stderr, "rank %d: mremap did not move the buffer: %s\n", rank,
				moved == MAP_FAILED ? strerror(errno) : "grown in place");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		munmap(moved, size + MREMAP_GUARD);
		munmap(buf + size, MREMAP_GUARD);
		break;
	}
	default:
		break;
	}
}

static void released_memory(void)
{
	if (rank > 1)
		return;
	const int peer = 1 - rank;
	const size_t size = RELEASED_SIZE < max_size ? RELEASED_SIZE : max_size;
	for (int way = 0; way < RELEASE_WAYS; way++) {
		unsigned char *buf = NULL;
		int came_back = 0;
		for (int round = 0; round < RELEASED_ROUNDS; round++) {
			unsigned char *next = obtain(way, buf, size);
			if (!next) {
				fprintf(stderr, "rank %d: out of memory\n", rank);
				MPI_Abort(MPI_COMM_WORLD, 2);
			}
			came_back += round > 0 && next == buf;
			buf = next;
			const int tag = 200 + way * RELEASED_ROUNDS + round;
			long bad;
			if (rank == 0) {
				fill(buf, size, round, rank);
				MPI_Send(buf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
				memset(buf, 0, size);
				MPI_Recv(buf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				memset(buf, 0, size);
				MPI_Recv(buf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				bad = first_mismatch(buf, size, round, peer);
				check(bad < 0, release_names[way], size, bad);
				fill(buf, size, round, rank);
				MPI_Send(buf, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
			}
			if (rank == 0) {
				bad = first_mismatch(buf, size, round, peer);
				check(bad < 0, release_names[way], size, bad);
			}
			release(way, buf, size);
		}
		if (way == BY_MADVISE)
			munmap(buf, size);
		/* Memory that never came back where it was proves nothing. */
		if (!came_back) {
			failures++;
			fprintf(stderr, "rank %d: FAIL %s: the memory never came back at its old address\n", rank,
				release_names[way]);
		}
	}
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks < 2) {
		if (rank == 0)
			fprintf(stderr, "nd_mpi_check: needs 2 or more ranks\n");
		MPI_Finalize();
		return 2;
	}
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "-m") == 0)
			max_size = strtoul(argv[i + 1], NULL, 0);
	if (max_size < 1 || max_size > MAX_SIZE)
		max_size = MAX_SIZE;
	unsigned char *buf = malloc(max_size);
	if (!buf)
		MPI_Abort(MPI_COMM_WORLD, 2);

	struct {
		const char *name;
		void (*run)(void);
	} steps[] = {{"windows", windows}, {"allreduce", allreduce}, {"alltoall", alltoall},
		     {"released_memory (munmap, free and malloc_trim, madvise, mremap; the address reused)", released_memory}};
	int passed = 0, failed = 0;

	int before = failures, any;
	ping_pong(buf);
	MPI_Allreduce(&(int){failures - before}, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("%s: ping_pong (every pair, 1 B to %zu KiB, %d ranks)\n", any ? "FAIL" : "PASS", max_size >> 10,
		       nranks);
	any ? failed++ : passed++;
	for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
		before = failures;
		steps[s].run();
		MPI_Allreduce(&(int){failures - before}, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		if (rank == 0)
			printf("%s: %s\n", any ? "FAIL" : "PASS", steps[s].name);
		any ? failed++ : passed++;
	}
	for (int i = 0; i < 100; i++)
		MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) {
		printf("PASS: barrier loop\n");
		passed++;
		printf("nd_mpi_check: %d passed, %d failed\n", passed, failed);
		fflush(stdout);
	}
	free(buf);
	MPI_Finalize();
	return failed ? 1 : 0;
}
