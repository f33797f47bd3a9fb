/*
 * nd_atomic: 64-bit atomics on FI_EP_MSG endpoints, over any provider
 * (-p nd, -p verbs), so that two providers' results stand side by side on
 * one boot.
 *
 * One process connects a pair of endpoints; the connecting one targets a
 * word in a region the accepting one registered for peers. Every value is
 * checked at both ends: the old value the initiator fetched, the word at
 * the target, and its neighbours untouched.
 *
 *   fetch_add     fi_fetch_atomic FI_SUM, FI_UINT64 and FI_INT64 (a
 *                 negative addend)
 *   add           fi_atomic FI_SUM (no old value)
 *   cswap         fi_compare_atomic FI_CSWAP, equal (swapped) and not
 *   query         fi_query_atomic and the valid calls agree with the above
 *   rate          fetch-and-adds back to back for -n seconds: each one's
 *                 old value checked, the count and the rate printed (a
 *                 figure, never a pass condition)
 *
 * A provider that lacks an operation fails its subtest, saying which call
 * refused it.
 * usage: nd_atomic [-p PROV] [-a ADDRESS] [-t SUBTEST] [-n SECONDS]
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#include "nd_pair.h"
#include "nd_subtest.h"

static const char *prov = "nd";
static const char *address;
static double rate_seconds = 1.0;

/* The connected pair and its buffers, opened once for every subtest. */
static struct pair pair;
static uint64_t *target;	/* 8 words, the accepting side's, peers write */
static uint64_t *local;		/* 8 words: operands and results */
static struct fid_mr *target_mr, *local_mr;

static void *local_desc(void) { return (pair.mr_mode & FI_MR_LOCAL) ? fi_mr_desc(local_mr) : NULL; }
static uint64_t target_addr(int word)
{
	return (pair.mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)&target[word] : (uint64_t)word * 8;
}
static uint64_t target_key(void) { return fi_mr_key(target_mr); }

/* The target's word 2, its neighbours 0 (checked after every operation). */
static int check_target(uint64_t want, const char *what)
{
	if (target[2] != want)
		FAIL("%s: the target word holds %" PRIu64 ", expected %" PRIu64, what, target[2], want);
	if (target[1] || target[3])
		FAIL("%s: a neighbouring word changed", what);
	return T_PASS;
}

static int setup(void)
{
	RUN(open_pair(&pair, prov, address, FI_ATOMIC));
	target = calloc(8, sizeof(*target));
	local = calloc(8, sizeof(*local));
	if (!target || !local)
		FAIL("calloc");
	TRY(fi_mr_reg(pair.domain, target, 8 * sizeof(*target), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0,
		      &target_mr, NULL));
	TRY(fi_mr_reg(pair.domain, local, 8 * sizeof(*local), FI_READ | FI_WRITE | FI_SEND | FI_RECV, 0, 0, 0,
		      &local_mr, NULL));
	return T_PASS;
}

static void teardown(void)
{
	if (target_mr)
		fi_close(&target_mr->fid);
	if (local_mr)
		fi_close(&local_mr->fid);
	close_pair(&pair);
	free(target);
	free(local);
}

static int fetch_add(uint64_t addend, enum fi_datatype datatype, uint64_t *old)
{
	local[0] = addend;
	local[1] = 0xdeadbeef;
	TRY(fi_fetch_atomic(pair.ep[0], &local[0], 1, local_desc(), &local[1], local_desc(), 0, target_addr(2),
			    target_key(), datatype, FI_SUM, NULL));
	RUN(completions(&pair, 1, "fi_fetch_atomic"));
	*old = local[1];
	return T_PASS;
}

static int t_fetch_add(void)
{
	target[2] = 1000;
	uint64_t old;
	RUN(fetch_add(5, FI_UINT64, &old));
	if (old != 1000)
		FAIL("fetched %" PRIu64 ", expected 1000", old);
	RUN(check_target(1005, "FI_UINT64 + 5"));
	RUN(fetch_add((uint64_t)-1005, FI_INT64, &old));
	if (old != 1005)
		FAIL("fetched %" PRIu64 ", expected 1005", old);
	RUN(check_target(0, "FI_INT64 - 1005"));
	RUN(fetch_add(1ULL << 40, FI_UINT64, &old));
	return check_target(1ULL << 40, "beyond 32 bits");
}

