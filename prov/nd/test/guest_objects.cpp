/*
 * guest_objects.cpp: fabric, domain and EQ on a real device: lifetimes
 * (a parent with live children refuses to close), bad arguments, the EQ's
 * wait fd under epoll, and the operations the provider does not offer, which
 * must say -FI_ENOSYS rather than pretend.
 */
#include <criterion/criterion.h>

#include "guest.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <cstdlib>
#include <cstring>

#include <sys/epoll.h>
#include <unistd.h>

using namespace nd::test;

namespace {

struct Opened {
	InfoPtr info;
	fid_fabric *fabric = nullptr;
	fid_domain *domain = nullptr;
};

Opened open_fabric_and_domain()
{
	Opened o;
	InfoPtr hints = nd_hints();
	cr_assert_eq(getinfo(nullptr, nullptr, 0, hints.get(), &o.info), 0);
	cr_assert_eq(fi_fabric(o.info->fabric_attr, &o.fabric, nullptr), 0);
	cr_assert_eq(fi_domain(o.fabric, o.info.get(), &o.domain, nullptr), 0);
	return o;
}

fid_eq *open_eq(fid_fabric *fabric, fi_wait_obj wait = FI_WAIT_FD)
{
	fi_eq_attr attr{};
	attr.wait_obj = wait;
	attr.flags = FI_WRITE;
	fid_eq *eq = nullptr;
	cr_assert_eq(fi_eq_open(fabric, &attr, &eq, nullptr), 0);
	return eq;
}

} // namespace

Test(objects, open_and_close_in_order)
{
	Opened o = open_fabric_and_domain();
	fid_eq *eq = open_eq(o.fabric);
	cr_assert_eq(fi_close(&eq->fid), 0);
	cr_assert_eq(fi_close(&o.domain->fid), 0);
	cr_assert_eq(fi_close(&o.fabric->fid), 0);
}

Test(objects, parents_with_children_refuse_to_close)
{
	Opened o = open_fabric_and_domain();
	fid_eq *eq = open_eq(o.fabric);
	cr_assert_eq(fi_close(&o.fabric->fid), -FI_EBUSY);
	cr_assert_eq(fi_close(&o.domain->fid), 0);
	cr_assert_eq(fi_close(&o.fabric->fid), -FI_EBUSY, "the EQ is still open");
	cr_assert_eq(fi_close(&eq->fid), 0);
	cr_assert_eq(fi_close(&o.fabric->fid), 0);
}

Test(objects, two_domains_on_one_device)
{
	Opened o = open_fabric_and_domain();
	fid_domain *second = nullptr;
	cr_assert_eq(fi_domain(o.fabric, o.info.get(), &second, nullptr), 0);
	cr_assert_neq(second, o.domain);
	cr_assert_eq(fi_close(&second->fid), 0);
	cr_assert_eq(fi_close(&o.domain->fid), 0);
	cr_assert_eq(fi_close(&o.fabric->fid), 0);
}

Test(objects, domain_of_an_unknown_device_is_enodev)
{
	Opened o = open_fabric_and_domain();
	InfoPtr other(fi_dupinfo(o.info.get()));
	free(other->domain_attr->name);
	other->domain_attr->name = strdup("nosuchdev0");
	fid_domain *domain = nullptr;
	cr_assert_eq(fi_domain(o.fabric, other.get(), &domain, nullptr), -FI_ENODEV);
	cr_assert_null(domain);
	free(other->fabric_attr->name);
	other->fabric_attr->name = strdup("192.168.77.0/24");
	cr_assert_eq(fi_domain(o.fabric, other.get(), &domain, nullptr), -FI_EINVAL,
		     "an info of another fabric");
	free(other->domain_attr->name);
	other->domain_attr->name = nullptr;
	cr_assert_eq(fi_domain(o.fabric, other.get(), &domain, nullptr), -FI_EINVAL);
	cr_assert_eq(fi_close(&o.domain->fid), 0);
	cr_assert_eq(fi_close(&o.fabric->fid), 0);
}

