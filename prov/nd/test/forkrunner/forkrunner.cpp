/*
 * The runner of the ThreadSanitizer build's tests (criterion/criterion.h
 * says why it replaces Criterion's): each test in a forked process of its
 * own, one at a time, bounded by its timeout; Criterion's output lines.
 */
#include "criterion/criterion.h"

#include <fnmatch.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

struct RegisteredTest {
	std::string suite, name;
	void (*fn)(void);
	nd_cr_options options;
};

/* Function-local statics: registrars run in static initialization, in any
 * order across files. */
std::vector<RegisteredTest> &tests()
{
	static std::vector<RegisteredTest> all;
	return all;
}
std::map<std::string, nd_cr_options> &suites()
{
	static std::map<std::string, nd_cr_options> all;
	return all;
}

const RegisteredTest *current;

[[noreturn]] void run_in_child(const RegisteredTest &t)
{
	current = &t;
	const auto s = suites().find(t.suite);
	const nd_cr_options *suite = s == suites().end() ? nullptr : &s->second;
	if (suite && suite->init)
		suite->init();
	if (t.options.init)
		t.options.init();
	t.fn();
	if (t.options.fini)
		t.options.fini();
	if (suite && suite->fini)
		suite->fini();
	std::fflush(nullptr);
	/* exit, not _exit: ThreadSanitizer reports at exit, and its exit code
	 * (66) fails the test. */
	std::exit(0);
}

double timeout_of(const RegisteredTest &t)
{
	if (t.options.timeout > 0)
		return t.options.timeout;
	const auto s = suites().find(t.suite);
	if (s != suites().end() && s->second.timeout > 0)
		return s->second.timeout;
	return 0;
}

/* Runs T; true when it passed. */
bool run(const RegisteredTest &t, bool verbose)
{
	const auto start = std::chrono::steady_clock::now();
	std::fflush(nullptr);
	const pid_t pid = fork();
	if (pid < 0) {
		std::perror("fork");
		return false;
	}
	if (pid == 0) {
		const double limit = timeout_of(t);
		if (limit > 0)
			alarm(static_cast<unsigned>(limit + 0.999));
		run_in_child(t);
	}
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	const bool passed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	if (passed) {
		if (verbose)
			std::printf("[PASS] %s::%s: (%.2fs)\n", t.suite.c_str(), t.name.c_str(), took);
	} else if (WIFSIGNALED(status)) {
		std::printf("[FAIL] %s::%s: %s (signal %d) after %.2fs\n", t.suite.c_str(), t.name.c_str(),
			    WTERMSIG(status) == SIGALRM ? "timed out" : "crashed", WTERMSIG(status), took);
	} else {
		std::printf("[FAIL] %s::%s: exit status %d after %.2fs\n", t.suite.c_str(), t.name.c_str(),
			    WEXITSTATUS(status), took);
	}
	std::fflush(stdout);
	return passed;
}

} // namespace

void nd_cr_register_test(const char *suite, const char *name, void (*fn)(void), const nd_cr_options &options)
{
	tests().push_back({ suite, name, fn, options });
}

void nd_cr_register_suite(const char *suite, const nd_cr_options &options) { suites()[suite] = options; }

void nd_cr_fail(const char *file, int line, const char *condition, const char *format, ...)
{
	std::fprintf(stderr, "%s:%d: %s::%s: assertion failed: %s", file, line,
		     current ? current->suite.c_str() : "?", current ? current->name.c_str() : "?", condition);
	if (format[0]) {
		std::fputs(": ", stderr);
		va_list ap;
		va_start(ap, format);
		std::vfprintf(stderr, format, ap);
		va_end(ap);
	}
	std::fputc('\n', stderr);
	std::fflush(nullptr);
	std::exit(1);
}

void nd_cr_log(const char *format, ...)
{
	va_list ap;
	va_start(ap, format);
	std::fputs("[----] ", stderr);
	std::vfprintf(stderr, format, ap);
	va_end(ap);
}

int main(int argc, char **argv)
{
	std::string filter = "*";
	bool verbose = false;
	for (int i = 1; i < argc; i++) {
		const std::string arg = argv[i];
		if (arg.rfind("--filter=", 0) == 0) {
			filter = arg.substr(9);
		} else if (arg == "--filter" && i + 1 < argc) {
			filter = argv[++i];
		} else if (arg == "--verbose" || arg == "--verbose=1") {
			verbose = true;
		} else if (arg.rfind("-j", 0) == 0 || arg.rfind("--verbose=", 0) == 0 || arg.rfind("--json=", 0) == 0) {
			/* one at a time; quiet; no report file */
		} else {
			std::fprintf(stderr, "usage: %s [--filter=SUITE/TEST-GLOB] [-jN] [--verbose]\n", argv[0]);
			return 2;
		}
	}
	int tested = 0, passing = 0;
	for (const auto &t : tests()) {
		const std::string full = t.suite + "/" + t.name;
		if (fnmatch(filter.c_str(), full.c_str(), FNM_EXTMATCH) != 0)
			continue;
		tested++;
		passing += run(t, verbose);
	}
	std::printf("[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Crashing: 0\n", tested, passing,
		    tested - passing);
	return tested && passing == tested ? 0 : 1;
}