static int t_add(void)
{
	target[2] = 40;
	local[0] = 2;
	TRY(fi_atomic(pair.ep[0], &local[0], 1, local_desc(), 0, target_addr(2), target_key(), FI_UINT64, FI_SUM,
		      NULL));
	RUN(completions(&pair, 1, "fi_atomic"));
	return check_target(42, "fi_atomic FI_SUM 2");
}

static int cswap(uint64_t compare, uint64_t swap, uint64_t *old)
{
	local[0] = swap;
	local[2] = compare;
	local[1] = 0xdeadbeef;
	TRY(fi_compare_atomic(pair.ep[0], &local[0], 1, local_desc(), &local[2], local_desc(), &local[1],
			      local_desc(), 0, target_addr(2), target_key(), FI_UINT64, FI_CSWAP, NULL));
	RUN(completions(&pair, 1, "fi_compare_atomic"));
	*old = local[1];
	return T_PASS;
}

static int t_cswap(void)
{
	target[2] = 7;
	uint64_t old;
	RUN(cswap(7, 0x1234567890ULL, &old));
	if (old != 7)
		FAIL("equal: fetched %" PRIu64 ", expected 7", old);
	RUN(check_target(0x1234567890ULL, "equal: swapped"));
	RUN(cswap(8, 99, &old));
	if (old != 0x1234567890ULL)
		FAIL("not equal: fetched %" PRIu64, old);
	return check_target(0x1234567890ULL, "not equal: left");
}

static int t_query(void)
{
	struct fi_atomic_attr attr;
	size_t count;
	TRY(fi_query_atomic(pair.domain, FI_UINT64, FI_SUM, &attr, 0));
	if (attr.size != 8 || attr.count < 1)
		FAIL("fi_query_atomic: size %zu, count %zu", attr.size, attr.count);
	TRY(fi_query_atomic(pair.domain, FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC));
	TRY(fi_query_atomic(pair.domain, FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC));
	TRY(fi_atomicvalid(pair.ep[0], FI_UINT64, FI_SUM, &count));
	TRY(fi_fetch_atomicvalid(pair.ep[0], FI_INT64, FI_SUM, &count));
	TRY(fi_compare_atomicvalid(pair.ep[0], FI_UINT64, FI_CSWAP, &count));
	return T_PASS;
}

static int t_rate(void)
{
	target[2] = 0;
	uint64_t n = 0, old;
	const double start = now_ms(), end = start + rate_seconds * 1e3;
	while (now_ms() < end) {
		RUN(fetch_add(1, FI_UINT64, &old));
		if (old != n)
			FAIL("fetch-and-add %" PRIu64 " fetched %" PRIu64, n, old);
		n++;
	}
	const double s = (now_ms() - start) / 1e3;
	RUN(check_target(n, "after the run"));
	printf("# rate: %s: %" PRIu64 " fetch-and-adds in %.2f s, %.0f a second, %.1f us each, one at a time\n",
	       prov, n, s, n / s, s * 1e6 / (double)n);
	return T_PASS;
}

static const struct nd_subtest subtests[] = {
	{ "fetch_add", t_fetch_add },
	{ "add", t_add },
	{ "cswap", t_cswap },
	{ "query", t_query },
	{ "rate", t_rate },
};
static struct nd_suite suite = { ND_SUITE(subtests), .timing = ND_TIME_MS };

static int option(int opt, const char *arg)
{
	if (opt != 'n')
		return -1;
	rate_seconds = atof(arg);
	return rate_seconds > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	const struct nd_cli cli = { .optstring = "p:a:t:n:h", .prov = &prov, .address = &address, .suite = &suite,
				    .option = option,
				    .usage = "usage: %s [-p PROV] [-a ADDRESS] [-t SUBTEST] [-n SECONDS]\n"
					     "64-bit atomics on FI_EP_MSG endpoints: fetch-and-add, add, compare-and-swap\n" };
	address = nd_default_address();
	if (nd_parse_options(&cli, argc, argv) || nd_check_only(&suite))
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (setup() != T_PASS) {
		printf("FAIL: setup: %s\n", why);
		teardown();
		return 1;
	}
	const int status = nd_run_subtests(&suite);
	teardown();
	return status;
}
