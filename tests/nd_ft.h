/* nd_ft.h: what the project's fabtests programs share: a CHECK that exits
 * on a failed setup call, and a monotonic clock. C. */
#ifndef ND_FT_H
#define ND_FT_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <rdma/fi_errno.h>

/* A setup call that must succeed; otherwise the program stops, saying where. */
#define CHECK(call)                                                                   \
	do {                                                                          \
		int rc_ = (int)(call);                                                \
		if (rc_) {                                                            \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				fi_strerror(rc_ < 0 ? -rc_ : rc_));                   \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

static inline double nd_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

#endif /* ND_FT_H */
