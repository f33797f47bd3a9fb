/* nd_subtest.h: what nd_msg_tests and nd_rdm_tests share: subtests that
 * return T_PASS, T_FAIL or T_SKIP with the reason in `why`, and the byte
 * pattern their transfers carry and check. C; one translation unit per
 * program. */
#ifndef ND_SUBTEST_H
#define ND_SUBTEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <rdma/fi_errno.h>

#include "nd_ft.h"

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

/* Guard bytes around what a transfer may write. */
#define GUARD 0xee

static inline double now_ms(void) { return nd_now_us() / 1e3; }

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
