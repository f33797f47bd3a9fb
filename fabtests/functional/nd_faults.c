/*
 * nd_faults: what the survivor of a fault sees, for any FI_EP_MSG provider
 * (-p nd, -p verbs), through the plain libfabric API; the faulty peers are
 * a killed process and raw rdma_cm clients (librdmacm, and the kernel's
 * rdma_cm interface itself where librdmacm would not send what is wanted).
 *
 *   nd_faults [-p PROVIDER] [-a ADDRESS] [-t SUBTEST] [-T SECONDS] [-W SECONDS] [-h]
 *
 * kill: a child process serves one connection and posts no receive; the
 *   survivor keeps 32 sends, 32 RDMA writes and 32 RDMA reads outstanding
 *   (the first send waits for a receive for ever, and an RC queue pair
 *   completes in order, so nothing behind it completes), then kills the
 *   child with SIGKILL. Asserted: every outstanding operation completes,
 *   in error, within -T seconds (default 10); the EQ reports the loss
 *   (FI_SHUTDOWN or an error entry) exactly once; every fi_close returns
 *   0; the process holds as many file descriptors as before.
 * garbage: an FI_EP_MSG listener of PROVIDER meets raw rdma_cm clients:
 *   - private data of every length 0..56 (the most an rdma_cm client may
 *     send with a connection request on InfiniBand and RoCE), random bytes,
 *     an honest first byte (the provider's length prefix) and a lying one
 *     that claims more than was sent. The request field is 56 bytes,
 *     zero-padded, whatever was sent; a provider that frames its data with
 *     a length byte (nd and verbs both do) must report the claimed length
 *     cut to the 55 bytes behind that byte, and those bytes exactly; the
 *     listener rejects each request;
 *   - absurd read limits: responder_resources and initiator_depth 255 in
 *     the request (librdmacm turns 255 into the device's maximum and
 *     refuses anything between, so this client speaks the kernel's rdma_cm
 *     interface directly); the listener accepts, and the limits it answers
 *     with and gives its queue pair must not exceed the device's;
 *   - early disconnect: a client with a queue pair destroys its id as soon
 *     as the connection is established; the listener's endpoint must
 *     report it once (FI_SHUTDOWN, or an error entry);
 *   - a client without a queue pair that destroys its id when the accept
 *     arrives, and one that answers the accept with rdma_reject (ND's
 *     Reject after Connect): the accepter must get FI_ECONNABORTED, once;
 *   - then a normal connection from a libfabric endpoint, with private
 *     data both ways and a message each way, every byte checked.
 *   Every object closes with 0 and the file descriptors are flat.
 *
 * Each case prints a line "FIGURE: case | provider | what the application
 * saw | time to see it", then "PASS: subtest" or "FAIL: subtest: why" (the
 * verbs provider fails some cases: that is a finding). The exit status is
 * 1 when a subtest failed, 2 for a usage error. A watchdog (-W seconds per
 * subtest, default 240) turns a hang into a failure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_cma_abi.h>

#include "nd_fds.h"
#include "nd_subtest.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_nd.h>
#include <rdma/fi_rma.h>

#define WINDOW 32		/* outstanding sends, writes and reads each */
#define MSG_BYTES 4096
#define RMA_BYTES 65536
#define REGION (2 * RMA_BYTES)
#define REQ_FIELD 56		/* private data of an rdma_cm connection request, IB/RoCE */
#define EVENT_MS 10000		/* longest wait for a connection event */
#define LINGER_MS 500		/* how long a second report of one loss is watched for */
#define START_MS 60000		/* the serving child's start (slow under valgrind) */

static const char *prov = "nd";
static const char *address;
static int complete_limit_s = 10;
static int watchdog_s = 240;
static bool is_nd;

/* ---- common ---- */

static const char *current = "";
static volatile pid_t child_pid = -1;

/* The watchdog: a subtest that stops making progress fails instead of
 * blocking whoever runs it. Only async-signal-safe calls. */
static void on_alarm(int sig)
{
	(void)sig;
	char line[160];
	int n = snprintf(line, sizeof(line), "FAIL: %s: no result within %d s: hung\n", current, watchdog_s);
	if (n > 0 && write(STDOUT_FILENO, line, (size_t)n) < 0)
		_exit(1);
	if (child_pid > 0)
		kill(child_pid, SIGKILL);
	_exit(1);
}

static void figure(const char *name, const char *seen, double ms)
{
	printf("FIGURE: %s | %s | %s | %.1f ms\n", name, prov, seen, ms);
	fflush(stdout);
}

static struct fi_info *hints_for(uint64_t caps)
{
	struct fi_info *hints = fi_allocinfo();
	if (!hints)
		return NULL;
	hints->fabric_attr->prov_name = strdup(prov);
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = caps;
	hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->tx_attr->size = 4 * WINDOW;
	hints->rx_attr->size = 2 * WINDOW;
	return hints;
}

/* fi_getinfo for a listener (service NULL: port 0, FI_SOURCE) or for a
 * client of `service`. */
static int getinfo(const char *service, uint64_t caps, struct fi_info **out)
{
	struct fi_info *hints = hints_for(caps);
	if (!hints)
		return -FI_ENOMEM;
	int rc = fi_getinfo(FI_VERSION(1, 5), address, service ? service : "0", service ? 0 : FI_SOURCE,
			    hints, out);
	fi_freeinfo(hints);
	return rc;
}

/* One EQ entry, event or error, with the bytes that came with it. */
struct ev {
	bool is_error;
	uint32_t type;
	fid_t fid;
	struct fi_info *info;
	int err, prov_errno;
	size_t len;		/* private data bytes (events), err_data bytes (errors) */
	uint8_t data[256];
};

/* Reads one entry within timeout_ms: 1, 0 when none came, or a negative
 * error of the read itself. */
static int read_ev(struct fid_eq *eq, struct ev *ev, int timeout_ms)
{
	struct {
		struct fi_eq_cm_entry cm;
		uint8_t data[256];
	} entry;
	memset(ev, 0, sizeof(*ev));
	double give_up = now_ms() + timeout_ms;
	for (;;) {
		int left = (int)(give_up - now_ms());
		ssize_t rc = fi_eq_sread(eq, &ev->type, &entry, sizeof(entry), left > 0 ? left : 0, 0);
		if (rc >= (ssize_t)sizeof(entry.cm) || (rc >= 0 && ev->type == FI_SHUTDOWN)) {
			ev->fid = entry.cm.fid;
			ev->info = ev->type == FI_CONNREQ ? entry.cm.info : NULL;
			ev->len = rc > (ssize_t)sizeof(entry.cm) ? (size_t)rc - sizeof(entry.cm) : 0;
			memcpy(ev->data, entry.data, ev->len);
			return 1;
		}
		if (rc == -FI_EAVAIL) {
			struct fi_eq_err_entry err = { 0 };
			rc = fi_eq_readerr(eq, &err, 0);
			if (rc < 0)
				return (int)rc;
			ev->is_error = true;
			ev->fid = err.fid;
			ev->err = err.err;
			ev->prov_errno = err.prov_errno;
			if (err.err_data && err.err_data_size) {
				ev->len = err.err_data_size < sizeof(ev->data) ? err.err_data_size : sizeof(ev->data);
				memcpy(ev->data, err.err_data, ev->len);
			}
			return 1;
		}
		if (rc >= 0)
			return -FI_EOTHER; /* an entry too short for its kind */
		if (rc != -FI_EAGAIN && rc != -FI_ETIMEDOUT && rc != -FI_EINTR)
			return (int)rc;
		if (now_ms() >= give_up)
			return 0;
	}
}

