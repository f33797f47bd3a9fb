/*
 * guest_limits.cpp: a device's last objects. The kernel counts every verbs
 * object a process makes (queue pairs, CQs, regions, windows, protection
 * domains) against the device's limits and against the rdma cgroup's
 * rdma.max, and refuses the one past either with EAGAIN. The device's own
 * limits are beyond reach here (Soft-RoCE's are about a million), so each
 * test moves itself into a cgroup of its own whose rdma.max allows a few
 * objects more than its domain holds, then makes objects until the kernel
 * refuses one: that one must fail with a clear code, closing one must make
 * room for the next, and closing everything must leave no object charged.
 *
 * Needs root: it writes /sys/fs/cgroup (run-guest-tests runs this program
 * as root for that reason, the other device tests as a user).
 */
#include <criterion/criterion.h>

#include "guest.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace nd::test;

namespace {

constexpr const char *kCgroupRoot = "/sys/fs/cgroup";

bool write_file(const std::string &path, const std::string &text)
{
	std::ofstream out(path);
	out << text;
	out.flush();
	return static_cast<bool>(out);
}

/* A cgroup of this process's own with the rdma controller: objects of the
 * test device are limited by set_objects. Leaves it at destruction. */
class ObjectLimit {
public:
	ObjectLimit()
	{
		cr_assert_eq(geteuid(), 0u, "needs root: it writes the rdma cgroup's rdma.max");
		struct stat st;
		if (stat((std::string(kCgroupRoot) + "/cgroup.controllers").c_str(), &st) != 0)
			cr_assert_eq(mount("none", kCgroupRoot, "cgroup2", 0, nullptr), 0,
				     "mount cgroup2 on %s: %s", kCgroupRoot, std::strerror(errno));
		cr_assert(write_file(std::string(kCgroupRoot) + "/cgroup.subtree_control", "+rdma"),
			  "the kernel has no rdma cgroup controller (CONFIG_CGROUP_RDMA)");
		dir_ = std::string(kCgroupRoot) + "/nd-limits-" + std::to_string(getpid());
		cr_assert(mkdir(dir_.c_str(), 0755) == 0 || errno == EEXIST, "mkdir %s: %s", dir_.c_str(),
			  std::strerror(errno));
		cr_assert(write_file(dir_ + "/cgroup.procs", std::to_string(getpid())), "joining %s", dir_.c_str());
	}
	~ObjectLimit()
	{
		write_file(std::string(kCgroupRoot) + "/cgroup.procs", std::to_string(getpid()));
		rmdir(dir_.c_str());
	}
	ObjectLimit(const ObjectLimit &) = delete;
	ObjectLimit &operator=(const ObjectLimit &) = delete;

	/* The verbs objects of the test device charged to this process. */
	int in_use() const
	{
		std::ifstream in(dir_ + "/rdma.current");
		std::string line;
		while (std::getline(in, line)) {
			std::istringstream words(line);
			std::string device, word;
			words >> device;
			if (device != device_name())
				continue;
			while (words >> word)
				if (word.rfind("hca_object=", 0) == 0)
					return std::atoi(word.c_str() + 11);
		}
		return 0; /* the device has no line until something is charged */
	}
	/* Allows `more` objects beyond those in use. */
	void allow_more(int more) const
	{
		const std::string limit = std::string(device_name()) + " hca_handle=max hca_object=" +
					  std::to_string(in_use() + more);
		cr_assert(write_file(dir_ + "/rdma.max", limit), "writing rdma.max");
	}

private:
	std::string dir_;
};

struct Opened {
	InfoPtr info;
	fid_fabric *fabric = nullptr;
	fid_domain *domain = nullptr;
	fid_eq *eq = nullptr;
	fid_cq *cq = nullptr;

