/*
 * nd_fork: fork(2) with memory registered.
 *
 * The process connects two endpoints of its own and registers: a region
 * that a peer writes into (FI_REMOTE_WRITE), and buffers for sends and
 * receives through the domain's registration cache (registered twice: the
 * second registration is the cache's). Then it forks:
 *
 *   - the child writes over its copy of every registered buffer and tells
 *     the parent, which checks that none of its bytes changed;
 *   - the parent, with the child still alive, writes its own buffers first
 *     (where a kernel without copy-on-fork and no ibv_fork_init would leave
 *     the adapter with the child's pages), then sends and RDMA-writes
 *     through them both ways, and checks every byte landed in its memory;
 *   - the child then execs this program with -C, which opens nd itself,
 *     connects, moves bytes, checks them, and checks that it inherited no
 *     descriptor of the parent's devices, event channels or wait objects.
 *
 * Subtests: parent (all of the above, the child's verdict included).
 * usage: nd_fork [-p PROV] [-a ADDRESS] [-t SUBTEST] | nd_fork -C
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "nd_pair.h"
#include "nd_subtest.h"

enum { LEN = 64 * 1024, WAIT_MS = 20000 };

static const char *prov = "nd";
static const char *address;

struct buffers {
	uint8_t *send, *recv, *target; /* LEN each, page-aligned */
	struct fid_mr *send_mr, *recv_mr, *target_mr;
	struct fid_mr *send_again, *recv_again; /* the cache's: the same buffers once more */
};

static void *desc_of(struct pair *p, struct fid_mr *mr) { return (p->mr_mode & FI_MR_LOCAL) ? fi_mr_desc(mr) : NULL; }

/* A message each way through the send and receive buffers, and an RDMA
 * write of the send buffer into the target; every byte checked. */
static int move_bytes(struct pair *p, struct buffers *b, unsigned seed, const char *when)
{
	char what[96];
	fill(b->send, LEN, seed);
	memset(b->recv, GUARD, LEN);
	memset(b->target, GUARD, LEN);
	for (int s = 0; s < 2; s++)
		TRY(fi_recv(p->ep[s], b->recv + (size_t)s * (LEN / 2), LEN / 2, desc_of(p, b->recv_again), 0, NULL));
	for (int s = 0; s < 2; s++)
		TRY(send_when_credited(p->ep[s], b->send, LEN / 2, desc_of(p, b->send_again), NULL));
	uint64_t at = (p->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)b->target : 0;
	TRY(fi_write(p->ep[0], b->send, LEN, desc_of(p, b->send_mr), 0, at, fi_mr_key(b->target_mr), NULL));
	snprintf(what, sizeof(what), "%s: two messages and a write", when);
	RUN(completions(p, 5, what));
	/* The write's completion on iWARP says only that it left: a read of
	 * the target behind it on the same connection waits for it. */
	TRY(fi_read(p->ep[0], b->recv, 64, desc_of(p, b->recv_mr), 0, at, fi_mr_key(b->target_mr), NULL));
	RUN(completions(p, 1, what));
	snprintf(what, sizeof(what), "%s: the message to side 0", when);
	RUN(check_data(what, b->recv + LEN / 2, LEN / 2, seed, 0));
	snprintf(what, sizeof(what), "%s: the write", when);
	RUN(check_data(what, b->target, LEN, seed, 0));
	snprintf(what, sizeof(what), "%s: the read", when);
	RUN(check_data(what, b->recv, 64, seed, 0));
	return T_PASS;
}

static uint8_t *page_buffer(void)
{
	void *m = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return m == MAP_FAILED ? NULL : m;
}

static int register_buffers(struct pair *p, struct buffers *b)
{
	memset(b, 0, sizeof(*b));
	if (!(b->send = page_buffer()) || !(b->recv = page_buffer()) || !(b->target = page_buffer()))
		FAIL("mmap: %s", strerror(errno));
	const uint64_t local = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
	TRY(fi_mr_reg(p->domain, b->send, LEN, local, 0, 0, 0, &b->send_mr, NULL));
	TRY(fi_mr_reg(p->domain, b->recv, LEN, local, 0, 0, 0, &b->recv_mr, NULL));
	TRY(fi_mr_reg(p->domain, b->target, LEN, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &b->target_mr, NULL));
	TRY(fi_mr_reg(p->domain, b->send, LEN, local, 0, 0, 0, &b->send_again, NULL));
	TRY(fi_mr_reg(p->domain, b->recv, LEN, local, 0, 0, 0, &b->recv_again, NULL));
	return T_PASS;
}

static void release_buffers(struct buffers *b)
{
	struct fid_mr *mrs[] = { b->send_again, b->recv_again, b->target_mr, b->recv_mr, b->send_mr };
	for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
		if (mrs[i])
			fi_close(&mrs[i]->fid);
	uint8_t *bufs[] = { b->send, b->recv, b->target };
	for (size_t i = 0; i < 3; i++)
		if (bufs[i])
			munmap(bufs[i], LEN);
}

/* ---- the exec'd child ---- */

/* Descriptors that would be the parent's RDMA state, had it leaked. */
static int inherited_rdma_fds(char *first, size_t len)
{
	DIR *d = opendir("/proc/self/fd");
	int found = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char path[300], target[PATH_MAX];
		snprintf(path, sizeof(path), "/proc/self/fd/%.255s", e->d_name);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		if (strstr(target, "/dev/infiniband") || strstr(target, "eventfd") || strstr(target, "eventpoll") ||
		    strstr(target, "[infinibandevent]")) {
			if (!found)
				snprintf(first, len, "fd %.16s -> %.200s", e->d_name, target);
			found++;
		}
	}
	if (d)
		closedir(d);
	return found;
}