static const char *event_str(const struct ev *ev)
{
	static char s[96];
	if (ev->is_error)
		snprintf(s, sizeof(s), "error entry %s (prov_errno %d)", fi_strerror(ev->err), ev->prov_errno);
	else if (ev->type == FI_CONNREQ)
		snprintf(s, sizeof(s), "FI_CONNREQ");
	else if (ev->type == FI_CONNECTED)
		snprintf(s, sizeof(s), "FI_CONNECTED");
	else if (ev->type == FI_SHUTDOWN)
		snprintf(s, sizeof(s), "FI_SHUTDOWN");
	else
		snprintf(s, sizeof(s), "event %u", ev->type);
	return s;
}

/* Waits for `want` on `fid` (any fid when NULL); anything else first is a
 * failure. */
static int expect_ev(struct fid_eq *eq, uint32_t want, fid_t fid, struct ev *ev, const char *what)
{
	int rc = read_ev(eq, ev, EVENT_MS);
	if (rc < 0)
		FAIL("%s: fi_eq_sread: %s", what, fi_strerror(-rc));
	if (rc == 0)
		FAIL("%s: nothing on the EQ within %d ms", what, EVENT_MS);
	if (ev->is_error || ev->type != want || (fid && ev->fid != fid)) {
		if (ev->info)
			fi_freeinfo(ev->info);
		FAIL("%s: got %s%s", what, event_str(ev), fid && ev->fid != fid ? " for another object" : "");
	}
	return T_PASS;
}

/* The device's own read limits (verbs max_qp_rd_atom, max_qp_init_rd_atom),
 * for the domain `name`. */