Test(objects, eq_wait_fd_works_with_epoll)
{
	Opened o = open_fabric_and_domain();
	fid_eq *eq = open_eq(o.fabric);
	int fd = -1;
	cr_assert_eq(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
	int ep = epoll_create1(0);
	epoll_event ev{};
	ev.events = EPOLLIN;
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
	epoll_event out{};
	cr_assert_eq(epoll_wait(ep, &out, 1, 0), 0, "nothing queued yet");
	fi_eq_entry entry{};
	entry.data = 5;
	cr_assert_eq(fi_eq_write(eq, FI_NOTIFY, &entry, sizeof(entry), 0), (ssize_t)sizeof(entry));
	cr_assert_eq(epoll_wait(ep, &out, 1, 1000), 1);
	fid *fids[] = {&eq->fid};
	cr_assert_eq(fi_trywait(o.fabric, fids, 1), -FI_EAGAIN);
	uint32_t event;
	fi_eq_entry read_back{};
	cr_assert_eq(fi_eq_sread(eq, &event, &read_back, sizeof(read_back), 1000, 0),
		     (ssize_t)sizeof(read_back));
	cr_assert_eq(read_back.data, 5u);
	cr_assert_eq(fi_trywait(o.fabric, fids, 1), 0);
	cr_assert_eq(epoll_wait(ep, &out, 1, 0), 0);
	close(ep);
	cr_assert_eq(fi_close(&eq->fid), 0);
	cr_assert_eq(fi_close(&o.domain->fid), 0);
	cr_assert_eq(fi_close(&o.fabric->fid), 0);
}

Test(objects, eq_open_rejects_bad_attributes)
{
	Opened o = open_fabric_and_domain();
	fid_eq *eq = nullptr;
	cr_assert_eq(fi_eq_open(o.fabric, nullptr, &eq, nullptr), -FI_EINVAL);
	fi_eq_attr attr{};
	attr.wait_obj = FI_WAIT_SET;
	cr_assert_eq(fi_eq_open(o.fabric, &attr, &eq, nullptr), -FI_EINVAL, "FI_WAIT_SET without a set");
	cr_assert_null(eq);
	attr.wait_obj = FI_WAIT_MUTEX_COND;
	cr_assert_eq(fi_eq_open(o.fabric, &attr, &eq, nullptr), -FI_ENOSYS);
	cr_assert_null(eq);
	cr_assert_eq(fi_close(&o.domain->fid), 0);
	cr_assert_eq(fi_close(&o.fabric->fid), 0, "failed opens leave no child behind");
}

Test(objects, unsupported_operations_say_enosys)
{
	Opened o = open_fabric_and_domain();
	fi_av_attr av_attr{};
	fid_av *av = nullptr;
	cr_assert_eq(fi_av_open(o.domain, &av_attr, &av, nullptr), -FI_ENOSYS);
	char buf[64];
	fid_ep *ep = nullptr;
	cr_assert_eq(fi_endpoint(o.domain, o.info.get(), &ep, nullptr), 0);
	cr_assert_eq(fi_tsend(ep, buf, sizeof(buf), nullptr, 0, 0, nullptr), -FI_ENOSYS);
	/* Data calls exist but an endpoint that is not connected refuses them. */
	cr_assert_eq(fi_send(ep, buf, sizeof(buf), nullptr, 0, nullptr), -FI_ENOTCONN);
	cr_assert_eq(fi_read(ep, buf, sizeof(buf), nullptr, 0, 0, 0, nullptr), -FI_ENOTCONN);
	cr_assert_eq(fi_recv(ep, buf, sizeof(buf), nullptr, 0, nullptr), -FI_EOPBADSTATE,
		     "no receive before fi_enable");
	cr_assert_eq(fi_ep_bind(ep, &o.domain->fid, 0), -FI_EINVAL, "a domain is not bound to an endpoint");
	cr_assert_eq(fi_close(&o.domain->fid), -FI_EBUSY, "the endpoint is open");
	cr_assert_eq(fi_close(&ep->fid), 0);
	cr_assert_eq(fi_close(&o.domain->fid), 0);
	cr_assert_eq(fi_close(&o.fabric->fid), 0);
}

Test(objects, endpoints_check_their_arguments)
{
	Opened o = open_fabric_and_domain();
	fid_ep *ep = nullptr;
	cr_assert_eq(fi_endpoint(o.domain, nullptr, &ep, nullptr), -FI_EINVAL);
	InfoPtr bad(fi_dupinfo(o.info.get()));
	bad->ep_attr->type = FI_EP_RDM;
	cr_assert_eq(fi_endpoint(o.domain, bad.get(), &ep, nullptr), -FI_EINVAL);
	bad->ep_attr->type = FI_EP_MSG;
	fid_t fake_handle = &o.domain->fid;
	bad->handle = fake_handle;
	cr_assert_eq(fi_endpoint(o.domain, bad.get(), &ep, nullptr), -FI_EINVAL,
		     "a handle that is not a connection request");
	bad->handle = nullptr;
	cr_assert_null(ep);
	cr_assert_eq(fi_endpoint(o.domain, o.info.get(), &ep, nullptr), 0);
	cr_assert_eq(fi_enable(ep), -FI_ENOEQ, "an endpoint needs its EQ first");
	char addr[8] = {};
	cr_assert_eq(fi_setname(&ep->fid, addr, sizeof(addr)), -FI_EINVAL);
	int value = 1;
	cr_assert_eq(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, 12345, &value, sizeof(value)), -FI_ENOPROTOOPT);
	cr_assert_eq(fi_close(&ep->fid), 0);
	fid_pep *pep = nullptr;
	cr_assert_eq(fi_passive_ep(o.fabric, o.info.get(), &pep, nullptr), 0);
	cr_assert_eq(fi_listen(pep), -FI_ENOEQ, "a listener needs its EQ first");
	int backlog = -1;
	cr_assert_eq(fi_control(&pep->fid, FI_BACKLOG, &backlog), -FI_EINVAL);
	cr_assert_eq(fi_close(&o.fabric->fid), -FI_EBUSY, "the listener is open");
	cr_assert_eq(fi_close(&pep->fid), 0);
	cr_assert_eq(fi_close(&o.domain->fid), 0);
	cr_assert_eq(fi_close(&o.fabric->fid), 0);
}