static int exec_child(void)
{
	char first[256] = "";
	int n = inherited_rdma_fds(first, sizeof(first));
	if (n)
		FAIL("the exec'd child inherited %d RDMA or wait descriptors (%s)", n, first);
	struct pair p;
	struct buffers b;
	RUN(open_pair(&p, prov, address, 0));
	RUN(register_buffers(&p, &b));
	RUN(move_bytes(&p, &b, 77, "the exec'd child"));
	release_buffers(&b);
	close_pair(&p);
	return T_PASS;
}

/* ---- the parent ---- */

static const char *self_exe;

static int t_parent(void)
{
	struct pair p;
	struct buffers b;
	RUN(open_pair(&p, prov, address, 0));
	RUN(register_buffers(&p, &b));
	RUN(move_bytes(&p, &b, 1, "before the fork"));
	/* What the parent's buffers hold at the fork. */
	uint8_t *before = malloc(3 * LEN);
	if (!before)
		FAIL("malloc");
	memcpy(before, b.send, LEN);
	memcpy(before + LEN, b.recv, LEN);
	memcpy(before + 2 * LEN, b.target, LEN);

	int wrote[2], go[2];
	if (pipe(wrote) || pipe(go))
		FAIL("pipe: %s", strerror(errno));
	fflush(NULL);
	pid_t child = fork();
	if (child < 0)
		FAIL("fork: %s", strerror(errno));
	if (child == 0) {
		/* The child's copy (where it has one: with ibv_fork_init the
		 * registered pages are not inherited at all). */
		close(wrote[0]);
		close(go[1]);
		if (msync(b.send, LEN, MS_ASYNC) == 0) {
			memset(b.send, 0x11, LEN);
			memset(b.recv, 0x22, LEN);
			memset(b.target, 0x33, LEN);
		}
		char c = 1;
		if (write(wrote[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(3);
		execl(self_exe, self_exe, "-C", "-p", prov, "-a", address, (char *)NULL);
		_exit(4);
	}
	close(wrote[1]);
	close(go[0]);
	char c;
	int r = T_PASS;
	if (read(wrote[0], &c, 1) != 1) {
		snprintf(why, sizeof(why), "the child ended before writing its copy");
		r = T_FAIL;
	}
	if (r == T_PASS && (memcmp(before, b.send, LEN) || memcmp(before + LEN, b.recv, LEN) ||
			    memcmp(before + 2 * LEN, b.target, LEN))) {
		snprintf(why, sizeof(why), "the child's writes changed the parent's registered buffers");
		r = T_FAIL;
	}
	/* The parent writes first, the child still alive: its buffers must
	 * still be the pages the adapter uses. */
	if (r == T_PASS)
		r = move_bytes(&p, &b, 2, "after the fork, the child alive");
	c = 1;
	if (write(go[1], &c, 1) != 1 && r == T_PASS) {
		snprintf(why, sizeof(why), "the child is gone before its exec");
		r = T_FAIL;
	}
	close(go[1]);
	close(wrote[0]);
	int status = 0;
	double deadline = now_ms() + 2 * WAIT_MS;
	pid_t w;
	while ((w = waitpid(child, &status, WNOHANG)) == 0 && now_ms() < deadline)
		usleep(10000);
	if (w == 0) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
		if (r == T_PASS) {
			snprintf(why, sizeof(why), "the exec'd child did not end within %d ms", 2 * WAIT_MS);
			r = T_FAIL;
		}
	} else if (r == T_PASS && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
		snprintf(why, sizeof(why), "the exec'd child failed (status 0x%x; its output is above)", status);
		r = T_FAIL;
	}
	if (r == T_PASS)
		r = move_bytes(&p, &b, 3, "after the child ended");
	free(before);
	release_buffers(&b);
	close_pair(&p);
	return r;
}

static const struct nd_subtest subtests[] = {
	{ "parent", t_parent },
};
static struct nd_suite suite = { ND_SUITE(subtests), .timing = ND_TIME_MS };

static bool is_child;
static int option(int opt, const char *arg)
{
	(void)arg;
	if (opt != 'C')
		return -1;
	is_child = true;
	return 0;
}

int main(int argc, char **argv)
{
	const struct nd_cli cli = { .optstring = "p:a:t:Ch", .prov = &prov, .address = &address, .suite = &suite,
				    .option = option,
				    .usage = "usage: %s [-p PROV] [-a ADDRESS] [-t SUBTEST]\n"
					     "fork(2) with memory registered; -C: the exec'd child's part\n" };
	address = nd_default_address();
	if (nd_parse_options(&cli, argc, argv) || nd_check_only(&suite))
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	static char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		perror("readlink /proc/self/exe");
		return 1;
	}
	exe[n] = 0;
	self_exe = exe;
	if (is_child) {
		int r = exec_child();
		printf("%s: exec_child%s%s\n", r == T_PASS ? "PASS" : "FAIL", r == T_PASS ? "" : ": ",
		       r == T_PASS ? "" : why);
		return r == T_PASS ? 0 : 1;
	}
	return nd_run_subtests(&suite);
}