static int device_read_limits(const char *name, int *inbound, int *outbound)
{
	int n, rc = -FI_ENODEV;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return -FI_ENODEV;
	for (int i = 0; i < n; i++) {
		if (strcmp(ibv_get_device_name(list[i]), name))
			continue;
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr attr;
		if (ctx && !ibv_query_device(ctx, &attr)) {
			*inbound = attr.max_qp_rd_atom;
			*outbound = attr.max_qp_init_rd_atom;
			rc = 0;
		}
		if (ctx)
			ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return rc;
}

/* A subtest's last word: every close returned 0 (else `bad` names those
 * that did not) and no file descriptor was left behind. */
static int closes_and_fds(int result, const char *bad, int fds_before, int fds_after)
{
	printf("    every close %s; fds %d -> %d\n", bad[0] ? bad : "returned 0", fds_before, fds_after);
	if (result == T_PASS && bad[0])
		FAIL("%s", bad);
	if (result == T_PASS && fds_after != fds_before)
		FAIL("file descriptors %d before, %d after", fds_before, fds_after);
	return result;
}

/* What a process keeps after its first use of the libraries (loaded
 * providers, librdmacm's device contexts) is not a leak of one subtest:
 * use them once before counting. */
static void prime(void)
{
	struct fi_info *info;
	if (!getinfo(NULL, FI_MSG, &info))
		fi_freeinfo(info);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	if (ch && !rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		struct sockaddr_in sin = { .sin_family = AF_INET };
		inet_pton(AF_INET, address, &sin.sin_addr);
		rdma_bind_addr(id, (struct sockaddr *)&sin);
		rdma_destroy_id(id);
	}
	if (ch)
		rdma_destroy_event_channel(ch);
}

/* Closes a fid (if open) and records the first failure in *bad. */
static void close_fid(struct fid *fid, const char *what, char *bad, size_t bad_len)
{
	if (!fid)
		return;
	int rc = fi_close(fid);
	if (rc && !bad[0])
		snprintf(bad, bad_len, "fi_close(%s) returned %s", what, fi_strerror(-rc));
}

/* ---- kill: the peer process dies mid-stream ---- */

struct region {
	uint64_t addr, key;
};

static uint64_t remote_addr_of(const struct fi_info *info, const void *buf)
{
	return (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uintptr_t)buf : 0;
}

/* The child: serves one connection, posts no receive, and waits to be
 * killed. Says "listening" (its port) and "connected" on the pipe. */
static void serve_and_wait(int to_parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGALRM, SIG_DFL);
	alarm((unsigned)watchdog_s);
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;
	struct fid_pep *pep;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_mr *mr;
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC };
	CHECK(getinfo(NULL, FI_MSG | FI_RMA, &info));
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	CHECK(fi_passive_ep(fabric, info, &pep, NULL));
	CHECK(fi_pep_bind(pep, &eq->fid, 0));
	CHECK(fi_listen(pep));
	struct sockaddr_in sin;
	size_t len = sizeof(sin);
	CHECK(fi_getname(&pep->fid, &sin, &len));
	uint16_t port = ntohs(sin.sin_port);
	if (write(to_parent, &port, sizeof(port)) != sizeof(port))
		_exit(1);
	struct ev ev;
	if (expect_ev(eq, FI_CONNREQ, &pep->fid, &ev, "child: connection request") != T_PASS) {
		fprintf(stderr, "%s\n", why);
		_exit(1);
	}
	uint8_t *buf = calloc(1, REGION);
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .size = 4 * WINDOW };
	CHECK(fi_mr_reg(domain, buf, REGION, FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV, 0, 0, 0, &mr,
			NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_endpoint(domain, ev.info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &eq->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
	struct region mine = { remote_addr_of(ev.info, buf), fi_mr_key(mr) };
	CHECK(fi_accept(ep, &mine, sizeof(mine)));
	if (expect_ev(eq, FI_CONNECTED, &ep->fid, &ev, "child: connection") != T_PASS) {
		fprintf(stderr, "%s\n", why);
		_exit(1);
	}
	if (write(to_parent, "c", 1) != 1)
		_exit(1);
	for (;;)
		pause(); /* no receive is ever posted: the peer's first send waits */
}

static int wait_readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int rc;
	do
		rc = poll(&p, 1, timeout_ms);
	while (rc < 0 && errno == EINTR);
	return rc == 1;
}

enum op_kind { OP_SEND, OP_WRITE, OP_READ, OP_KINDS };
static const char *const op_names[OP_KINDS] = { "send", "write", "read" };

/* Distinct completion errors and how often each came. */
struct tally {
	int err[8], count[8], n;
};

static void tally_add(struct tally *t, int err)
{
	for (int i = 0; i < t->n; i++)
		if (t->err[i] == err) {
			t->count[i]++;
			return;
		}
	if (t->n < 8) {
		t->err[t->n] = err;
		t->count[t->n++] = 1;
	}
}

static void tally_str(const struct tally *t, char *s, size_t len)
{
	size_t used = 0;
	s[0] = 0;
	for (int i = 0; i < t->n && used < len; i++)
		used += (size_t)snprintf(s + used, len - used, "%s%d %s", i ? ", " : "", t->count[i],
					 t->err[i] == FI_ECANCELED ? "FI_ECANCELED" : fi_strerror(t->err[i]));
	if (!t->n)
		snprintf(s, len, "none in error");
}

static int t_kill(void)
{
	int pipe_fds[2];
	if (pipe(pipe_fds))
		FAIL("pipe: %s", strerror(errno));
	/* Fork before this process opens a device: verbs resources do not
	 * survive a fork. */
	pid_t pid = fork();
	if (pid < 0)
		FAIL("fork: %s", strerror(errno));
	if (pid == 0) {
		close(pipe_fds[0]);
		serve_and_wait(pipe_fds[1]);
	}
	child_pid = pid;
	close(pipe_fds[1]);
	int from_child = pipe_fds[0];
	prime();
	const int fds_before = nd_count_fds();

	int result = T_FAIL;
	char bad[256] = "";
	struct fi_info *info = NULL;
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fid_eq *eq = NULL;
	struct fid_ep *ep = NULL;
	struct fid_cq *cq = NULL;
	struct fid_mr *mr = NULL;
	uint8_t *buf = calloc(1, REGION);
	struct fi_context2 ctx[OP_KINDS * WINDOW];
	enum op_kind kind_of[OP_KINDS * WINDOW];
	uint16_t port;
	char service[16];
	struct ev ev;
	struct region peer;

	if (!wait_readable(from_child, START_MS) || read(from_child, &port, sizeof(port)) != sizeof(port)) {
		snprintf(why, sizeof(why), "the serving child did not start listening");
		goto out;
	}
	snprintf(service, sizeof(service), "%u", port);
	int rc = getinfo(service, FI_MSG | FI_RMA, &info);
	if (rc) {
		snprintf(why, sizeof(why), "fi_getinfo: %s", fi_strerror(-rc));
		goto out;
	}
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC };
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .size = 8 * WINDOW };
	if ((rc = fi_fabric(info->fabric_attr, &fabric, NULL)) || (rc = fi_eq_open(fabric, &eq_attr, &eq, NULL)) ||
	    (rc = fi_domain(fabric, info, &domain, NULL)) ||
	    (rc = fi_mr_reg(domain, buf, REGION, FI_SEND | FI_RECV | FI_READ | FI_WRITE, 0, 0, 0, &mr, NULL)) ||
	    (rc = fi_cq_open(domain, &cq_attr, &cq, NULL)) || (rc = fi_endpoint(domain, info, &ep, NULL)) ||
	    (rc = fi_ep_bind(ep, &eq->fid, 0)) || (rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_enable(ep)) || (rc = fi_connect(ep, info->dest_addr, NULL, 0))) {
		snprintf(why, sizeof(why), "opening the survivor's connection: %s", fi_strerror(-rc));
		goto out;
	}
	if (expect_ev(eq, FI_CONNECTED, &ep->fid, &ev, "connecting to the child") != T_PASS)
		goto out;
	if (ev.len != sizeof(peer)) {
		snprintf(why, sizeof(why), "the accept carried %zu bytes, not the %zu of the region", ev.len,
			 sizeof(peer));
		goto out;
	}
	memcpy(&peer, ev.data, sizeof(peer));
	char c;
	if (!wait_readable(from_child, START_MS) || read(from_child, &c, 1) != 1) {
		snprintf(why, sizeof(why), "the child did not see its side connected");
		goto out;
	}

	/* A send first: the child posts no receive, so it waits (for ever,
	 * with the default receiver-not-ready retry count), and everything
	 * behind it on the RC queue pair waits too. */
	void *desc = fi_mr_desc(mr);
	int posted = 0, per_kind[OP_KINDS] = { 0 };
	for (int i = 0; i < OP_KINDS * WINDOW; i++) {
		enum op_kind k = (enum op_kind)(i % OP_KINDS);
		ssize_t prc;
		if (k == OP_SEND)
			prc = fi_send(ep, buf, MSG_BYTES, desc, 0, &ctx[i]);
		else if (k == OP_WRITE)
			prc = fi_write(ep, buf, RMA_BYTES, desc, 0, peer.addr, peer.key, &ctx[i]);
		else
			prc = fi_read(ep, buf + RMA_BYTES, RMA_BYTES, desc, 0, peer.addr, peer.key, &ctx[i]);
		if (prc) {
			snprintf(why, sizeof(why), "posting %s %d: %s", op_names[k], i, fi_strerror((int)-prc));
			goto out;
		}
		kind_of[i] = k;
		per_kind[k]++;
		posted++;
	}
	/* Nothing may complete while the child lives: then all are
	 * outstanding when it dies. */
	usleep(300 * 1000);
	struct fi_cq_entry entry;
	ssize_t n = fi_cq_read(cq, &entry, 1);
	if (n != -FI_EAGAIN) {
		snprintf(why, sizeof(why), "before the kill, fi_cq_read returned %zd (%s): the operations were not "
			 "held outstanding", n, n < 0 ? fi_strerror((int)-n) : "a completion");
		goto out;
	}

	const double killed = now_ms();
	kill(pid, SIGKILL);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	child_pid = -1;

	int done = 0, ok = 0, events = 0, done_kind[OP_KINDS] = { 0 };
	double last_completion = 0, first_event = 0;
	struct ev first;
	struct tally errs = { .n = 0 };
	const double give_up = killed + complete_limit_s * 1e3;
	memset(&first, 0, sizeof(first));
	for (;;) {
		n = fi_cq_read(cq, &entry, 1);
		if (n == 1) {
			ok++;
			done++;
			if (entry.op_context >= (void *)ctx && entry.op_context < (void *)(ctx + posted))
				done_kind[kind_of[(struct fi_context2 *)entry.op_context - ctx]]++;
			last_completion = now_ms();
		} else if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };
			if (fi_cq_readerr(cq, &err, 0) == 1) {
				done++;
				tally_add(&errs, err.err);
				if (err.op_context >= (void *)ctx && err.op_context < (void *)(ctx + posted))
					done_kind[kind_of[(struct fi_context2 *)err.op_context - ctx]]++;
				last_completion = now_ms();
			}
		} else if (n != -FI_EAGAIN) {
			snprintf(why, sizeof(why), "fi_cq_read: %s", fi_strerror((int)-n));
			goto out;
		}
		struct ev e;
		if (read_ev(eq, &e, 0) == 1) {
			if (e.fid == &ep->fid && (e.is_error || e.type == FI_SHUTDOWN)) {
				if (!events++) {
					first = e;
					first_event = now_ms();
				}
			} else {
				snprintf(why, sizeof(why), "unexpected %s on the EQ after the kill", event_str(&e));
				goto out;
			}
		}
		const double now = now_ms();
		if (done == posted && events && now - (last_completion > first_event ? last_completion : first_event) >
							LINGER_MS)
			break;
		if (now > give_up)
			break;
	}
	char seen[256], errs_s[96];
	tally_str(&errs, errs_s, sizeof(errs_s));
	snprintf(seen, sizeof(seen), "%d outstanding (%d sends, %d writes, %d reads): %d completed (%d/%d/%d), %s%s; "
		 "EQ: %s x%d", posted, per_kind[OP_SEND], per_kind[OP_WRITE], per_kind[OP_READ], done,
		 done_kind[OP_SEND], done_kind[OP_WRITE], done_kind[OP_READ], errs_s,
		 ok ? ", some succeeded" : "", events ? event_str(&first) : "nothing", events);
	figure("kill: peer process SIGKILLed mid-stream", seen,
	       (done == posted ? last_completion : now_ms()) - killed);
	if (events)
		printf("    EQ report %.1f ms after the kill; last completion %.1f ms after\n", first_event - killed,
		       last_completion ? last_completion - killed : -1.0);
	if (done != posted)
		snprintf(why, sizeof(why), "%d of %d outstanding operations never completed within %d s of the kill",
			 posted - done, posted, complete_limit_s);
	else if (ok)
		snprintf(why, sizeof(why), "%d operations completed successfully after their peer was killed", ok);
	else if (events != 1)
		snprintf(why, sizeof(why), "the EQ reported the loss %d times, not once", events);
	else
		result = T_PASS;
out:
	if (child_pid > 0) {
		kill(child_pid, SIGKILL);
		waitpid(child_pid, NULL, 0);
		child_pid = -1;
	}
	close_fid(ep ? &ep->fid : NULL, "ep", bad, sizeof(bad));
	close_fid(cq ? &cq->fid : NULL, "cq", bad, sizeof(bad));
	close_fid(mr ? &mr->fid : NULL, "mr", bad, sizeof(bad));
	close_fid(eq ? &eq->fid : NULL, "eq", bad, sizeof(bad));
	close_fid(domain ? &domain->fid : NULL, "domain", bad, sizeof(bad));
	close_fid(fabric ? &fabric->fid : NULL, "fabric", bad, sizeof(bad));
	if (info)
		fi_freeinfo(info);
	free(buf);
	const int fds_after = nd_count_fds(); /* the pipe was open before too */
	close(from_child);
	return closes_and_fds(result, bad, fds_before, fds_after);
}

