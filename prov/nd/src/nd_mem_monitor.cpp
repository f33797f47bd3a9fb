/* nd_mem_monitor.cpp: unmap events from UCX's libucm, loaded at run time. */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include "nd_mem_monitor.h"
#include "nd.h"

#include <dlfcn.h>
#include <signal.h>

#include <array>
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

struct Monitor {
	/* Starting and stopping load libraries and install hooks, which may
	 * unmap memory and so call on_vm_unmapped: under their own lock. */
	Mutex start_lock{LockRank::monitor_start};
	Mutex lock{LockRank::monitor};			/* the listeners; held while they are called */
	std::array<UnmapListener *, kMaxListeners> listeners{};
	bool tried = false;
	bool running = false;
	char why_not[256] = "";
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
void on_vm_unmapped(ucm_event_type_t, ucm_event_t *event, void *) noexcept
{
	const uintptr_t start = reinterpret_cast<uintptr_t>(event->vm_unmapped.address);
	const size_t length = event->vm_unmapped.size;
	Monitor &m = monitor();
	std::lock_guard<Mutex> guard(m.lock);
	for (UnmapListener *listener : m.listeners)
		if (listener)
			listener->on_unmap(start, length);
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

bool start_ucm(Monitor &m)
{
	if (const char *hidden = allocator_hidden_from_hooks()) {
		say_why(m, hidden);
		return false;
	}
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
	ucs_status_t status = m.set_handler(UCM_EVENT_VM_UNMAPPED, 0, on_vm_unmapped, nullptr);
	if (status != UCS_OK) {
		char status_text[32];
		std::snprintf(status_text, sizeof(status_text), "ucs_status_t %d", static_cast<int>(status));
		say_why(m, "libucm could not install its unmap hooks", status_text);
		return false;
	}
	return true;
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
		m.running = start_ucm(m);
#else
		say_why(m, "nd was built without UCX's libucm headers (Debian package libucx-dev)");
#endif
		if (m.running)
			ND_INFO(FI_LOG_MR, "memory monitor: libucm unmap events\n");
		else
			ND_INFO(FI_LOG_MR, "memory monitor unavailable: %s\n", m.why_not);
	}
	if (!m.running && why)
		*why = m.why_not;
	return m.running;
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
	if (m.running)
		m.unset_handler(UCM_EVENT_VM_UNMAPPED, on_vm_unmapped, nullptr);
#endif
	m.running = false;
	m.tried = false;
}

} // namespace nd
