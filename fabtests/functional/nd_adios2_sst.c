/*
 * nd_adios2_sst: ADIOS2's SST engine streaming steps from a writer to a
 * reader, every element checked. SST is ADIOS2's staging engine: the
 * control plane goes over TCP (EVPath), and with DataTransport=RDMA the
 * data goes over libfabric: the reader pulls each step's data from the
 * writer's registered memory with fi_read over an FI_EP_RDM endpoint
 * (fabtests/scripts/nd_adios2.sh runs the pair over "nd;ofi_rxm").
 *
 *   nd_adios2_sst -r writer|reader [-n STEPS] [-e ELEMENTS] [-s STREAM]
 *
 * Each step carries two arrays of 64-bit words: "small" (16 words) and
 * "large" (ELEMENTS words, default 131072: 1 MiB), each word a function of
 * the step and its index. The reader checks every word of every step and
 * that exactly STEPS steps arrived. The writer names its contact file
 * STREAM.sst in the working directory, where the reader finds it.
 *
 * Prints what it wrote or checked ("nd_adios2_sst: reader: N steps, B bytes
 * checked", and a FIGURE line of MB/s and time a step) and exits 0, or says
 * what was wrong and exits 1.
 */
#include <adios2_c.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SMALL 16

static uint64_t word(size_t step, size_t i, int which)
{
	return ((uint64_t)step << 40) ^ ((uint64_t)i * 0x9e3779b97f4a7c15ULL) ^ (uint64_t)which;
}

static int die(const char *role, const char *what)
{
	fprintf(stderr, "nd_adios2_sst: %s: %s\n", role, what);
	return 1;
}

static int write_steps(adios2_io *io, const char *stream, size_t steps, size_t elements)
{
	size_t small_shape = SMALL, large_shape = elements, zero = 0;
	adios2_variable *small = adios2_define_variable(io, "small", adios2_type_uint64_t, 1, &small_shape, &zero,
							  &small_shape, adios2_constant_dims_true);
	adios2_variable *large = adios2_define_variable(io, "large", adios2_type_uint64_t, 1, &large_shape, &zero,
							  &large_shape, adios2_constant_dims_true);
	if (!small || !large)
		return die("writer", "adios2_define_variable failed");
	uint64_t *s = malloc(SMALL * sizeof(*s)), *l = malloc(elements * sizeof(*l));
	if (!s || !l)
		return die("writer", "out of memory");
	adios2_engine *engine = adios2_open(io, stream, adios2_mode_write);
	if (!engine)
		return die("writer", "adios2_open failed");
	for (size_t step = 0; step < steps; step++) {
		for (size_t i = 0; i < SMALL; i++)
			s[i] = word(step, i, 1);
		for (size_t i = 0; i < elements; i++)
			l[i] = word(step, i, 2);
		adios2_step_status status;
		if (adios2_begin_step(engine, adios2_step_mode_append, -1.0, &status) != adios2_error_none ||
		    status != adios2_step_status_ok)
			return die("writer", "adios2_begin_step failed");
		/* Sync puts: the step owns a copy, so the buffers are ours again. */
		if (adios2_put(engine, small, s, adios2_mode_sync) != adios2_error_none ||
		    adios2_put(engine, large, l, adios2_mode_sync) != adios2_error_none)
			return die("writer", "adios2_put failed");
		if (adios2_end_step(engine) != adios2_error_none)
			return die("writer", "adios2_end_step failed");
	}
	if (adios2_close(engine) != adios2_error_none)
		return die("writer", "adios2_close failed");
	printf("nd_adios2_sst: writer: %zu steps, %zu bytes written\n", steps,
	       steps * (SMALL + elements) * sizeof(uint64_t));
	free(s);
	free(l);
	return 0;
}

static int check_words(const uint64_t *got, size_t count, size_t step, int which)
{
	for (size_t i = 0; i < count; i++)
		if (got[i] != word(step, i, which)) {
			fprintf(stderr,
				"nd_adios2_sst: reader: step %zu, %s[%zu] is %#" PRIx64 ", expected %#" PRIx64 "\n",
				step, which == 1 ? "small" : "large", i, got[i], word(step, i, which));
			return 1;
		}
	return 0;
}

