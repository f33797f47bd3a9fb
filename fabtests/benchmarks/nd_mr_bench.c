/*
 * nd_mr_bench: what one registration cycle of a reused buffer costs a
 * provider: fi_mr_reg of the buffer for peers (FI_REMOTE_READ |
 * FI_REMOTE_WRITE), then fi_close, as ofi_rxm does for every rendezvous
 * message. With nd's cache and memory windows a cycle binds a window and
 * invalidates it (no registration call); without the cache, or with a
 * provider that deregisters at fi_close, it registers and deregisters.
 *
 *   nd_mr_bench [-p PROVIDER] [-a ADDRESS] [-n CYCLES]
 *
 * Prints "PROVIDER SIZE US_PER_CYCLE" for 4 KiB, 64 KiB, 1 MiB and 4 MiB
 * (the mean of CYCLES cycles, default 2000, after 10 unmeasured ones).
 * fabtests/scripts/nd_mr_bench.sh runs it for nd, nd without its cache and the verbs
 * provider in one boot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nd_ft.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

int main(int argc, char **argv)
{
	const char *prov = "nd", *address = nd_default_address();
	long cycles = 2000;
	int opt;
	while ((opt = getopt(argc, argv, "p:a:n:h")) != -1) {
		switch (opt) {
		case 'p': prov = optarg; break;
		case 'a': address = optarg; break;
		case 'n': cycles = atol(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-p provider] [-a address] [-n cycles]\n", argv[0]);
			return 2;
		}
	}
	if (cycles < 1) {
		fprintf(stderr, "-n: at least 1 cycle\n");
		return 2;
	}
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	CHECK(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), address, NULL, FI_SOURCE, hints, &info));
	fi_freeinfo(hints);
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	const size_t sizes[] = { 4096, 65536, 1 << 20, 4 << 20 };
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		const size_t len = sizes[s];
		void *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (buf == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		memset(buf, 1, len);
		double start = 0;
		for (long i = -10; i < cycles; i++) {
			if (i == 0)
				start = nd_now_us();
			struct fid_mr *mr;
			CHECK(fi_mr_reg(domain, buf, len, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
			CHECK(fi_close(&mr->fid));
		}
		printf("%s %zu %.2f\n", prov, len, (nd_now_us() - start) / (double)cycles);
		fflush(stdout);
		munmap(buf, len);
	}
	CHECK(fi_close(&domain->fid));
	CHECK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	return 0;
}
