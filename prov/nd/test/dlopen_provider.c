/*
 * dlopen_provider.c: a plain C program loads the built provider the way
 * libfabric does and checks its entry point, then asks libfabric itself
 * (with FI_PROVIDER_PATH pointing at the build) whether it found `nd`.
 * Being C, it also checks that the public extension header compiles as C
 * against the installed libfabric, and that its values do not depend on
 * which libfabric generation (1.x or 2.x) that is.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_nd.h>
#include <rdma/providers/fi_prov.h>

static int failures;
static int checks;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		checks++;                                                  \
		if (!(cond)) {                                             \
			failures++;                                        \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                      \
			fputc('\n', stderr);                               \
		}                                                          \
	} while (0)

int main(void)
{
	/* An application built against libfabric 1.x and a provider built
	 * against 2.x (or the reverse) must agree on these. */
	CHECK(FI_ND_CONNRESP == 0x84e40001u, "FI_ND_CONNRESP is 0x%x", (unsigned)FI_ND_CONNRESP);
	CHECK(FI_OPT_ND_INBOUND_READ_LIMIT == -0x4e40000, "FI_OPT_ND_INBOUND_READ_LIMIT");
	CHECK(FI_ND_COMPLETE_CONNECT == -0x4e40100, "FI_ND_COMPLETE_CONNECT");

	void *handle = dlopen(ND_PROVIDER_SO, RTLD_NOW | RTLD_LOCAL);
	CHECK(handle != NULL, "dlopen(%s): %s", ND_PROVIDER_SO, dlerror());
	if (!handle)
		return 1;
	struct fi_provider *(*ini)(void) =
		(struct fi_provider * (*)(void)) dlsym(handle, "fi_prov_ini");
	CHECK(ini != NULL, "fi_prov_ini not exported");
	CHECK(dlsym(handle, "nd_prov") == NULL, "internal symbols must stay hidden");
	if (ini) {
		struct fi_provider *prov = ini();
		CHECK(prov && strcmp(prov->name, "nd") == 0, "provider name");
		CHECK(prov && prov->fi_version == FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION),
		      "announces the API of the headers it was built with");
		CHECK(prov && prov->version == FI_VERSION(0, 1), "provider version 0.1");
		CHECK(prov && prov->getinfo && prov->fabric && prov->cleanup, "entry points set");
	}

	/* libfabric's own loader: FI_PROV_ATTR_ONLY lists every provider it
	 * loaded, with no device needed. */
	struct fi_info *list = NULL;
	int ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, FI_PROV_ATTR_ONLY, NULL, &list);
	CHECK(ret == 0, "fi_getinfo(FI_PROV_ATTR_ONLY): %s", fi_strerror(-ret));
	int found = 0;
	for (struct fi_info *cur = list; cur; cur = cur->next)
		if (cur->fabric_attr->prov_name && strcmp(cur->fabric_attr->prov_name, "nd") == 0 &&
		    cur->fabric_attr->prov_version == FI_VERSION(0, 1))
			found = 1;
	CHECK(found, "libfabric did not load nd from FI_PROVIDER_PATH=%s",
	      getenv("FI_PROVIDER_PATH") ? getenv("FI_PROVIDER_PATH") : "(unset)");
	fi_freeinfo(list);

	/* With nd alone selected, a host without an RDMA device gets
	 * -FI_ENODATA; one with a device gets infos named nd. Never a crash. */
	struct fi_info *hints = fi_allocinfo();
	hints->fabric_attr->prov_name = strdup("nd");
	struct fi_info *info = NULL;
	ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints, &info);
	CHECK(ret == 0 || ret == -FI_ENODATA, "fi_getinfo(nd): %s", fi_strerror(-ret));
	for (struct fi_info *cur = info; cur; cur = cur->next)
		CHECK(strcmp(cur->fabric_attr->prov_name, "nd") == 0, "info from %s",
		      cur->fabric_attr->prov_name);
	fi_freeinfo(info);
	fi_freeinfo(hints);

	dlclose(handle);
	printf("dlopen: %d passed, %d failed\n", checks - failures, failures);
	return failures ? 1 : 0;
}
