/*
 * nd_open_close: opens and closes the provider's objects many times and
 * checks that nothing is left behind: file descriptors are counted before
 * and after, and the program is meant to run under valgrind as well, which
 * counts the memory.
 *
 *   nd_open_close [-p PROVIDER] [-n ITERATIONS] [-d DOMAIN]
 *
 * Each iteration: fi_getinfo, fi_fabric, fi_domain, fi_eq_open (with an fd
 * wait object, whose fd is fetched), a close of the fabric while children
 * are open (must be -FI_EBUSY), then every close in order, fi_freeinfo.
 * Prints one line per check that failed and a closing count line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nd_fds.h"
#include "nd_test_main.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

static int failures;
static int checks;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		checks++;                                                  \
		if (!(cond)) {                                             \
			failures++;                                        \
			fprintf(stderr, "FAIL line %d: ", __LINE__);       \
			fprintf(stderr, __VA_ARGS__);                      \
			fputc('\n', stderr);                               \
		}                                                          \
	} while (0)

static int one_cycle(const char *prov, const char *domain_name)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fid_eq *eq = NULL;
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_FD };
	int ret, fd = -1;

	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG;
	hints->mode = ~0ULL;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	if (domain_name)
		hints->domain_attr->name = strdup(domain_name);

	ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints, &info);
	CHECK(ret == 0, "fi_getinfo: %s", fi_strerror(-ret));
	if (ret)
		goto out;
	ret = fi_fabric(info->fabric_attr, &fabric, NULL);
	CHECK(ret == 0, "fi_fabric: %s", fi_strerror(-ret));
	if (ret)
		goto out;
	ret = fi_domain(fabric, info, &domain, NULL);
	CHECK(ret == 0, "fi_domain: %s", fi_strerror(-ret));
	ret = fi_eq_open(fabric, &eq_attr, &eq, NULL);
	CHECK(ret == 0, "fi_eq_open: %s", fi_strerror(-ret));
	if (eq) {
		ret = fi_control(&eq->fid, FI_GETWAIT, &fd);
		CHECK(ret == 0 && fd >= 0, "FI_GETWAIT: %s", fi_strerror(-ret));
	}
	ret = fi_close(&fabric->fid);
	CHECK(ret == -FI_EBUSY, "closing a fabric with open children: %d, expected -FI_EBUSY", ret);
	if (eq)
		CHECK(fi_close(&eq->fid) == 0, "fi_close(eq)");
	if (domain)
		CHECK(fi_close(&domain->fid) == 0, "fi_close(domain)");
	ret = fi_close(&fabric->fid);
	CHECK(ret == 0, "fi_close(fabric): %s", fi_strerror(-ret));
out:
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return ret;
}

static const char *domain_name;
static long iterations = 100;

static int option(int opt, const char *arg)
{
	switch (opt) {
	case 'n': iterations = strtol(arg, NULL, 10); return 0;
	case 'd': domain_name = arg; return 0;
	}
	return -1;
}

int main(int argc, char **argv)
{
	const char *prov = "nd";
	const struct nd_cli cli = { .optstring = "p:n:d:h", .prov = &prov, .option = option,
				    .usage = "usage: %s [-p provider] [-n iterations] [-d domain]\n" };
	if (nd_parse_options(&cli, argc, argv))
		return 2;

	/* The first cycle loads libraries and device contexts that stay for
	 * the life of the process; count from after it. */
	if (one_cycle(prov, domain_name))
		return 1;
	int before = nd_count_fds();
	for (long i = 1; i < iterations && !failures; i++)
		one_cycle(prov, domain_name);
	int after = nd_count_fds();
	CHECK(after == before, "file descriptors: %d before, %d after %ld cycles", before, after,
	      iterations - 1);
	printf("nd_open_close: %ld cycles of %s, fds %d -> %d\n", iterations, prov, before, after);
	printf("nd_open_close: %d passed, %d failed\n", checks - failures, failures);
	return failures ? 1 : 0;
}