/* ---- garbage: raw rdma_cm peers against a listener ---- */

/* The raw client runs in a thread of its own, one case at a time, in step
 * with the listener: the main thread posts `go` for each step and waits
 * for `done`. */
enum raw_kind {
	RAW_DATA,	   /* request with private data; the listener rejects */
	RAW_ABSURD_LIMITS, /* kernel interface: 255/255; accepted, RTU, then destroyed */
	RAW_EARLY_DISCONNECT, /* QP; destroyed once established */
	RAW_DESTROY_AT_ACCEPT, /* no QP; destroyed when the accept arrives */
	RAW_REJECT_AFTER_ACCEPT, /* no QP; rdma_reject answers the accept */
};

struct raw_case {
	enum raw_kind kind;
	uint8_t len;
	uint8_t data[REQ_FIELD];
	/* what the raw client saw */
	int event; /* rdma_cm_event_type of the answer, -1 for none */
	int status;
	uint8_t rep_responder_resources, rep_initiator_depth;
	double acted;	/* when it destroyed or rejected */
	char failure[160];
};

static struct sockaddr_in listen_addr;
static sem_t to_raw, to_main;
static struct raw_case *raw_now;
static bool raw_quit;
static bool raw_lost; /* the raw client did not finish a case in time */

static bool sem_wait_ms(sem_t *sem, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	int rc;
	while ((rc = sem_timedwait(sem, &ts)) < 0 && errno == EINTR)
		;
	return rc == 0;
}

/* The next rdma_cm event of `ch` within timeout_ms (NULL when none). */
static struct rdma_cm_event *raw_event(struct rdma_event_channel *ch, int timeout_ms)
{
	struct rdma_cm_event *event;
	if (!wait_readable(ch->fd, timeout_ms) || rdma_get_cm_event(ch, &event))
		return NULL;
	return event;
}

#define RAW_FAIL(c, ...) snprintf((c)->failure, sizeof((c)->failure), __VA_ARGS__)

/* Waits for `want` and acknowledges it; false (and the failure) otherwise. */
static bool raw_expect(struct raw_case *c, struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *e = raw_event(ch, EVENT_MS);
	if (!e) {
		RAW_FAIL(c, "raw client: no %s within %d ms", rdma_event_str(want), EVENT_MS);
		return false;
	}
	enum rdma_cm_event_type got = e->event;
	int status = e->status;
	rdma_ack_cm_event(e);
	if (got != want) {
		RAW_FAIL(c, "raw client: %s (status %d) instead of %s", rdma_event_str(got), status,
			 rdma_event_str(want));
		return false;
	}
	return true;
}

/* A librdmacm client: resolves, optionally creates a QP, connects with the
 * case's private data, and reads the answer into the case. */
static void raw_librdmacm(struct raw_case *c, struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id = NULL;
	bool with_qp = c->kind == RAW_EARLY_DISCONNECT;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		RAW_FAIL(c, "rdma_create_id: %s", strerror(errno));
		return;
	}
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&listen_addr, 2000) ||
	    !raw_expect(c, ch, RDMA_CM_EVENT_ADDR_RESOLVED) || rdma_resolve_route(id, 2000) ||
	    !raw_expect(c, ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) {
		if (!c->failure[0])
			RAW_FAIL(c, "resolving the listener: %s", strerror(errno));
		goto out;
	}
	if (with_qp) {
		struct ibv_qp_init_attr attr = { .qp_type = IBV_QPT_RC,
						 .cap = { .max_send_wr = 1, .max_recv_wr = 1,
							  .max_send_sge = 1, .max_recv_sge = 1 } };
		if (rdma_create_qp(id, NULL, &attr)) {
			RAW_FAIL(c, "rdma_create_qp: %s", strerror(errno));
			goto out;
		}
	}
	struct rdma_conn_param param = { .private_data = c->data, .private_data_len = c->len,
					 .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 7,
					 .qp_num = 0xabcde /* the REQ's, when no QP */ };
	if (rdma_connect(id, &param)) {
		RAW_FAIL(c, "rdma_connect: %s", strerror(errno));
		goto out;
	}
	struct rdma_cm_event *e = raw_event(ch, EVENT_MS);
	if (!e) {
		RAW_FAIL(c, "raw client: no answer to its request within %d ms", EVENT_MS);
		goto out;
	}
	c->event = e->event;
	c->status = e->status;
	c->rep_responder_resources = e->param.conn.responder_resources;
	c->rep_initiator_depth = e->param.conn.initiator_depth;
	rdma_ack_cm_event(e);
	if (c->kind == RAW_REJECT_AFTER_ACCEPT && c->event == RDMA_CM_EVENT_CONNECT_RESPONSE) {
		static const uint8_t no[] = { 4, 'n', 'o', 'p', 'e' }; /* framed: length, bytes */
		c->acted = now_ms();
		if (rdma_reject(id, no, sizeof(no)))
			RAW_FAIL(c, "rdma_reject after the accept: %s", strerror(errno));
	}
	if (with_qp)
		rdma_destroy_qp(id);
	c->acted = c->acted ? c->acted : now_ms();
out:
	rdma_destroy_id(id);
}

/* ---- the kernel's rdma_cm interface, for what librdmacm will not send ---- */

static int ucma_write(int fd, void *cmd, size_t len)
{
	return write(fd, cmd, len) == (ssize_t)len ? 0 : -1;
}

static bool ucma_event(struct raw_case *c, int fd, struct ucma_abi_event_resp *resp, int want)
{
	struct ucma_abi_get_event cmd = { .cmd = UCMA_CMD_GET_EVENT, .in = sizeof(cmd) - 8, .out = sizeof(*resp),
					  .response = (uintptr_t)resp };
	memset(resp, 0, sizeof(*resp));
	if (!wait_readable(fd, EVENT_MS)) {
		RAW_FAIL(c, "raw kernel client: no %s within %d ms", rdma_event_str(want), EVENT_MS);
		return false;
	}
	if (ucma_write(fd, &cmd, sizeof(cmd))) {
		RAW_FAIL(c, "raw kernel client: UCMA_CMD_GET_EVENT: %s", strerror(errno));
		return false;
	}
	if ((int)resp->event != want) {
		RAW_FAIL(c, "raw kernel client: %s (status %d) instead of %s", rdma_event_str(resp->event),
			 (int)resp->status, rdma_event_str(want));
		return false;
	}
	return true;
}

/* A request offering read limits of 255 both ways, written to the kernel
 * directly (librdmacm rewrites 255 to the device's maximum and refuses
 * anything between). On the accept it sends the RTU, lets the listener's
 * side see the connection (a step of `to_raw`), then destroys its id: the
 * kernel sends a disconnect request. */
