/* nd_test_main.h: the command line the project's fabtests programs share.
 *
 * nd_parse_options reads every program's options: -p PROVIDER, -a ADDRESS
 * and -t SUBTEST (the last one given wins) mean the same wherever a program
 * takes them, its own options go to its callback, and -h, an unknown option
 * or a missing argument print its usage (with its subtests' names on a line
 * "subtests: a b c") and make the exit status 2.
 *
 * A program with subtests describes them in a struct nd_suite, a table of
 * struct nd_subtest; nd_subtest.h runs them. C; one translation unit per
 * program. */
#ifndef ND_TEST_MAIN_H
#define ND_TEST_MAIN_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* One subtest: returns T_PASS, T_FAIL or T_SKIP (nd_subtest.h). */
struct nd_subtest {
	const char *name;
	int (*fn)(void);
	const void *data; /* the program's own, for its suite's run hook */
};

/* How nd_run_subtests prints a PASS line: "PASS: name", "PASS: name (12 ms)"
 * or "PASS: name (1.2 s)". */
enum nd_timing { ND_TIME_NONE, ND_TIME_MS, ND_TIME_S };

struct nd_suite {
	const struct nd_subtest *tests;
	size_t count;
	/* Runs one subtest with what it needs around it (a connection, a
	 * watchdog); NULL: its fn alone. */
	int (*run)(const struct nd_subtest *t);
	enum nd_timing timing;
	const char *only; /* -t: the one subtest to run, or NULL for all */
};
#define ND_SUITE(table) .tests = (table), .count = sizeof(table) / sizeof((table)[0])

/* 0 when -t is unset or names a subtest of SUITE; otherwise says so on
 * stderr and returns 2, the exit status of a usage error. */
static inline int nd_check_only(const struct nd_suite *suite)
{
	if (!suite->only)
		return 0;
	for (size_t i = 0; i < suite->count; i++)
		if (!strcmp(suite->tests[i].name, suite->only))
			return 0;
	fprintf(stderr, "no subtest named %s\n", suite->only);
	return 2;
}

struct nd_cli {
	const char *optstring; /* getopt's: the common options the program takes, and its own */
	const char *usage;     /* printed on stderr; every %s in it is the program's name */
	/* Where -p and -a go (preset to their defaults); NULL: the letter,
	 * if the program takes it, is its own. */
	const char **prov, **address;
	/* -t names one of its subtests (otherwise -t is the program's own);
	 * the usage lists them unless UNLISTED. */
	struct nd_suite *suite;
	bool unlisted;
	/* The program's own options: 0 when taken, otherwise a usage error. */
	int (*option)(int opt, const char *arg);
};

/* Prints CLI's usage for the program ARGV0; returns 2. */
static inline int nd_usage(const struct nd_cli *cli, const char *argv0)
{
	for (const char *p = cli->usage; *p; p++) {
		if (p[0] == '%' && p[1] == 's') {
			fputs(argv0, stderr);
			p++;
		} else {
			fputc(*p, stderr);
		}
	}
	if (cli->suite && !cli->unlisted) {
		fputs("subtests:", stderr);
		for (size_t i = 0; i < cli->suite->count; i++)
			fprintf(stderr, " %s", cli->suite->tests[i].name);
		fputc('\n', stderr);
	}
	return 2;
}

/* Reads the options; 0, or 2 once the usage is printed. */
static inline int nd_parse_options(const struct nd_cli *cli, int argc, char **argv)
{
	int opt;
	while ((opt = getopt(argc, argv, cli->optstring)) != -1) {
		const char **to = NULL;
		switch (opt) {
		case 'p': to = cli->prov; break;
		case 'a': to = cli->address; break;
		case 't': to = cli->suite ? &cli->suite->only : NULL; break;
		}
		if (to)
			*to = optarg;
		else if (opt == '?' || opt == 'h' || !cli->option || cli->option(opt, optarg))
			return nd_usage(cli, argv[0]);
	}
	return 0;
}

#endif /* ND_TEST_MAIN_H */