	Opened()
	{
		InfoPtr hints = nd_hints();
		cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &info), 0);
		cr_assert_eq(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
		cr_assert_eq(fi_domain(fabric, info.get(), &domain, nullptr), 0);
		fi_eq_attr eq_attr{};
		eq_attr.wait_obj = FI_WAIT_UNSPEC;
		cr_assert_eq(fi_eq_open(fabric, &eq_attr, &eq, nullptr), 0);
		fi_cq_attr cq_attr{};
		cq_attr.format = FI_CQ_FORMAT_CONTEXT;
		cq_attr.size = 64;
		cr_assert_eq(fi_cq_open(domain, &cq_attr, &cq, nullptr), 0);
	}
	void close_all()
	{
		cr_assert_eq(fi_close(&cq->fid), 0);
		cr_assert_eq(fi_close(&eq->fid), 0);
		cr_assert_eq(fi_close(&domain->fid), 0);
		cr_assert_eq(fi_close(&fabric->fid), 0);
	}
	/* An endpoint enabled on the CQ and EQ (its queue pair made), or the
	 * code fi_enable gave, the endpoint closed. */
	int enabled_endpoint(fid_ep **ep)
	{
		cr_assert_eq(fi_endpoint(domain, info.get(), ep, nullptr), 0);
		cr_assert_eq(fi_ep_bind(*ep, &eq->fid, 0), 0);
		cr_assert_eq(fi_ep_bind(*ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		int ret = fi_enable(*ep);
		if (ret) {
			cr_assert_eq(fi_close(&(*ep)->fid), 0);
			*ep = nullptr;
		}
		return ret;
	}
};

constexpr size_t kRegion = 4096;
constexpr int kAtMost = 512; /* the tests' limits are far below */

/* Regions peers may write (a registration, and a memory window where the
 * domain binds them), one per page of `memory`, until the device refuses
 * one: that one's code. */
int register_until_refused(fid_domain *domain, std::vector<char> &memory, std::vector<fid_mr *> *regions)
{
	while (regions->size() < kAtMost) {
		fid_mr *mr = nullptr;
		int ret = fi_mr_reg(domain, &memory[regions->size() * kRegion], kRegion, FI_REMOTE_WRITE, 0, 0, 0,
				    &mr, nullptr);
		if (ret)
			return ret;
		regions->push_back(mr);
	}
	return 0;
}

template <class Fid>
void close_every(const std::vector<Fid *> &fids)
{
	for (Fid *fid : fids)
		cr_assert_eq(fi_close(&fid->fid), 0);
}

/* Closes what `o` opened; then no object may be charged. */
void close_and_expect_nothing_charged(Opened &o, const ObjectLimit &limit)
{
	o.close_all();
	cr_assert_eq(limit.in_use(), 0, "%d objects still charged after every close", limit.in_use());
}

} // namespace

Test(limits, registrations_past_the_object_limit_are_eagain_and_a_close_makes_room)
{
	ObjectLimit limit;
	Opened o;
	limit.allow_more(24);
	std::vector<char> memory(kAtMost * kRegion);
	std::vector<fid_mr *> regions;
	int ret = register_until_refused(o.domain, memory, &regions);
	cr_assert_eq(ret, -FI_EAGAIN, "the registration past the limit: %d (%s)", ret, fi_strerror(-ret));
	cr_assert_gt(regions.size(), 4u, "only %zu regions before the limit", regions.size());

	cr_assert_eq(fi_close(&regions.back()->fid), 0);
	regions.pop_back();
	fid_mr *again = nullptr;
	cr_assert_eq(fi_mr_reg(o.domain, &memory[(kAtMost - 1) * kRegion], kRegion, FI_REMOTE_WRITE, 0, 0, 0,
			       &again, nullptr),
		     0, "a close made no room");
	regions.push_back(again);

	close_every(regions);
	close_and_expect_nothing_charged(o, limit);
}

Test(limits, endpoints_past_the_object_limit_are_eagain_and_a_close_makes_room)
{
	ObjectLimit limit;
	Opened o;
	limit.allow_more(10);
	std::vector<fid_ep *> endpoints;
	int ret = 0;
	while (endpoints.size() < kAtMost) {
		fid_ep *ep = nullptr;
		ret = o.enabled_endpoint(&ep);
		if (ret)
			break;
		endpoints.push_back(ep);
	}
	cr_assert_eq(ret, -FI_EAGAIN, "the endpoint past the limit: %d (%s)", ret, fi_strerror(-ret));
	cr_assert_gt(endpoints.size(), 1u, "only %zu endpoints before the limit", endpoints.size());

	cr_assert_eq(fi_close(&endpoints.back()->fid), 0);
	endpoints.pop_back();
	fid_ep *again = nullptr;
	cr_assert_eq(o.enabled_endpoint(&again), 0, "a close made no room");
	endpoints.push_back(again);

	close_every(endpoints);
	close_and_expect_nothing_charged(o, limit);
}

/* Closed regions stay registered in nd's cache, their windows pooled, for
 * the next registration of the same memory: idle device objects. At the
 * limit they must give way to what the application asks for. */
Test(limits, idle_registrations_and_windows_give_way_to_an_endpoint_at_the_limit)
{
	ObjectLimit limit;
	Opened o;
	limit.allow_more(16);
	std::vector<char> memory(kAtMost * kRegion);
	std::vector<fid_mr *> regions;
	cr_assert_eq(register_until_refused(o.domain, memory, &regions), -FI_EAGAIN);
	cr_assert_gt(regions.size(), 2u);
	close_every(regions);

	fid_ep *ep = nullptr;
	int ret = o.enabled_endpoint(&ep);
	cr_assert_eq(ret, 0, "fi_enable with %zu registrations idle in the cache: %d (%s)", regions.size(), ret,
		     fi_strerror(-ret));
	cr_assert_eq(fi_close(&ep->fid), 0);

	/* The regions can be registered again: all but one, whose room the
	 * endpoint's verbs CQ keeps until the CQ closes. */
	regions.pop_back();
	for (size_t i = 0; i < regions.size(); i++)
		cr_assert_eq(fi_mr_reg(o.domain, &memory[i * kRegion], kRegion, FI_REMOTE_WRITE, 0, 0, 0,
				       &regions[i], nullptr),
			     0, "region %zu of %zu again", i, regions.size());
	close_every(regions);
	close_and_expect_nothing_charged(o, limit);
}