static void raw_absurd_limits(struct raw_case *c)
{
	int fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		RAW_FAIL(c, "/dev/infiniband/rdma_cm: %s", strerror(errno));
		return;
	}
	struct ucma_abi_create_id_resp created = { 0 }; /* written by the kernel, which valgrind cannot see */
	/* The kernel drops the events of an id whose uid is 0. */
	struct ucma_abi_create_id create = { .cmd = UCMA_CMD_CREATE_ID, .in = sizeof(create) - 8,
					     .out = sizeof(created), .response = (uintptr_t)&created,
					     .uid = (uintptr_t)c,
					     .ps = RDMA_PS_TCP, .qp_type = IBV_QPT_RC };
	if (ucma_write(fd, &create, sizeof(create))) {
		RAW_FAIL(c, "UCMA_CMD_CREATE_ID: %s", strerror(errno));
		close(fd);
		return;
	}
	struct ucma_abi_event_resp resp;
	struct ucma_abi_resolve_addr resolve = { .cmd = UCMA_CMD_RESOLVE_ADDR, .in = sizeof(resolve) - 8,
						 .id = created.id, .timeout_ms = 2000,
						 .dst_size = sizeof(listen_addr) };
	memcpy(&resolve.dst_addr, &listen_addr, sizeof(listen_addr));
	struct ucma_abi_resolve_route route = { .cmd = UCMA_CMD_RESOLVE_ROUTE, .in = sizeof(route) - 8,
						.id = created.id, .timeout_ms = 2000 };
	struct ucma_abi_connect connect = { .cmd = UCMA_CMD_CONNECT, .in = sizeof(connect) - 8, .id = created.id };
	connect.conn_param.qp_num = 0xabcde;
	connect.conn_param.private_data[0] = 0; /* the length prefix: no data */
	connect.conn_param.private_data_len = 1;
	connect.conn_param.responder_resources = 255;
	connect.conn_param.initiator_depth = 255;
	connect.conn_param.flow_control = 1;
	connect.conn_param.retry_count = 7;
	connect.conn_param.rnr_retry_count = 7;
	connect.conn_param.valid = 1;
	struct ucma_abi_accept rtu = { .cmd = UCMA_CMD_ACCEPT, .in = sizeof(rtu) - 8, .id = created.id };
	if (ucma_write(fd, &resolve, sizeof(resolve)) || !ucma_event(c, fd, &resp, RDMA_CM_EVENT_ADDR_RESOLVED) ||
	    ucma_write(fd, &route, sizeof(route)) || !ucma_event(c, fd, &resp, RDMA_CM_EVENT_ROUTE_RESOLVED) ||
	    ucma_write(fd, &connect, sizeof(connect))) {
		if (!c->failure[0])
			RAW_FAIL(c, "raw kernel client: resolving or connecting: %s", strerror(errno));
		goto out;
	}
	memset(&resp, 0, sizeof(resp));
	struct ucma_abi_get_event get = { .cmd = UCMA_CMD_GET_EVENT, .in = sizeof(get) - 8, .out = sizeof(resp),
					  .response = (uintptr_t)&resp };
	if (!wait_readable(fd, EVENT_MS) || ucma_write(fd, &get, sizeof(get))) {
		RAW_FAIL(c, "raw kernel client: no answer within %d ms", EVENT_MS);
		goto out;
	}
	c->event = (int)resp.event;
	c->status = (int)resp.status;
	c->rep_responder_resources = resp.param.conn.responder_resources;
	c->rep_initiator_depth = resp.param.conn.initiator_depth;
	if (c->event == RDMA_CM_EVENT_CONNECT_RESPONSE && ucma_write(fd, &rtu, sizeof(rtu)))
		RAW_FAIL(c, "raw kernel client: sending the RTU: %s", strerror(errno));
	/* The listener looks at its connection, then lets this side go. */
	sem_post(&to_main);
	if (!sem_wait_ms(&to_raw, 2 * EVENT_MS))
		RAW_FAIL(c, "raw kernel client: the listener never said it was done");
	c->acted = now_ms();
out:;
	struct ucma_abi_destroy_id_resp destroyed = { 0 };
	struct ucma_abi_destroy_id destroy = { .cmd = UCMA_CMD_DESTROY_ID, .in = sizeof(destroy) - 8,
					       .out = sizeof(destroyed), .response = (uintptr_t)&destroyed,
					       .id = created.id };
	ucma_write(fd, &destroy, sizeof(destroy));
	close(fd);
}

static void *raw_thread(void *arg)
{
	struct rdma_event_channel *ch = arg;
	for (;;) {
		if (!sem_wait_ms(&to_raw, EVENT_MS))
			continue; /* a hang is the watchdog's */
		if (raw_quit)
			return NULL;
		struct raw_case *c = raw_now;
		if (c->kind == RAW_ABSURD_LIMITS)
			raw_absurd_limits(c);
		else
			raw_librdmacm(c, ch);
		sem_post(&to_main);
	}
}

/* The listener's side, shared by the cases. */
static struct fid_fabric *gfabric;
static struct fid_domain *gdomain;
static struct fid_eq *geq;
static struct fid_pep *gpep;
static struct fi_info *ginfo;
static int dev_inbound, dev_outbound;

static void raw_start(struct raw_case *c)
{
	c->event = -1;
	c->failure[0] = 0;
	c->acted = 0;
	raw_now = c;
	sem_post(&to_raw);
}

static int raw_finish(struct raw_case *c)
{
	if (!sem_wait_ms(&to_main, 3 * EVENT_MS)) {
		raw_lost = true;
		FAIL("the raw client did not finish its case within %d ms", 3 * EVENT_MS);
	}
	if (c->failure[0])
		FAIL("%s", c->failure);
	return T_PASS;
}

/* A case's private data: `variant` 0 random bytes, 1 an honest length
 * byte, 2 a length byte that claims more than was sent. */
static void make_data(struct raw_case *c, unsigned len, int variant, unsigned *seed)
{
	memset(c, 0, sizeof(*c));
	c->kind = RAW_DATA;
	c->len = (uint8_t)len;
	for (unsigned i = 0; i < len; i++)
		c->data[i] = (uint8_t)rand_r(seed);
	if (len && variant == 1)
		c->data[0] = (uint8_t)(len - 1);
	else if (len && variant == 2)
		c->data[0] = (uint8_t)(len % 2 ? 255 : len); /* the most, or one byte more than was sent */
}

/* What a listener that frames with a length byte must deliver: the byte's
 * claim, cut to what the zero-padded field holds behind it. */
static size_t expected_len(const struct raw_case *c)
{
	size_t claimed = c->len ? c->data[0] : 0;
	return claimed < REQ_FIELD - 1 ? claimed : REQ_FIELD - 1;
}

static int check_delivered(const struct raw_case *c, const struct ev *ev, int *over, int *wrong)
{
	uint8_t field[REQ_FIELD] = { 0 };
	memcpy(field, c->data, c->len);
	size_t want = expected_len(c);
	if (ev->len > REQ_FIELD - 1)
		(*over)++;
	if (ev->len != want || memcmp(ev->data, field + 1, want < ev->len ? want : ev->len)) {
		(*wrong)++;
		if (*wrong == 1)
			printf("    first mismatch: %u bytes sent, length byte %u: delivered %zu bytes, expected %zu%s\n",
			       c->len, c->len ? c->data[0] : 0, ev->len, want,
			       ev->len > REQ_FIELD - 1 ? " (more than the request field holds)" : "");
		return T_FAIL;
	}
	return T_PASS;
}

