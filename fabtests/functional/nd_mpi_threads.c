/*
 * nd_mpi_threads: MPI under MPI_THREAD_MULTIPLE, every byte checked. Run
 * with 2 ranks (fabtests/scripts/nd_mpi.sh BUILDDIR PROVIDER 2 threads runs
 * it through Open MPI's OFI MTL over "nd;ofi_rxm"):
 *
 *   - MPI_Init_thread must provide MPI_THREAD_MULTIPLE;
 *   - 8 threads a rank; thread t exchanges with thread t of the other
 *     rank (tag t), both ways at once, messages of 8 B to 256 KiB (ofi_rxm's
 *     eager, segmented and rendezvous sizes), each filled with a pattern of
 *     its size, round, rank and thread, and checked on arrival;
 *   - then every thread of a rank at once with MPI_ANY_TAG receives,
 *     whose senders each thread finds by the message's own header.
 *
 * Prints one line per check and "nd_mpi_threads: N passed, M failed" on
 * rank 0; exits non-zero on any failure (every rank learns the verdict).
 */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 8
#define ROUNDS 4
#define MAX_SIZE (256u << 10)

static const size_t sizes[] = { 8, 64, 512, 4096, 16384, 65536, MAX_SIZE };
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

static int rank, peer;

static unsigned char pattern(size_t i, size_t size, int round, int from_rank, int thread)
{
	return (unsigned char)(i * 131u + size * 7u + (unsigned)round * 17u + (unsigned)from_rank * 59u +
			       (unsigned)thread * 97u + 1u);
}

static void fill(unsigned char *buf, size_t size, int round, int from_rank, int thread)
{
	for (size_t i = 0; i < size; i++)
		buf[i] = pattern(i, size, round, from_rank, thread);
}

/* The first wrong byte, or -1. */
static long check(const unsigned char *buf, size_t size, int round, int from_rank, int thread)
{
	for (size_t i = 0; i < size; i++)
		if (buf[i] != pattern(i, size, round, from_rank, thread))
			return (long)i;
	return -1;
}

/* Receives into IN from the other rank with RECV_TAG (or MPI_ANY_TAG)
 * while sending OUT with SEND_TAG; the receive's status in *ST. */
static int exchange(unsigned char *in, const unsigned char *out, size_t size, int recv_tag, int send_tag,
		    MPI_Status *st)
{
	MPI_Request req[2];
	MPI_Status both[2];
	MPI_Irecv(in, (int)size, MPI_BYTE, peer, recv_tag, MPI_COMM_WORLD, &req[0]);
	MPI_Isend(out, (int)size, MPI_BYTE, peer, send_tag, MPI_COMM_WORLD, &req[1]);
	int rc = MPI_Waitall(2, req, both);
	*st = both[0];
	return rc;
}

struct thread_result {
	int thread;
	int exchanged; /* messages received and checked */
	char why[256];
};

/* Thread t and the other rank's thread t: every size, both ways at once. */
static void *paired(void *arg)
{
	struct thread_result *r = arg;
	const int t = r->thread;
	unsigned char *out = malloc(MAX_SIZE), *in = malloc(MAX_SIZE);
	if (!out || !in) {
		snprintf(r->why, sizeof(r->why), "thread %d: out of memory", t);
		goto done;
	}
	for (int round = 0; round < ROUNDS; round++) {
		for (size_t s = 0; s < N_SIZES; s++) {
			const size_t size = sizes[s];
			fill(out, size, round, rank, t);
			memset(in, 0, size);
			MPI_Status st[1];
			if (exchange(in, out, size, t, t, st) != MPI_SUCCESS) {
				snprintf(r->why, sizeof(r->why), "thread %d: MPI_Waitall failed at %zu bytes", t, size);
				goto done;
			}
			int count = -1;
			MPI_Get_count(&st[0], MPI_BYTE, &count);
			if (count != (int)size || st[0].MPI_TAG != t) {
				snprintf(r->why, sizeof(r->why), "thread %d: %d bytes with tag %d, expected %zu with tag %d",
					 t, count, st[0].MPI_TAG, size, t);
				goto done;
			}
			long bad = check(in, size, round, peer, t);
			if (bad >= 0) {
				snprintf(r->why, sizeof(r->why), "thread %d: %zu bytes, round %d: byte %ld is wrong", t, size,
					 round, bad);
				goto done;
			}
			r->exchanged++;
		}
	}
done:
	free(out);
	free(in);
	return NULL;
}

