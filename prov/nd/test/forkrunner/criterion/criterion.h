/*
 * The part of Criterion's API that nd's tests use, for the ThreadSanitizer
 * build only (configure --enable-sanitizers=thread puts this directory
 * first on the include path and links forkrunner.cpp instead of
 * libcriterion).
 *
 * Why not Criterion itself: its runner maps an arena at a random fixed
 * address in [0x200000000000, 0x7f0000000000), all of which
 * ThreadSanitizer reserves for its shadow memory, so every Criterion
 * program built with -fsanitize=thread aborts at start ("Could not
 * initialize inheritable arena", Snaipe/Criterion issue 274, open since
 * 2018).
 *
 * What stays the same: every Test() runs in a process of its own (a fork
 * of a runner that has run no test code), with its suite's and its own
 * .init/.fini and .timeout; a failed assertion ends that process, naming
 * the file, the line, the condition and the test's message; the runner
 * prints Criterion's "[PASS]"/"[FAIL]" lines and its "Synthesis:" line,
 * and takes --filter=GLOB, -jN (tests run one at a time) and --verbose.
 */
#ifndef ND_FORKRUNNER_CRITERION_H
#define ND_FORKRUNNER_CRITERION_H

#include <cstdio>
#include <cstring>

struct nd_cr_options {
	void (*init)(void);
	void (*fini)(void);
	double timeout;
	const char *description;
};

/* forkrunner.cpp */
void nd_cr_register_test(const char *suite, const char *name, void (*fn)(void), const nd_cr_options &options);
void nd_cr_register_suite(const char *suite, const nd_cr_options &options);
[[noreturn]] void nd_cr_fail(const char *file, int line, const char *condition, const char *format, ...)
	__attribute__((format(printf, 4, 5)));
void nd_cr_log(const char *format, ...) __attribute__((format(printf, 1, 2)));

struct nd_cr_test_registrar {
	nd_cr_test_registrar(const char *suite, const char *name, void (*fn)(void), const nd_cr_options &options)
	{
		nd_cr_register_test(suite, name, fn, options);
	}
};
struct nd_cr_suite_registrar {
	nd_cr_suite_registrar(const char *suite, const nd_cr_options &options)
	{
		nd_cr_register_suite(suite, options);
	}
};

#define Test(suite, name, ...)                                                                        \
	static void suite##_##name##_impl(void);                                                     \
	static const nd_cr_test_registrar suite##_##name##_registrar(#suite, #name, suite##_##name##_impl, \
								     nd_cr_options{ __VA_ARGS__ });  \
	static void suite##_##name##_impl(void)

#define TestSuite(suite, ...) \
	static const nd_cr_suite_registrar suite##_suite_registrar(#suite, nd_cr_options{ __VA_ARGS__ })

/* The message, when given, is a format string literal and its arguments. */
#define ND_CR_CHECK(condition, text, ...)                                      \
	do {                                                                   \
		if (!(condition))                                              \
			nd_cr_fail(__FILE__, __LINE__, text, "" __VA_ARGS__); \
	} while (0)

#define cr_assert(c, ...) ND_CR_CHECK((c), #c, __VA_ARGS__)
#define cr_assert_not(c, ...) ND_CR_CHECK(!(c), "!(" #c ")", __VA_ARGS__)
#define cr_assert_eq(a, b, ...) ND_CR_CHECK((a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...) ND_CR_CHECK((a) != (b), #a " != " #b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...) ND_CR_CHECK((a) < (b), #a " < " #b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) ND_CR_CHECK((a) <= (b), #a " <= " #b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...) ND_CR_CHECK((a) > (b), #a " > " #b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...) ND_CR_CHECK((a) >= (b), #a " >= " #b, __VA_ARGS__)
#define cr_assert_null(p, ...) ND_CR_CHECK((p) == nullptr, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...) ND_CR_CHECK((p) != nullptr, #p " != NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) ND_CR_CHECK(std::strcmp((a), (b)) == 0, #a " equals " #b, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) ND_CR_CHECK(std::strcmp((a), (b)) != 0, #a " differs from " #b, __VA_ARGS__)
#define cr_assert_str_not_empty(s, ...) ND_CR_CHECK((s)[0] != '\0', #s " is not empty", __VA_ARGS__)
#define cr_assert_arr_eq(a, b, size, ...) \
	ND_CR_CHECK(std::memcmp((a), (b), (size)) == 0, #a " equals " #b " (" #size " bytes)", __VA_ARGS__)
#define cr_assert_fail(...) nd_cr_fail(__FILE__, __LINE__, "cr_assert_fail", "" __VA_ARGS__)

#define cr_log_info(...) nd_cr_log(__VA_ARGS__)

#endif /* ND_FORKRUNNER_CRITERION_H */