static int private_data_cases(void)
{
	unsigned seed = 13;
	int cases = 0, over = 0, wrong = 0, refused = 0;
	size_t longest = 0;
	double start = now_ms();
	struct raw_case c;
	for (unsigned len = 0; len <= REQ_FIELD; len++) {
		for (int variant = 0; variant < (len ? 3 : 1); variant++) {
			make_data(&c, len, variant, &seed);
			raw_start(&c);
			struct ev ev;
			int r = expect_ev(geq, FI_CONNREQ, &gpep->fid, &ev, "a raw request with private data");
			if (r != T_PASS) {
				raw_finish(&c);
				return r;
			}
			check_delivered(&c, &ev, &over, &wrong);
			if (ev.len > longest)
				longest = ev.len;
			int rc = fi_reject(gpep, ev.info->handle, NULL, 0);
			fi_freeinfo(ev.info);
			if (rc) {
				raw_finish(&c);
				FAIL("fi_reject: %s", fi_strerror(-rc));
			}
			RUN(raw_finish(&c));
			if (c.event != RDMA_CM_EVENT_REJECTED)
				refused++;
			cases++;
		}
	}
	char seen[256];
	snprintf(seen, sizeof(seen), "%d raw requests with 0-56 bytes (honest, random and lying length bytes): "
		 "each one FI_CONNREQ; %d with the wrong length or bytes, %d longer than the %d-byte field "
		 "(longest %zu)", cases, wrong, over, REQ_FIELD, longest);
	figure("garbage: raw private data", seen, (now_ms() - start) / cases);
	if (wrong)
		FAIL("%d of %d requests delivered other bytes than the field holds behind the length byte "
		     "(%d read past the %d bytes received)", wrong, cases, over, REQ_FIELD);
	if (refused)
		FAIL("%d rejected requests were not seen as REJECTED by their client", refused);
	return T_PASS;
}

/* Takes a connection request: an endpoint with a CQ of its own, enabled. */
static int take_request(struct ev *ev, struct fid_ep **ep, struct fid_cq **cq)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .size = 16 };
	*ep = NULL;
	*cq = NULL;
	TRY(fi_cq_open(gdomain, &cq_attr, cq, NULL));
	TRY(fi_endpoint(gdomain, ev->info, ep, NULL));
	TRY(fi_ep_bind(*ep, &geq->fid, 0));
	TRY(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV));
	TRY(fi_enable(*ep));
	return T_PASS;
}

static int close_conn(struct fid_ep *ep, struct fid_cq *cq)
{
	char bad[128] = "";
	close_fid(ep ? &ep->fid : NULL, "ep", bad, sizeof(bad));
	close_fid(cq ? &cq->fid : NULL, "cq", bad, sizeof(bad));
	if (bad[0])
		FAIL("%s", bad);
	return T_PASS;
}

/* After a peer let go: reads the endpoint's events until its end was
 * reported and LINGER_MS passed without another; counts the ends. */
static int watch_end(struct fid_ep *ep, double since, int *ends, struct ev *end, double *end_ms, bool *connected)
{
	*ends = 0;
	*end_ms = -1;
	double give_up = now_ms() + EVENT_MS;
	for (;;) {
		struct ev ev;
		int rc = read_ev(geq, &ev, *ends ? LINGER_MS : (int)(give_up - now_ms()));
		if (rc < 0)
			FAIL("fi_eq_sread: %s", fi_strerror(-rc));
		if (rc == 0)
			break;
		if (ev.fid != &ep->fid) {
			if (ev.info)
				fi_freeinfo(ev.info);
			FAIL("%s for another object", event_str(&ev));
		}
		if (!ev.is_error && ev.type == FI_CONNECTED) {
			*connected = true;
			continue;
		}
		if (!ev.is_error && ev.type != FI_SHUTDOWN)
			FAIL("unexpected %s", event_str(&ev));
		if (!(*ends)++) {
			*end = ev;
			*end_ms = now_ms() - since;
		}
		if (now_ms() > give_up)
			break;
	}
	return T_PASS;
}

static int absurd_limits_case(void)
{
	struct raw_case c = { .kind = RAW_ABSURD_LIMITS };
	struct ev ev;
	struct fid_ep *ep = NULL;
	struct fid_cq *cq = NULL;
	raw_start(&c);
	int r = expect_ev(geq, FI_CONNREQ, &gpep->fid, &ev, "the raw request offering 255 reads");
	if (r != T_PASS) {
		raw_finish(&c);
		return r;
	}
	struct fi_nd_read_limits offered = { 0, 0 };
	if (is_nd) {
		int rc = fi_nd_peer_read_limits(ev.info->handle, &offered);
		if (rc) {
			fi_freeinfo(ev.info);
			FAIL("fi_nd_peer_read_limits: %s", fi_strerror(-rc));
		}
	}
	r = take_request(&ev, &ep, &cq);
	fi_freeinfo(ev.info);
	int rc = r == T_PASS ? fi_accept(ep, NULL, 0) : 0;
	struct ev up;
	bool got_up = r == T_PASS && !rc && read_ev(geq, &up, EVENT_MS) == 1;
	const bool is_up = got_up && !up.is_error && up.type == FI_CONNECTED && up.fid == &ep->fid;
	/* Connected or refused: either way the raw client has its answer. */
	if (!sem_wait_ms(&to_main, 3 * EVENT_MS)) {
		raw_lost = true;
		close_conn(ep, cq);
		FAIL("the raw kernel client got no answer");
	}
	uint32_t inbound = 0, outbound = 0;
	struct fi_nd_read_limits qp = { 0, 0 };
	if (is_nd && is_up) {
		size_t len = sizeof(inbound);
		fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_INBOUND_READ_LIMIT, &inbound, &len);
		len = sizeof(outbound);
		fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_ND_OUTBOUND_READ_LIMIT, &outbound, &len);
		fi_nd_qp_read_limits(ep, &qp);
	}
	double released = now_ms();
	sem_post(&to_raw); /* the raw client destroys its id */
	int ends = 0;
	struct ev end;
	double end_ms = -1;
	bool connected = false;
	int w = T_PASS;
	if (is_up)
		w = watch_end(ep, released, &ends, &end, &end_ms, &connected);
	int fin = raw_finish(&c);
	int closed = close_conn(ep, cq);
	char seen[320];
	const bool accepted = c.event == RDMA_CM_EVENT_CONNECT_RESPONSE;
	snprintf(seen, sizeof(seen), "request offers 255/255 reads (device %d/%d); %s: the accept carries %u/%u, "
		 "the listener saw %s", dev_inbound, dev_outbound, accepted ? "accepted" : "refused",
		 c.rep_responder_resources, c.rep_initiator_depth,
		 r != T_PASS || rc ? "fi_accept fail" : got_up ? event_str(&up) : "nothing");
	if (is_nd) {
		size_t used = strlen(seen);
		snprintf(seen + used, sizeof(seen) - used, "; fi_nd_peer_read_limits %u/%u, effective %u/%u, QP %u/%u",
			 offered.inbound, offered.outbound, inbound, outbound, qp.inbound, qp.outbound);
	}
	if (ends) {
		size_t used = strlen(seen);
		snprintf(seen + used, sizeof(seen) - used, "; the client's exit: %s x%d", event_str(&end), ends);
	}
	figure("garbage: absurd read limits (255/255)", seen, ends ? end_ms : 0);
	RUN(fin);
	RUN(w);
	RUN(closed);
	if (r != T_PASS)
		return r;
	if (rc)
		FAIL("fi_accept: %s", fi_strerror(-rc));
	if (accepted) {
		if (c.rep_responder_resources > dev_inbound || c.rep_initiator_depth > dev_outbound)
			FAIL("the accept offered %u/%u reads, beyond the device's %d/%d", c.rep_responder_resources,
			     c.rep_initiator_depth, dev_inbound, dev_outbound);
		if (!is_up)
			FAIL("accepted on the wire, but the listener's endpoint saw %s",
			     got_up ? event_str(&up) : "nothing");
		if (ends != 1)
			FAIL("the client's exit was reported %d times", ends);
	} else if (c.event != RDMA_CM_EVENT_REJECTED) {
		FAIL("the raw client saw %s", rdma_event_str(c.event));
	}
	if (is_nd && accepted) {
		if (offered.inbound != 255 || offered.outbound != 255)
			FAIL("fi_nd_peer_read_limits reports %u/%u, the request offered 255/255", offered.inbound,
			     offered.outbound);
		if (inbound > (uint32_t)dev_inbound || outbound > (uint32_t)dev_outbound || !inbound || !outbound)
			FAIL("effective read limits %u/%u, the device's are %d/%d", inbound, outbound, dev_inbound,
			     dev_outbound);
		if (qp.inbound > (uint32_t)dev_inbound || qp.outbound > (uint32_t)dev_outbound)
			FAIL("the queue pair has %u/%u reads, the device's limits are %d/%d", qp.inbound, qp.outbound,
			     dev_inbound, dev_outbound);
	}
	return T_PASS;
}

