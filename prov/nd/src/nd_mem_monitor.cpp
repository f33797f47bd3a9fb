/* nd_mem_monitor.cpp: unmap events from UCX's libucm, loaded at run time, and
 * inside Open MPI from Open MPI's memory hooks. */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include "nd_mem_monitor.h"
#include "nd.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#ifdef HAVE_UCM_API_UCM_H
#include <ucm/api/ucm.h>
#endif

namespace nd {

namespace {

constexpr size_t kMaxListeners = 64;

/* Open MPI's memory hooks (opal/memoryhooks/memory.h, exported by
 * libopen-pal since Open MPI 1.x): its patcher reports munmap, mremap,
 * madvise(MADV_DONTNEED, MADV_REMOVE), shmdt and a shrinking brk (and from
 * Open MPI 5, mmap over a mapping) to the release callbacks registered here. */
using OpalReleaseCallback = void(void *buf, size_t length, void *cbdata, bool from_alloc);
using OpalSupportLevel = int (*)();
using OpalRegisterRelease = int (*)(OpalReleaseCallback *callback, void *cbdata);
using OpalUnregisterRelease = int (*)(OpalReleaseCallback *callback);
constexpr int kOpalFreeSupport = 0x1;	/* OPAL_MEMORY_FREE_SUPPORT */
constexpr int kOpalMunmapSupport = 0x2;	/* OPAL_MEMORY_MUNMAP_SUPPORT */

struct OpenMpiHooks {
	OpalRegisterRelease register_release = nullptr;
	OpalUnregisterRelease unregister_release = nullptr;
};

enum class Source {
	none,
	ucm,		  /* libucm's hooks on every unmapping call */
	open_mpi_and_ucm, /* Open MPI's hooks, and libucm's on the calls Open MPI leaves alone */
};

struct Monitor {
	/* Starting and stopping load libraries and install hooks, which may
	 * unmap memory and so call on_unmapped: under their own lock. */
	Mutex start_lock{LockRank::monitor_start};
	Mutex lock{LockRank::monitor};			/* the listeners and the probe; held while they are called */
	std::array<UnmapListener *, kMaxListeners> listeners{};
	/* The range start() unmaps to see that the hooks report it. */
	uintptr_t probe_start = 0;
	uintptr_t probe_end = 0;
	bool probe_seen = false;
	std::atomic<bool> sbrk_seen{false};	/* an sbrk(0) reached libucm */
	bool tried = false;
	Source source = Source::none;
	char why_not[256] = "";
	OpalUnregisterRelease opal_unregister = nullptr;
#ifdef HAVE_UCM_API_UCM_H
	decltype(&ucm_set_event_handler) set_handler = nullptr;
	decltype(&ucm_unset_event_handler) unset_handler = nullptr;
#endif
};

/* Trivially destructible (no heap, no exit-time destructor): libucm's hooks
 * may still fire while the process exits, and the provider may be unloaded
 * with no pointer left to free. */
Monitor &monitor()
{
	static Monitor instance;
	return instance;
}

void say_why(Monitor &m, const char *what, const char *detail = nullptr)
{
	std::snprintf(m.why_not, sizeof(m.why_not), "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
}

/* AddressSanitizer's, ThreadSanitizer's and valgrind's allocators take and
 * return memory with raw system calls that libucm's hooks never see. (Under
 * ThreadSanitizer the hooks would also call nd from a thread that has
 * ended for it: glibc madvises an exiting thread's stack.) */
const char *allocator_hidden_from_hooks()
{
	if (dlsym(RTLD_DEFAULT, "__asan_init"))
		return "the process runs under AddressSanitizer, whose allocator unmaps memory unseen";
	if (dlsym(RTLD_DEFAULT, "__tsan_init"))
		return "the process runs under ThreadSanitizer, whose allocator unmaps memory unseen";
	const char *preload = std::getenv("LD_PRELOAD");
	if (preload && std::strstr(preload, "vgpreload"))
		return "the process runs under valgrind, whose allocator unmaps memory unseen";
	return nullptr;
}

#ifdef HAVE_UCM_API_UCM_H
void on_unmapped(uintptr_t start, size_t length) noexcept
{
	Monitor &m = monitor();
	std::lock_guard<Mutex> guard(m.lock);
	if (start < m.probe_end && start + length > m.probe_start)
		m.probe_seen = true;
	for (UnmapListener *listener : m.listeners)
		if (listener)
			listener->on_unmap(start, length);
}

void on_open_mpi_release(void *buf, size_t length, void *, bool) noexcept
{
	on_unmapped(reinterpret_cast<uintptr_t>(buf), length);
}

/* Whether the hooks report `release` of (part of) two pages of nd's own. */
template <typename Release>
bool reported(Monitor &m, Release release)
{
	const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
	auto *at = static_cast<char *>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (at == MAP_FAILED)
		return false;
	at[0] = 1;
	{
		std::lock_guard<Mutex> guard(m.lock);
		m.probe_start = reinterpret_cast<uintptr_t>(at);
		m.probe_end = m.probe_start + 2 * page;
		m.probe_seen = false;
	}
	release(at, page);
	bool seen;
	{
		std::lock_guard<Mutex> guard(m.lock);
		seen = m.probe_seen;
		m.probe_start = m.probe_end = 0;
	}
	munmap(at, 2 * page);
	return seen;
}

/* The first way of releasing memory that the hooks do not report, tried on
 * pages of nd's own once at start: whichever library's patch was written
 * last owns each call, so only a test shows what reaches nd. (A shrinking
 * sbrk is left to libucm's own test: nd's would race another thread's
 * malloc moving the break.) */
const char *first_unreported_release(Monitor &m)
{
	if (!reported(m, [](char *p, size_t page) { munmap(p, page); }))
		return "munmap";
	if (!reported(m, [](char *p, size_t page) {
		    mmap(p, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	    }))
		return "mmap(MAP_FIXED) over a mapping";
	if (!reported(m, [](char *p, size_t page) { madvise(p, page, MADV_DONTNEED); }))
		return "madvise(MADV_DONTNEED)";
	/* Shrinking, not moving (it releases the second page): older libucm
	 * drops mremap's fifth argument, the address MREMAP_FIXED moves to. */
	if (!reported(m, [](char *p, size_t page) { mremap(p, 2 * page, page, 0); }))
		return "mremap";
	return nullptr;
}

/* The process's Open MPI memory hooks when they are active; empty if not.
 * Open MPI's patcher, once MPI_Init has run, owns munmap, mremap, madvise,
 * shmdt and brk (Open MPI 5 also mmap and shmat): it writes a jump over
 * each function's first bytes, so libucm's hooks on them are overwritten
 * when they came first, and libucm would overwrite Open MPI's (Open MPI's
 * own caches then go blind) if it came second. Inside such a process nd
 * takes those unmaps from Open MPI, as Open MPI's own UCX layer does. */
OpenMpiHooks active_open_mpi_hooks()
{
	auto level = reinterpret_cast<OpalSupportLevel>(dlsym(RTLD_DEFAULT, "opal_mem_hooks_support_level"));
	OpenMpiHooks hooks;
	hooks.register_release =
		reinterpret_cast<OpalRegisterRelease>(dlsym(RTLD_DEFAULT, "opal_mem_hooks_register_release"));
	hooks.unregister_release =
		reinterpret_cast<OpalUnregisterRelease>(dlsym(RTLD_DEFAULT, "opal_mem_hooks_unregister_release"));
	const int wanted = kOpalFreeSupport | kOpalMunmapSupport;
	if (!level || !hooks.register_release || !hooks.unregister_release || (level() & wanted) != wanted)
		return {};
	return hooks;
}

void on_vm_unmapped(ucm_event_type_t, ucm_event_t *event, void *) noexcept
{
	on_unmapped(reinterpret_cast<uintptr_t>(event->vm_unmapped.address), event->vm_unmapped.size);
}

/* Registered for the calls libucm hooks beside Open MPI, so that it
 * installs those hooks (their unmaps reach on_vm_unmapped), and to see that
 * a call of sbrk reaches libucm: sbrk(0) is the one call that shows it
 * without moving the break under another thread's malloc. */
void on_native_call(ucm_event_type_t type, ucm_event_t *event, void *) noexcept
{
	if (type == UCM_EVENT_SBRK && event->sbrk.increment == 0)
		monitor().sbrk_seen.store(true, std::memory_order_relaxed);
}

bool sbrk_reaches_ucm(Monitor &m)
{
	m.sbrk_seen.store(false, std::memory_order_relaxed);
	sbrk(0);
	return m.sbrk_seen.load(std::memory_order_relaxed);
}

/* libucs installs its own handlers for SIGSEGV and other fatal signals when
 * it loads (UCX_HANDLE_ERRORS); a provider must leave the application's
 * handlers alone, so they are put back. */
void *dlopen_keeping_signals(const char *name, int flags)
{
	static struct sigaction saved[NSIG];
	stack_t saved_stack{};
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, nullptr, &saved[sig]);
	sigaltstack(nullptr, &saved_stack);
	void *handle = dlopen(name, flags);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &saved[sig], nullptr);
	if (!(saved_stack.ss_flags & SS_ONSTACK))
		sigaltstack(&saved_stack, nullptr);
	return handle;
}

/* `what`, with the code a library answered (`kind`: its type). */
void say_code(Monitor &m, const char *what, const char *kind, int code)
{
	char code_text[32];
	std::snprintf(code_text, sizeof(code_text), "%s %d", kind, code);
	say_why(m, what, code_text);
}

bool load_ucm(Monitor &m)
{
	/* libucm leaves its dependency on libucs undeclared: load libucs first,
	 * with its symbols visible to libucm. */
	if (!dlopen_keeping_signals("libucs.so.0", RTLD_NOW | RTLD_GLOBAL)) {
		say_why(m, "libucs.so.0 (Debian package libucx0) cannot be loaded", dlerror());
		return false;
	}
	void *ucm = dlopen_keeping_signals("libucm.so.0", RTLD_NOW | RTLD_GLOBAL);
	if (!ucm) {
		say_why(m, "libucm.so.0 (Debian package libucx0) cannot be loaded", dlerror());
		return false;
	}
	m.set_handler = reinterpret_cast<decltype(m.set_handler)>(dlsym(ucm, "ucm_set_event_handler"));
	m.unset_handler = reinterpret_cast<decltype(m.unset_handler)>(dlsym(ucm, "ucm_unset_event_handler"));
	auto *opts = static_cast<ucm_global_config_t *>(dlsym(ucm, "ucm_global_opts"));
	if (!m.set_handler || !m.unset_handler || !opts) {
		say_why(m, "libucm.so.0 lacks ucm_set_event_handler");
		return false;
	}
	/* Unmap events need only the mmap-family hooks. libucm would also
	 * replace malloc with its own unless told otherwise; nd asks it not to
	 * unless the user chose (UCX_MEM_MALLOC_HOOKS), since glibc's free
	 * unmaps through the hooked munmap anyway. */
	if (!std::getenv("UCX_MEM_MALLOC_HOOKS")) {
		opts->enable_malloc_hooks = 0;
		opts->enable_malloc_reloc = 0;
	}
	return true;
}

Source start_ucm(Monitor &m)
{
	ucs_status_t status = m.set_handler(UCM_EVENT_VM_UNMAPPED, 0, on_vm_unmapped, nullptr);
	if (status != UCS_OK) {
		say_code(m, "libucm could not install its unmap hooks", "ucs_status_t", status);
		return Source::none;
	}
	if (const char *release = first_unreported_release(m)) {
		say_why(m, "libucm's hooks do not report", release);
		return Source::none;
	}
	return Source::ucm;
}

Source start_beside_open_mpi(Monitor &m, const OpenMpiHooks &hooks)
{
	if (int rc = hooks.register_release(on_open_mpi_release, nullptr)) {
		say_code(m, "Open MPI's memory hooks refused a release callback", "OPAL error", rc);
		return Source::none;
	}
	m.opal_unregister = hooks.unregister_release;
	/* NO_INSTALL: libucm must not patch the calls Open MPI holds. */
	ucs_status_t status =
		m.set_handler(UCM_EVENT_VM_UNMAPPED | UCM_EVENT_FLAG_NO_INSTALL, 0, on_vm_unmapped, nullptr);
	if (status != UCS_OK) {
		say_code(m, "libucm refused an unmap handler", "ucs_status_t", status);
		return Source::none;
	}
	/* glibc's malloc gives the top of its heap back through sbrk, which
	 * makes the brk system call itself: Open MPI's hook on brk never sees
	 * it, and Open MPI leaves sbrk alone. libucm's hook on it may be in
	 * place already (UCX in Open MPI 5 installs its hooks before Open MPI's
	 * patcher writes over the others); if not, nd asks for it. libucm
	 * answers that request with an error when its malloc test sees no sbrk
	 * (nd asks it not to replace malloc), hook in place or not: sbrk(0)
	 * decides. */
	m.set_handler(UCM_EVENT_SBRK | UCM_EVENT_FLAG_NO_INSTALL, 1000, on_native_call, nullptr);
	if (!sbrk_reaches_ucm(m)) {
		m.set_handler(UCM_EVENT_SBRK, 1000, on_native_call, nullptr);
		if (!sbrk_reaches_ucm(m)) {
			say_why(m, "libucm could not hook sbrk beside Open MPI's hooks");
			return Source::none;
		}
	}
	/* Open MPI 5 hooks mmap too, Open MPI 4 does not: libucm's hook where
	 * it can be had, and the test below says whether either reports. */
	m.set_handler(UCM_EVENT_MMAP, 1000, on_native_call, nullptr);
	if (const char *release = first_unreported_release(m)) {
		say_why(m, "neither Open MPI's memory hooks nor libucm's report", release);
		return Source::none;
	}
	return Source::open_mpi_and_ucm;
}

void stop_hooks(Monitor &m) noexcept
{
	if (m.opal_unregister) {
		m.opal_unregister(on_open_mpi_release);
		m.opal_unregister = nullptr;
	}
	if (m.unset_handler) {
		m.unset_handler(UCM_EVENT_VM_UNMAPPED, on_vm_unmapped, nullptr);
		m.unset_handler(UCM_EVENT_SBRK | UCM_EVENT_MMAP, on_native_call, nullptr);
	}
}

Source start_hooks(Monitor &m)
{
	if (const char *hidden = allocator_hidden_from_hooks()) {
		say_why(m, hidden);
		return Source::none;
	}
	if (!load_ucm(m))
		return Source::none;
	if (const OpenMpiHooks hooks = active_open_mpi_hooks(); hooks.register_release) {
		const Source source = start_beside_open_mpi(m, hooks);
		if (source != Source::none)
			return source;
		/* The patch written last wins: a UCX that one of Open MPI's
		 * components started after MPI_Init's patcher has put libucm's
		 * hooks over Open MPI's, and then libucm's are the live ones. */
		ND_INFO(FI_LOG_MR, "memory monitor: %s; trying libucm's hooks alone\n", m.why_not);
		stop_hooks(m);
	}
	const Source source = start_ucm(m);
	if (source == Source::none)
		stop_hooks(m);
	return source;
}
#endif

} // namespace

bool mem_monitor_start(std::string *why)
{
	Monitor &m = monitor();
	std::lock_guard<Mutex> guard(m.start_lock);
	if (!m.tried) {
		m.tried = true;
#ifdef HAVE_UCM_API_UCM_H
		m.source = start_hooks(m);
#else
		say_why(m, "nd was built without UCX's libucm headers (Debian package libucx-dev)");
#endif
		switch (m.source) {
		case Source::ucm:
			ND_INFO(FI_LOG_MR, "memory monitor: libucm's hooks, each way of releasing memory seen reported\n");
			break;
		case Source::open_mpi_and_ucm:
			ND_INFO(FI_LOG_MR, "memory monitor: Open MPI's memory hooks and libucm's (whichever holds each "
					   "call), each way of releasing memory seen reported\n");
			break;
		case Source::none:
			ND_INFO(FI_LOG_MR, "memory monitor unavailable: %s\n", m.why_not);
			break;
		}
	}
	if (m.source == Source::none && why)
		*why = m.why_not;
	return m.source != Source::none;
}

bool mem_monitor_subscribe(UnmapListener *listener) noexcept
{
	Monitor &m = monitor();
	std::lock_guard<Mutex> guard(m.lock);
	for (UnmapListener *&slot : m.listeners) {
		if (!slot) {
			slot = listener;
			return true;
		}
	}
	return false;
}

void mem_monitor_unsubscribe(UnmapListener *listener) noexcept
{
	Monitor &m = monitor();
	std::lock_guard<Mutex> guard(m.lock);
	for (UnmapListener *&slot : m.listeners)
		if (slot == listener)
			slot = nullptr;
}

void mem_monitor_stop() noexcept
{
	Monitor &m = monitor();
	std::lock_guard<Mutex> guard(m.start_lock);
#ifdef HAVE_UCM_API_UCM_H
	if (m.source != Source::none)
		stop_hooks(m);
#endif
	m.source = Source::none;
	m.tried = false;
}

} // namespace nd
