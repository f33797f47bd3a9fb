/* nd_poll.cpp: poll sets (fi_poll_open and its operations). */
#include "nd_poll.h"
#include "nd_cntr.h"
#include "nd_cq.h"
#include "nd_domain.h"
#include "nd_unsupported.h"

#include <algorithm>
#include <memory>

namespace nd {

namespace {

bool same(const PollSet::Member &m, const fid *member)
{
	return (m.cq && &m.cq->fid().fid == member) || (m.counter && &m.counter->cntr.fid == member);
}

} // namespace

int PollSet::add(fid *member)
{
	if (!member) {
		ND_WARN(FI_LOG_DOMAIN, "fi_poll_add: the object is NULL\n");
		return -FI_EINVAL;
	}
	Member m;
	if (member->fclass == FI_CLASS_CQ) {
		m.cq = from_fid<CompletionQueue>(member);
		if (m.cq->owning_domain() != domain) {
			ND_WARN(FI_LOG_DOMAIN, "fi_poll_add: the CQ belongs to another domain\n");
			return -FI_EINVAL;
		}
	} else if (member->fclass == FI_CLASS_CNTR) {
		m.counter = from_fid<Counter>(member);
		if (m.counter->domain != domain) {
			ND_WARN(FI_LOG_DOMAIN, "fi_poll_add: the counter belongs to another domain\n");
			return -FI_EINVAL;
		}
		m.seen_value = m.counter->words.success.load(std::memory_order_acquire);
		m.seen_errors = m.counter->words.errors.load(std::memory_order_acquire);
	} else {
		ND_WARN(FI_LOG_DOMAIN, "fi_poll_add: class %zu; a poll set holds CQs and counters\n",
			member->fclass);
		return -FI_EINVAL;
	}
	std::lock_guard<Mutex> guard(lock);
	if (std::any_of(members.begin(), members.end(), [&](const Member &x) { return same(x, member); })) {
		ND_WARN(FI_LOG_DOMAIN, "fi_poll_add: already in the poll set\n");
		return -FI_EALREADY;
	}
	members.push_back(m);
	if (m.cq)
		m.cq->bindings().acquire();
	else
		m.counter->bound.acquire();
	return 0;
}

int PollSet::del(fid *member)
{
	std::lock_guard<Mutex> guard(lock);
	auto it = std::find_if(members.begin(), members.end(),
			       [&](const Member &x) { return same(x, member); });
	if (it == members.end()) {
		ND_WARN(FI_LOG_DOMAIN, "fi_poll_del: not in the poll set\n");
		return -FI_ENOENT;
	}
	if (it->cq)
		it->cq->bindings().release();
	else
		it->counter->bound.release();
	members.erase(it);
	return 0;
}

int PollSet::poll(void **context, int count)
{
	if (count < 0 || (count && !context)) {
		ND_WARN(FI_LOG_DOMAIN, "fi_poll: %d contexts into %p\n", count, static_cast<void *>(context));
		return -FI_EINVAL;
	}
	std::lock_guard<Mutex> guard(lock);
	int found = 0;
	for (Member &m : members) {
		if (found == count)
			break;
		if (m.cq) {
			if (m.cq->pending())
				context[found++] = m.cq->fid().fid.context;
			continue;
		}
		m.counter->progress();
		const uint64_t value = m.counter->words.success.load(std::memory_order_acquire);
		const uint64_t errors = m.counter->words.errors.load(std::memory_order_acquire);
		if (value != m.seen_value || errors != m.seen_errors) {
			m.seen_value = value;
			m.seen_errors = errors;
			context[found++] = m.counter->cntr.fid.context;
		}
	}
	return found;
}

int PollSet::close()
{
	{
		std::lock_guard<Mutex> guard(lock);
		for (Member &m : members) {
			if (m.cq)
				m.cq->bindings().release();
			else
				m.counter->bound.release();
		}
		members.clear();
	}
	Domain *d = domain;
	delete this;
	d->children.release();
	return 0;
}

namespace {

PollSet *poll_of(fid_poll *p) { return from_fid<PollSet>(p); }

int poll_add(fid_poll *p, fid *member, uint64_t flags) noexcept
{
	if (!p)
		return -FI_EINVAL;
	if (flags) {
		ND_WARN(FI_LOG_DOMAIN, "fi_poll_add: flags 0x%llx; none are defined\n",
			static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	return guarded("fi_poll_add", [&] { return poll_of(p)->add(member); });
}

int poll_del(fid_poll *p, fid *member, uint64_t flags) noexcept
{
	if (!p)
		return -FI_EINVAL;
	if (flags) {
		ND_WARN(FI_LOG_DOMAIN, "fi_poll_del: flags 0x%llx; none are defined\n",
			static_cast<unsigned long long>(flags));
		return -FI_EBADFLAGS;
	}
	return guarded("fi_poll_del", [&] { return poll_of(p)->del(member); });
}

int poll_poll(fid_poll *p, void **context, int count) noexcept
{
	if (!p)
		return -FI_EINVAL;
	return guarded("fi_poll", [&] { return poll_of(p)->poll(context, count); });
}

int poll_close(fid *f) noexcept
{
	return guarded("fi_close(poll)", [&] { return from_fid<PollSet>(f)->close(); });
}

fi_ops poll_fid_ops = {
	.size = sizeof(fi_ops),
	.close = poll_close,
	.bind = unsupported::bind,
	.control = unsupported::control,
	.ops_open = unsupported::ops_open,
	.tostr = nullptr,
	.ops_set = nullptr,
};

fi_ops_poll poll_ops = {
	.size = sizeof(fi_ops_poll),
	.poll = poll_poll,
	.poll_add = poll_add,
	.poll_del = poll_del,
};

} // namespace

int poll_open(fid_domain *fdomain, fi_poll_attr *attr, fid_poll **out) noexcept
{
	return guarded("fi_poll_open", [&] {
		if (!fdomain || !out) {
			ND_WARN(FI_LOG_DOMAIN, "fi_poll_open: domain and pollset must not be NULL\n");
			return -FI_EINVAL;
		}
		if (attr && attr->flags) {
			ND_WARN(FI_LOG_DOMAIN, "fi_poll_open: flags 0x%llx; none are defined\n",
				static_cast<unsigned long long>(attr->flags));
			return -FI_EBADFLAGS;
		}
		Domain *domain = from_fid<Domain>(fdomain);
		auto set = std::make_unique<PollSet>();
		set->pollset.fid.fclass = FI_CLASS_POLL;
		set->pollset.fid.context = nullptr;
		set->pollset.fid.ops = &poll_fid_ops;
		set->pollset.ops = &poll_ops;
		set->domain = domain;
		domain->children.acquire();
		*out = &set.release()->pollset;
		return 0;
	});
}

} // namespace nd