/* Every thread receives with MPI_ANY_TAG: which thread's message each
 * takes is not known in advance, so the header says (its sender thread and
 * round), and the bytes after it are checked against that. */
struct header {
	int thread, round;
};

static void *any_tag(void *arg)
{
	struct thread_result *r = arg;
	const int t = r->thread;
	const size_t size = 4096;
	unsigned char *out = malloc(size), *in = malloc(size);
	if (!out || !in) {
		snprintf(r->why, sizeof(r->why), "thread %d: out of memory", t);
		goto done;
	}
	for (int round = 0; round < ROUNDS; round++) {
		struct header h = { t, round };
		memcpy(out, &h, sizeof(h));
		fill(out + sizeof(h), size - sizeof(h), round, rank, t);
		MPI_Status st[1];
		if (exchange(in, out, size, MPI_ANY_TAG, 1000 + t, st) != MPI_SUCCESS) {
			snprintf(r->why, sizeof(r->why), "thread %d: MPI_Waitall failed (any tag)", t);
			goto done;
		}
		struct header got;
		memcpy(&got, in, sizeof(got));
		if (got.thread < 0 || got.thread >= THREADS || st[0].MPI_TAG != 1000 + got.thread ||
		    got.round < 0 || got.round >= ROUNDS) {
			snprintf(r->why, sizeof(r->why), "thread %d: a message with tag %d says thread %d round %d", t,
				 st[0].MPI_TAG, got.thread, got.round);
			goto done;
		}
		long bad = check(in + sizeof(got), size - sizeof(got), got.round, peer, got.thread);
		if (bad >= 0) {
			snprintf(r->why, sizeof(r->why), "thread %d: thread %d's message: byte %ld is wrong", t,
				 got.thread, bad + (long)sizeof(got));
			goto done;
		}
		r->exchanged++;
	}
done:
	free(out);
	free(in);
	return NULL;
}

/* Runs FN on THREADS threads; the number of them that failed. */
static int run_threads(const char *name, void *(*fn)(void *), int expect_each)
{
	pthread_t th[THREADS];
	struct thread_result res[THREADS];
	for (int t = 0; t < THREADS; t++) {
		memset(&res[t], 0, sizeof(res[t]));
		res[t].thread = t;
		if (pthread_create(&th[t], NULL, fn, &res[t])) {
			snprintf(res[t].why, sizeof(res[t].why), "pthread_create failed");
			res[t].exchanged = -1;
		}
	}
	int failed = 0, messages = 0;
	for (int t = 0; t < THREADS; t++) {
		if (res[t].exchanged >= 0)
			pthread_join(th[t], NULL);
		if (res[t].exchanged != expect_each || res[t].why[0]) {
			fprintf(stderr, "rank %d: %s: %s (%d of %d messages)\n", rank, name,
				res[t].why[0] ? res[t].why : "messages missing", res[t].exchanged, expect_each);
			failed++;
		} else {
			messages += res[t].exchanged;
		}
	}
	int all_failed = 0;
	MPI_Allreduce(&failed, &all_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("%s: %s (%d threads a rank, %d messages checked on rank 0)\n", all_failed ? "FAIL" : "PASS",
		       name, THREADS, messages);
	return all_failed != 0;
}

int main(int argc, char **argv)
{
	int provided = 0, nranks = 0;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks != 2) {
		if (rank == 0)
			fprintf(stderr, "nd_mpi_threads: run with 2 ranks, not %d\n", nranks);
		MPI_Finalize();
		return 2;
	}
	peer = 1 - rank;
	int passed = 0, failed = 0;
	if (provided != MPI_THREAD_MULTIPLE) {
		if (rank == 0)
			printf("FAIL: MPI_Init_thread provided level %d, not MPI_THREAD_MULTIPLE (%d)\n", provided,
			       MPI_THREAD_MULTIPLE);
		failed++;
	} else {
		if (rank == 0)
			printf("PASS: MPI_Init_thread provides MPI_THREAD_MULTIPLE\n");
		passed++;
		int f = run_threads("paired threads, 8 B to 256 KiB both ways", paired, ROUNDS * (int)N_SIZES);
		passed += !f;
		failed += f;
		f = run_threads("any-tag receives on every thread", any_tag, ROUNDS);
		passed += !f;
		failed += f;
	}
	if (rank == 0)
		printf("nd_mpi_threads: %d passed, %d failed\n", passed, failed);
	fflush(stdout);
	MPI_Finalize();
	return failed ? 1 : 0;
}