static int read_steps(adios2_io *io, const char *stream, size_t steps, size_t elements)
{
	uint64_t *s = malloc(SMALL * sizeof(*s)), *l = malloc(elements * sizeof(*l));
	if (!s || !l)
		return die("reader", "out of memory");
	adios2_engine *engine = adios2_open(io, stream, adios2_mode_read);
	if (!engine)
		return die("reader", "adios2_open failed");
	size_t step = 0, bytes = 0;
	struct timespec start, end;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		adios2_step_status status;
		/* Bounded: a writer that stops sending ends the reader too. */
		if (adios2_begin_step(engine, adios2_step_mode_read, 60.0, &status) != adios2_error_none)
			return die("reader", "adios2_begin_step failed");
		if (status == adios2_step_status_end_of_stream)
			break;
		if (status != adios2_step_status_ok)
			return die("reader", "no step within 60 s");
		adios2_variable *small = adios2_inquire_variable(io, "small");
		adios2_variable *large = adios2_inquire_variable(io, "large");
		if (!small || !large)
			return die("reader", "a variable is missing from the step");
		size_t ndims = 0;
		if (adios2_variable_ndims(&ndims, large) != adios2_error_none || ndims != 1)
			return die("reader", "\"large\" is not one-dimensional");
		size_t shape = 0;
		if (adios2_variable_shape(&shape, large) != adios2_error_none || shape != elements)
			return die("reader", "\"large\" has another length than -e says");
		memset(s, 0, SMALL * sizeof(*s));
		memset(l, 0, elements * sizeof(*l));
		if (adios2_get(engine, small, s, adios2_mode_deferred) != adios2_error_none ||
		    adios2_get(engine, large, l, adios2_mode_deferred) != adios2_error_none)
			return die("reader", "adios2_get failed");
		/* The deferred gets are carried out here, together. */
		if (adios2_end_step(engine) != adios2_error_none)
			return die("reader", "adios2_end_step failed");
		if (check_words(s, SMALL, step, 1) || check_words(l, elements, step, 2))
			return 1;
		bytes += (SMALL + elements) * sizeof(uint64_t);
		step++;
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	adios2_close(engine);
	free(s);
	free(l);
	if (step != steps) {
		fprintf(stderr, "nd_adios2_sst: reader: %zu steps arrived, expected %zu\n", step, steps);
		return 1;
	}
	double seconds = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
	printf("nd_adios2_sst: reader: %zu steps, %zu bytes checked\n", step, bytes);
	/* From the open to the last step: the rendezvous and every check too. */
	printf("FIGURE nd_adios2_sst: %.1f MB/s, %.1f ms a step\n", (double)bytes / seconds / 1e6,
	       seconds * 1e3 / (double)step);
	return 0;
}

int main(int argc, char **argv)
{
	const char *role = NULL, *stream = "nd-adios2-sst";
	size_t steps = 20, elements = 131072;
	int opt;
	while ((opt = getopt(argc, argv, "r:n:e:s:h")) != -1) {
		switch (opt) {
		case 'r':
			role = optarg;
			break;
		case 'n':
			steps = strtoul(optarg, NULL, 0);
			break;
		case 'e':
			elements = strtoul(optarg, NULL, 0);
			break;
		case 's':
			stream = optarg;
			break;
		default:
			fprintf(stderr, "usage: %s -r writer|reader [-n STEPS] [-e ELEMENTS] [-s STREAM]\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!role || (strcmp(role, "writer") && strcmp(role, "reader")) || steps == 0 || elements == 0) {
		fprintf(stderr, "usage: %s -r writer|reader [-n STEPS] [-e ELEMENTS] [-s STREAM]\n", argv[0]);
		return 2;
	}
	adios2_adios *adios = adios2_init_serial();
	if (!adios)
		return die(role, "adios2_init_serial failed");
	adios2_io *io = adios2_declare_io(adios, "nd");
	if (!io || adios2_set_engine(io, "SST") != adios2_error_none ||
	    adios2_set_parameter(io, "DataTransport", "RDMA") != adios2_error_none ||
	    adios2_set_parameter(io, "RendezvousReaderCount", "1") != adios2_error_none ||
	    adios2_set_parameter(io, "QueueLimit", "4") != adios2_error_none)
		return die(role, "setting up the SST engine failed");
	int rc = strcmp(role, "writer") == 0 ? write_steps(io, stream, steps, elements)
					      : read_steps(io, stream, steps, elements);
	adios2_finalize(adios);
	return rc;
}