/* A raw client that lets go after the accept (early disconnect, destroy at
 * the accept, reject after the accept); the accepter must report it once. */
static int let_go_case(enum raw_kind kind, const char *name, int want_err)
{
	struct raw_case c = { .kind = kind, .len = 1, .data = { 0 } };
	struct ev ev, end;
	struct fid_ep *ep = NULL;
	struct fid_cq *cq = NULL;
	raw_start(&c);
	int r = expect_ev(geq, FI_CONNREQ, &gpep->fid, &ev, name);
	if (r != T_PASS) {
		raw_finish(&c);
		return r;
	}
	r = take_request(&ev, &ep, &cq);
	fi_freeinfo(ev.info);
	int rc = r == T_PASS ? fi_accept(ep, NULL, 0) : 0;
	int fin = raw_finish(&c);
	int ends = 0;
	double end_ms = -1;
	bool connected = false;
	int w = T_PASS;
	if (r == T_PASS && !rc && fin == T_PASS)
		w = watch_end(ep, c.acted, &ends, &end, &end_ms, &connected);
	int closed = close_conn(ep, cq);
	char seen[256];
	snprintf(seen, sizeof(seen), "the client saw %s; the accepter saw %s%s x%d%s%s",
		 c.event >= 0 ? rdma_event_str(c.event) : "nothing", connected ? "FI_CONNECTED, then " : "",
		 ends ? event_str(&end) : "no end", ends,
		 ends && end.is_error && end.len ? ", with the reject's data" : "",
		 ends && end.is_error && end.len == 4 && !memcmp(end.data, "nope", 4) ? " (exact)" : "");
	figure(name, seen, end_ms);
	RUN(fin);
	if (r != T_PASS)
		return r;
	if (rc)
		FAIL("fi_accept: %s", fi_strerror(-rc));
	RUN(w);
	RUN(closed);
	if (ends != 1)
		FAIL("the peer's departure was reported %d times, not once", ends);
	if (want_err && (!end.is_error || end.err != want_err))
		FAIL("the accepter saw %s, not %s", event_str(&end), fi_strerror(want_err));
	return T_PASS;
}

/* A normal libfabric connection through the listener, after all that:
 * private data both ways, a message each way, every byte checked. */
static int normal_connection(void)
{
	char service[16];
	struct fi_info *cinfo = NULL;
	struct fid_ep *client = NULL, *server = NULL;
	struct fid_cq *ccq = NULL, *scq = NULL;
	struct fid_mr *mr = NULL;
	struct ev ev;
	uint8_t hello[40], welcome[50];
	struct fi_context2 ctx[4];
	static uint8_t bufs[4][64]; /* client send, server recv, server send, client recv */
	double start = now_ms();
	fill(hello, sizeof(hello), 21);
	fill(welcome, sizeof(welcome), 22);
	snprintf(service, sizeof(service), "%u", ntohs(listen_addr.sin_port));
	TRY(getinfo(service, FI_MSG, &cinfo));
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .size = 16 };
	int r = T_FAIL;
	ssize_t rc;
	if ((rc = fi_cq_open(gdomain, &cq_attr, &ccq, NULL)) || (rc = fi_endpoint(gdomain, cinfo, &client, NULL)) ||
	    (rc = fi_ep_bind(client, &geq->fid, 0)) || (rc = fi_ep_bind(client, &ccq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_enable(client)) ||
	    (rc = fi_mr_reg(gdomain, bufs, sizeof(bufs), FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL)) ||
	    (rc = fi_connect(client, cinfo->dest_addr, hello, sizeof(hello)))) {
		snprintf(why, sizeof(why), "opening the client: %s", fi_strerror((int)-rc));
		goto out;
	}
	if (expect_ev(geq, FI_CONNREQ, &gpep->fid, &ev, "the normal connection's request") != T_PASS)
		goto out;
	if (ev.len != sizeof(hello) || check_data("the request's private data", ev.data, sizeof(hello), 21, 0)) {
		if (ev.len != sizeof(hello))
			snprintf(why, sizeof(why), "the request carried %zu bytes, %zu were sent", ev.len, sizeof(hello));
		fi_freeinfo(ev.info);
		goto out;
	}
	r = take_request(&ev, &server, &scq);
	fi_freeinfo(ev.info);
	if (r != T_PASS)
		goto out;
	r = T_FAIL;
	void *desc = fi_mr_desc(mr);
	if ((rc = fi_recv(server, bufs[1], sizeof(bufs[1]), desc, 0, &ctx[1])) ||
	    (rc = fi_recv(client, bufs[3], sizeof(bufs[3]), desc, 0, &ctx[3])) ||
	    (rc = fi_accept(server, welcome, sizeof(welcome)))) {
		snprintf(why, sizeof(why), "posting receives or accepting: %s", fi_strerror((int)-rc));
		goto out;
	}
	int up = 0;
	while (up < 2) {
		if (read_ev(geq, &ev, EVENT_MS) != 1 || ev.is_error || ev.type != FI_CONNECTED) {
			snprintf(why, sizeof(why), "connecting: %s", event_str(&ev));
			goto out;
		}
		if (ev.fid == &client->fid &&
		    (ev.len != sizeof(welcome) || check_data("the accept's private data", ev.data, sizeof(welcome), 22, 0)))
		{
			snprintf(why, sizeof(why), "the accept carried %zu bytes (%zu sent) or other bytes", ev.len,
				 sizeof(welcome));
			goto out;
		}
		up++;
	}
	fill(bufs[0], sizeof(bufs[0]), 23);
	fill(bufs[2], sizeof(bufs[2]), 24);
	if ((rc = fi_send(client, bufs[0], sizeof(bufs[0]), desc, 0, &ctx[0])) ||
	    (rc = fi_send(server, bufs[2], sizeof(bufs[2]), desc, 0, &ctx[2]))) {
		snprintf(why, sizeof(why), "fi_send: %s", fi_strerror((int)-rc));
		goto out;
	}
	for (int seen = 0; seen < 4;) {
		struct fi_cq_entry e;
		if (now_ms() - start > EVENT_MS) {
			snprintf(why, sizeof(why), "%d of 4 completions within %d ms", seen, EVENT_MS);
			goto out;
		}
		struct fid_cq *cqs[2] = { ccq, scq };
		for (int i = 0; i < 2; i++) {
			rc = fi_cq_read(cqs[i], &e, 1);
			if (rc == 1) {
				seen++;
			} else if (rc != -FI_EAGAIN) {
				struct fi_cq_err_entry err = { 0 };
				fi_cq_readerr(cqs[i], &err, 0);
				snprintf(why, sizeof(why), "a transfer failed: %s", fi_strerror(err.err));
				goto out;
			}
		}
	}
	if (check_data("the client's message", bufs[1], sizeof(bufs[1]), 23, 0) != T_PASS ||
	    check_data("the server's message", bufs[3], sizeof(bufs[3]), 24, 0) != T_PASS)
		goto out;
	if ((rc = fi_shutdown(client, 0))) {
		snprintf(why, sizeof(why), "fi_shutdown: %s", fi_strerror((int)-rc));
		goto out;
	}
	/* The peer's FI_SHUTDOWN; the caller's own is fi_nd(7)'s promise,
	 * not fi_cm(3)'s, so only nd is held to it. */
	int server_down = 0, client_down = 0;
	for (;;) {
		int got = read_ev(geq, &ev, server_down && (client_down || !is_nd) ? LINGER_MS : EVENT_MS);
		if (got != 1)
			break;
		if (ev.is_error || ev.type != FI_SHUTDOWN || (ev.fid != &server->fid && ev.fid != &client->fid)) {
			snprintf(why, sizeof(why), "shutting down: %s", event_str(&ev));
			goto out;
		}
		if (ev.fid == &server->fid)
			server_down++;
		else
			client_down++;
	}
	if (server_down != 1 || client_down > 1 || (is_nd && client_down != 1)) {
		snprintf(why, sizeof(why), "after fi_shutdown: FI_SHUTDOWN x%d on the peer, x%d on the caller",
			 server_down, client_down);
		goto out;
	}
	r = T_PASS;
	char seen[160];
	snprintf(seen, sizeof(seen), "private data both ways, a message each way, bytes checked; FI_SHUTDOWN on "
		 "the peer%s", client_down ? " and on the caller" : " (none on the caller)");
	figure("garbage: then a normal connection", seen, now_ms() - start);
out:;
	int closed = close_conn(client, ccq);
	int closed2 = close_conn(server, scq);
	char bad[128] = "";
	close_fid(mr ? &mr->fid : NULL, "mr", bad, sizeof(bad));
	fi_freeinfo(cinfo);
	if (r != T_PASS)
		return r;
	RUN(closed);
	RUN(closed2);
	if (bad[0])
		FAIL("%s", bad);
	return T_PASS;
}