/* fi_endpoint(3) lets an info leave ep_attr out. The endpoint keeps what
 * it reads of the info when it opens: it once kept a copy and read the
 * copy's ep_attr at fi_enable, a NULL dereference. It enables with the
 * defaults, and its name is the info's source address until it binds. */
Test(objects, an_endpoint_opened_without_ep_attr_enables)
{
	Opened o = open_fabric_and_domain();
	InfoPtr bare(fi_dupinfo(o.info.get()));
	cr_assert_not_null(bare);
	std::free(bare->ep_attr);
	bare->ep_attr = nullptr;
	fid_ep *ep = nullptr;
	cr_assert_eq(fi_endpoint(o.domain, bare.get(), &ep, nullptr), 0);
	fid_eq *eq = open_eq(o.fabric);
	fi_cq_attr cq_attr{};
	cq_attr.format = FI_CQ_FORMAT_CONTEXT;
	fid_cq *cq = nullptr;
	cr_assert_eq(fi_cq_open(o.domain, &cq_attr, &cq, nullptr), 0);
	cr_assert_eq(fi_ep_bind(ep, &eq->fid, 0), 0);
	cr_assert_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	cr_assert_eq(fi_enable(ep), 0);
	if (o.info->src_addr) {
		char name[128] = {};
		size_t len = sizeof(name);
		cr_assert_eq(fi_getname(&ep->fid, name, &len), 0);
		cr_assert_eq(len, o.info->src_addrlen);
		cr_assert_eq(std::memcmp(name, o.info->src_addr, len), 0, "the info's source address");
	}
	cr_assert_eq(fi_close(&ep->fid), 0);
	cr_assert_eq(fi_close(&cq->fid), 0);
	cr_assert_eq(fi_close(&eq->fid), 0);
	cr_assert_eq(fi_close(&o.domain->fid), 0);
	cr_assert_eq(fi_close(&o.fabric->fid), 0);
}

Test(objects, fabric_needs_a_name)
{
	fi_fabric_attr attr{};
	fid_fabric *fabric = nullptr;
	attr.prov_name = const_cast<char *>("nd");
	cr_assert_eq(fi_fabric(&attr, &fabric, nullptr), -FI_EINVAL);
	cr_assert_null(fabric);
}
