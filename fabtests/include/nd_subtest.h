/* nd_subtest.h: what the programs with subtests share: subtests that
 * return T_PASS, T_FAIL or T_SKIP with the reason in `why`, the runner that
 * runs a table of them (nd_test_main.h) and prints each one's result, and
 * the byte pattern their transfers carry and check. C; one translation unit
 * per program. */
#ifndef ND_SUBTEST_H
#define ND_SUBTEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <rdma/fi_errno.h>

#include "nd_ft.h"
#include "nd_test_main.h"

enum { T_PASS, T_FAIL, T_SKIP };

/* Within a subtest: record why and return T_FAIL (or T_SKIP). */
static char why[512];
#define FAIL(...)                                         \
	do {                                              \
		snprintf(why, sizeof(why), __VA_ARGS__); \
		return T_FAIL;                            \
	} while (0)
#define SKIP(...)                                         \
	do {                                              \
		snprintf(why, sizeof(why), __VA_ARGS__); \
		return T_SKIP;                            \
	} while (0)
/* A call that must succeed inside a subtest. */
#define TRY(call)                                                                       \
	do {                                                                            \
		ssize_t rc_ = (call);                                                   \
		if (rc_)                                                                \
			FAIL("line %d: %s: %s (%zd)", __LINE__, #call,                  \
			     fi_strerror((int)(rc_ < 0 ? -rc_ : rc_)), rc_);            \
	} while (0)
/* A helper returning T_* inside a subtest. */
#define RUN(call)                          \
	do {                               \
		int r_ = (call);           \
		if (r_ != T_PASS)          \
			return r_;         \
	} while (0)

static inline double now_ms(void) { return nd_now_us() / 1e3; }

/* Runs every subtest of SUITE, or the one -t named, each printing
 * "PASS: name" (with its time, as SUITE's timing says), "SKIP: name: why" or
 * "FAIL: name: why". Returns the exit status: 1 when one failed, 0
 * otherwise, 2 when -t names none (nd_check_only says so). */
static inline int nd_run_subtests(const struct nd_suite *suite)
{
	const char *only = suite->only;
	int failed = 0, ran = 0;
	for (size_t i = 0; i < suite->count; i++) {
		const struct nd_subtest *t = &suite->tests[i];
		if (only && strcmp(only, t->name))
			continue;
		why[0] = 0;
		double start = now_ms();
		int r = suite->run ? suite->run(t) : t->fn();
		double ms = now_ms() - start;
		ran++;
		if (r != T_PASS)
			printf("%s: %s: %s\n", r == T_SKIP ? "SKIP" : "FAIL", t->name, why);
		else if (suite->timing == ND_TIME_MS)
			printf("PASS: %s (%.0f ms)\n", t->name, ms);
		else if (suite->timing == ND_TIME_S)
			printf("PASS: %s (%.1f s)\n", t->name, ms / 1e3);
		else
			printf("PASS: %s\n", t->name);
		fflush(stdout);
		failed += r == T_FAIL;
	}
	return only && !ran ? 2 : failed ? 1 : 0;
}

/* Guard bytes around what a transfer may write. */
#define GUARD 0xee

/* The pattern byte i of a buffer filled with SEED. */
static inline uint8_t pat(unsigned seed, size_t i)
{
	return (uint8_t)(seed * 131u + i * 7u + (i >> 8) * 13u + (i >> 16) * 29u + 1u);
}

static inline void fill(uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pat(seed, i);
}

/* Returns the first index that differs from the pattern, or -1. */
static inline long verify(const uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pat(seed, i))
			return (long)i;
	return -1;
}

/* Returns the first index that is not GUARD, or -1. */
static inline long verify_guard(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != GUARD)
			return (long)i;
	return -1;
}

/* Checks LEN bytes at P against SEED and GUARD_LEN guard bytes after them. */
static inline int check_data(const char *what, const uint8_t *p, size_t len, unsigned seed,
			     size_t guard_len)
{
	long bad = verify(p, len, seed);
	if (bad >= 0)
		FAIL("%s: byte %ld of %zu is 0x%02x, expected 0x%02x", what, bad, len, p[bad],
		     pat(seed, (size_t)bad));
	bad = verify_guard(p + len, guard_len);
	if (bad >= 0)
		FAIL("%s: byte %zu after the %zu received was overwritten (0x%02x)", what,
		     (size_t)bad, len, p[len + bad]);
	return T_PASS;
}

#endif /* ND_SUBTEST_H */