/* Every case runs even after one failed (so that a provider's findings
 * are all printed), unless the raw client lost step with the listener. */
static int garbage_cases(void)
{
	char failures[sizeof(why)] = "";
	size_t used = 0;
#define CASE(name, call)                                                                          \
	do {                                                                                      \
		why[0] = 0;                                                                       \
		if ((call) != T_PASS && used < sizeof(failures))                                  \
			used += (size_t)snprintf(failures + used, sizeof(failures) - used, "%s%s: %s", \
						 used ? "; " : "", name, why);                    \
		if (raw_lost)                                                                     \
			goto out;                                                                 \
	} while (0)
	CASE("private data", private_data_cases());
	CASE("absurd read limits", absurd_limits_case());
	CASE("early disconnect",
	     let_go_case(RAW_EARLY_DISCONNECT, "garbage: early disconnect (destroyed once established)", 0));
	CASE("destroyed at the accept",
	     let_go_case(RAW_DESTROY_AT_ACCEPT, "garbage: id destroyed when the accept arrives", FI_ECONNABORTED));
	CASE("reject after accept",
	     let_go_case(RAW_REJECT_AFTER_ACCEPT, "garbage: rdma_reject after the accept", FI_ECONNABORTED));
	CASE("normal connection", normal_connection());
#undef CASE
out:
	if (!failures[0])
		return T_PASS;
	snprintf(why, sizeof(why), "%s%s", failures, raw_lost ? " (the raw client lost step: the rest did not run)" : "");
	return T_FAIL;
}

static int t_garbage(void)
{
	prime();
	const int fds_before = nd_count_fds();
	char bad[256] = "";
	int result = T_FAIL;
	struct rdma_event_channel *ch = NULL;
	pthread_t thread;
	bool thread_started = false;
	int rc = getinfo(NULL, FI_MSG, &ginfo);
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_UNSPEC, .size = 64 };
	if (rc || (rc = fi_fabric(ginfo->fabric_attr, &gfabric, NULL)) ||
	    (rc = fi_eq_open(gfabric, &eq_attr, &geq, NULL)) || (rc = fi_domain(gfabric, ginfo, &gdomain, NULL)) ||
	    (rc = fi_passive_ep(gfabric, ginfo, &gpep, NULL)) || (rc = fi_pep_bind(gpep, &geq->fid, 0)) ||
	    (rc = fi_listen(gpep))) {
		snprintf(why, sizeof(why), "opening the listener: %s", fi_strerror(-rc));
		goto out;
	}
	size_t len = sizeof(listen_addr);
	if ((rc = fi_getname(&gpep->fid, &listen_addr, &len))) {
		snprintf(why, sizeof(why), "fi_getname: %s", fi_strerror(-rc));
		goto out;
	}
	if ((rc = device_read_limits(ginfo->domain_attr->name, &dev_inbound, &dev_outbound))) {
		snprintf(why, sizeof(why), "no verbs device %s to read its limits from", ginfo->domain_attr->name);
		goto out;
	}
	size_t cm_data = 0;
	len = sizeof(cm_data);
	if (fi_getopt(&gpep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cm_data, &len) == 0)
		printf("    the listener's FI_OPT_CM_DATA_SIZE: %zu (request field %d, one length byte)\n", cm_data,
		       REQ_FIELD);
	ch = rdma_create_event_channel();
	if (!ch || sem_init(&to_raw, 0, 0) || sem_init(&to_main, 0, 0) ||
	    pthread_create(&thread, NULL, raw_thread, ch)) {
		snprintf(why, sizeof(why), "starting the raw client: %s", strerror(errno));
		goto out;
	}
	thread_started = true;
	result = garbage_cases();
out:
	if (thread_started) {
		raw_quit = true;
		sem_post(&to_raw);
		pthread_join(thread, NULL);
		sem_destroy(&to_raw);
		sem_destroy(&to_main);
	}
	if (ch)
		rdma_destroy_event_channel(ch);
	close_fid(gpep ? &gpep->fid : NULL, "pep", bad, sizeof(bad));
	close_fid(geq ? &geq->fid : NULL, "eq", bad, sizeof(bad));
	close_fid(gdomain ? &gdomain->fid : NULL, "domain", bad, sizeof(bad));
	close_fid(gfabric ? &gfabric->fid : NULL, "fabric", bad, sizeof(bad));
	if (ginfo)
		fi_freeinfo(ginfo);
	return closes_and_fds(result, bad, fds_before, nd_count_fds());
}

/* ---- main ---- */

/* Runs a subtest under the watchdog. */
static int run_watched(const struct nd_subtest *t)
{
	current = t->name;
	alarm((unsigned)watchdog_s);
	int r = t->fn();
	alarm(0);
	return r;
}

/* kill forks before anything opens a device, so it runs first. */
static const struct nd_subtest subtests[] = {
	{ "kill", t_kill },
	{ "garbage", t_garbage },
};
static struct nd_suite suite = { ND_SUITE(subtests), .run = run_watched, .timing = ND_TIME_S };

static int option(int opt, const char *arg)
{
	switch (opt) {
	case 'T': complete_limit_s = atoi(arg); return 0;
	case 'W': watchdog_s = atoi(arg); return 0;
	}
	return -1;
}

int main(int argc, char **argv)
{
	address = nd_default_address();
	const struct nd_cli cli = { .optstring = "p:a:t:T:W:h", .prov = &prov, .address = &address,
				    .suite = &suite, .option = option,
				    .usage = "usage: %s [-p provider] [-a address] [-t subtest] [-T seconds] [-W seconds]\n" };
	if (nd_parse_options(&cli, argc, argv))
		return 2;
	if (complete_limit_s < 1 || watchdog_s < 1) {
		fprintf(stderr, "-T and -W are at least 1 second\n");
		return 2;
	}
	is_nd = strcmp(prov, "nd") == 0;
	if (nd_check_only(&suite))
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct sigaction sa = { .sa_handler = on_alarm };
	sigaction(SIGALRM, &sa, NULL);
	return nd_run_subtests(&suite);
}
