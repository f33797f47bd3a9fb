/* nd_fds.h: counts the calling process's open file descriptors, for the
 * tests and fabtests that check a cycle leaves none behind. C and C++. */
#ifndef ND_FDS_H
#define ND_FDS_H

#include <dirent.h>

/* Entries of /proc/self/fd (its own fd included); -1 when unreadable. */
static inline int nd_count_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	int n = 0;
	if (!dir)
		return -1;
	while (readdir(dir))
		n++;
	closedir(dir);
	return n;
}

#endif /* ND_FDS_H */
