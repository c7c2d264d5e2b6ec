/*
 * probe_common.c - option parsing, output layout, buffers, the per-size frame
 * of the point-to-point probes and the collective driver shared by the
 * OSU-compatible probes (see probe_common.h).
 */
#define _GNU_SOURCE
#include "probe_common.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The OSU release whose text layout the probes reproduce (header lines). */
#ifndef PROBE_OSU_VERSION
#define PROBE_OSU_VERSION "7.2"
#endif

/* OSU method constants (same values as OSU 7.x). */
#define PROBE_LARGE_MESSAGE     8192      /* sizes above this use the "large" counts */
#define PROBE_WINDOW_DEFAULT    64        /* messages in flight for osu_bw/osu_bibw  */
#define PROBE_MAX_SIZE_PT2PT    (1 << 22) /* default -m MAX for point-to-point       */
#define PROBE_MAX_SIZE_COLL     (1 << 20) /* default -m MAX for collectives          */
#define PROBE_SIZE_LIMIT        (1 << 30) /* largest -m MAX the probes accept        */
#define PROBE_WINDOW_LIMIT      65536     /* largest -W the probes accept            */

/* Output layout: size column, value columns, iterations column. */
#define PROBE_SIZE_WIDTH        10
#define PROBE_FIELD_WIDTH       18
#define PROBE_ITER_WIDTH        12
#define PROBE_PRECISION         2

enum parse_result { PARSE_RUN, PARSE_HELP, PARSE_VERSION, PARSE_ERROR };

/* Only rank 0 talks, so that a bad option gives one line, not one per rank. */
static void say_error(const struct probe_run *run, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void say_error(const struct probe_run *run, const char *fmt, ...)
{
    va_list args;

    if (run->rank != 0) {
        return;
    }
    fprintf(stderr, "%s: error: ", run->info->name);
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fprintf(stderr, " (try '%s -h')\n", run->info->name);
    fflush(stderr);
}

/* Whole-string decimal integer in [lo, hi]; 0 on success. */
static int parse_integer(const char *text, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    long long value;

    if (text == NULL || *text == '\0' || *text == ' ' || *text == '\t') {
        return -1;
    }
    errno = 0;
    value = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < lo || value > hi) {
        return -1;
    }
    *out = value;
    return 0;
}

/* -m MAX | MIN:MAX | MIN: | :MAX, as OSU reads it; 0 on success. */
static int parse_sizes(const char *text, struct probe_options *opt)
{
    const char *colon = strchr(text, ':');
    long long value;
    char min_text[64];

    if (colon == NULL) {
        if (parse_integer(text, 1, PROBE_SIZE_LIMIT, &value)) {
            return -1;
        }
        opt->max_size = (size_t)value;
        return 0;
    }
    if (strchr(colon + 1, ':') != NULL || (size_t)(colon - text) >= sizeof(min_text)) {
        return -1;
    }
    if (colon == text && colon[1] == '\0') {
        return -1; /* ":" alone says nothing */
    }
    if (colon != text) {
        memcpy(min_text, text, (size_t)(colon - text));
        min_text[colon - text] = '\0';
        if (parse_integer(min_text, 0, PROBE_SIZE_LIMIT, &value)) {
            return -1;
        }
        opt->min_size = (size_t)value;
    }
    if (colon[1] != '\0') {
        if (parse_integer(colon + 1, 1, PROBE_SIZE_LIMIT, &value)) {
            return -1;
        }
        opt->max_size = (size_t)value;
    }
    return 0;
}

static void set_defaults(const struct probe_info *info, struct probe_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->min_size = 1;
    opt->window = PROBE_WINDOW_DEFAULT;
    switch (info->family) {
    case PROBE_LATENCY:
        opt->max_size = PROBE_MAX_SIZE_PT2PT;
        opt->iters_small = 10000;
        opt->skip_small = 100;
        opt->iters_large = 1000;
        opt->skip_large = 10;
        break;
    case PROBE_BANDWIDTH:
        opt->max_size = PROBE_MAX_SIZE_PT2PT;
        opt->iters_small = 100;
        opt->skip_small = 10;
        opt->iters_large = 20;
        opt->skip_large = 2;
        break;
    case PROBE_COLLECTIVE:
        opt->max_size = PROBE_MAX_SIZE_COLL;
        opt->iters_small = 1000;
        opt->skip_small = 100;
        opt->iters_large = 100;
        opt->skip_large = 10;
        break;
    }
}

static void print_help(const struct probe_run *run)
{
    const struct probe_info *info = run->info;
    const struct probe_options *d = &run->opt; /* still the defaults here */

    if (run->rank != 0) {
        return;
    }
    printf("Usage: %s [options]\n", info->name);
    printf("fabreg probe: %s, output in the OSU Micro-Benchmarks %s text format.\n",
           info->title, PROBE_OSU_VERSION);
    printf("Options:\n");
    printf("  -m, --message-size [MIN:]MAX  message sizes MIN..MAX bytes, doubling"
           " (default %zu:%zu; also MIN: or :MAX)\n", d->min_size, d->max_size);
    printf("  -i, --iterations ITER         timed iterations per size (default %d,"
           " %d above %d bytes)\n", d->iters_small, d->iters_large, PROBE_LARGE_MESSAGE);
    printf("  -x, --warmup ITER             untimed warm-up iterations per size"
           " (default %d, %d above %d bytes)\n", d->skip_small, d->skip_large,
           PROBE_LARGE_MESSAGE);
    if (info->family == PROBE_BANDWIDTH) {
        printf("  -W, --window-size SIZE        messages in flight per iteration"
               " (default %d)\n", PROBE_WINDOW_DEFAULT);
    }
    if (info->family == PROBE_COLLECTIVE) {
        printf("  -f, --full                    also print min/max latency over ranks"
               " and iterations\n");
    }
    printf("  -c, --validation              check the received data, add a"
           " Pass/Fail column\n");
    printf("  -h, --help                    print this help\n");
    printf("  -v, --version                 print the probe and format version\n");
    fflush(stdout);
}

static enum parse_result parse_options(struct probe_run *run, int argc, char **argv)
{
    static const struct option all_long[] = {
        {"message-size", required_argument, NULL, 'm'},
        {"iterations", required_argument, NULL, 'i'},
        {"warmup", required_argument, NULL, 'x'},
        {"window-size", required_argument, NULL, 'W'},
        {"full", no_argument, NULL, 'f'},
        {"validation", no_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'v'},
        {NULL, 0, NULL, 0},
    };
    struct option longopts[9];
    char optstring[32] = "+:m:i:x:chv";
    struct probe_options *opt = &run->opt;
    char shown[3] = "-?";
    long long value;
    int n = 0, c, k;

    if (run->info->family == PROBE_BANDWIDTH) {
        strcat(optstring, "W:");
    }
    if (run->info->family == PROBE_COLLECTIVE) {
        strcat(optstring, "f");
    }
    for (k = 0; all_long[k].name != NULL; k++) {
        if (strchr(optstring, all_long[k].val) != NULL) {
            longopts[n++] = all_long[k];
        }
    }
    memset(&longopts[n], 0, sizeof(longopts[n]));

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            return PARSE_HELP;
        case 'v':
            return PARSE_VERSION;
        case 'm':
            if (parse_sizes(optarg, opt)) {
                say_error(run, "invalid -m value '%s': expected [MIN:]MAX in bytes,"
                          " MAX from 1 to 1073741824", optarg);
                return PARSE_ERROR;
            }
            break;
        case 'i':
            if (parse_integer(optarg, 1, 1000000000, &value)) {
                say_error(run, "invalid -i value '%s': expected a positive number of"
                          " iterations", optarg);
                return PARSE_ERROR;
            }
            opt->iters_small = opt->iters_large = (int)value;
            break;
        case 'x':
            if (parse_integer(optarg, 0, 1000000000, &value)) {
                say_error(run, "invalid -x value '%s': expected a number of warm-up"
                          " iterations >= 0", optarg);
                return PARSE_ERROR;
            }
            opt->skip_small = opt->skip_large = (int)value;
            break;
        case 'W':
            if (parse_integer(optarg, 1, PROBE_WINDOW_LIMIT, &value)) {
                say_error(run, "invalid -W value '%s': expected a window size from 1"
                          " to 65536", optarg);
                return PARSE_ERROR;
            }
            opt->window = (int)value;
            break;
        case 'f':
            opt->full = 1;
            break;
        case 'c':
            opt->validate = 1;
            break;
        case ':':
            shown[1] = (char)optopt;
            say_error(run, "option %s needs a value", optopt ? shown : argv[optind - 1]);
            return PARSE_ERROR;
        default:
            shown[1] = (char)optopt;
            say_error(run, "unknown option '%s'", optopt ? shown : argv[optind - 1]);
            return PARSE_ERROR;
        }
    }
    if (optind < argc) {
        say_error(run, "unexpected argument '%s'", argv[optind]);
        return PARSE_ERROR;
    }
    if (opt->min_size > opt->max_size) {
        say_error(run, "invalid -m: MIN %zu is larger than MAX %zu", opt->min_size,
                  opt->max_size);
        return PARSE_ERROR;
    }
    return PARSE_RUN;
}

/*
 * Initialise MPI, parse the command line and check the number of ranks.
 * Returns only when the benchmark should run; for -h/-v it exits 0, for a bad
 * option or a wrong number of ranks it prints one line (rank 0) and exits 1.
 */
static void probe_start(struct probe_run *run, const struct probe_info *info, int *argc,
                 char ***argv)
{
    enum parse_result parsed;

    MPI_Init(argc, argv);
    memset(run, 0, sizeof(*run));
    run->info = info;
    MPI_Comm_rank(MPI_COMM_WORLD, &run->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &run->nranks);
    set_defaults(info, &run->opt);

    parsed = parse_options(run, *argc, *argv);
    switch (parsed) {
    case PARSE_HELP:
        set_defaults(info, &run->opt);
        print_help(run);
        MPI_Finalize();
        exit(EXIT_SUCCESS);
    case PARSE_VERSION:
        if (run->rank == 0) {
            printf("# fabreg probe %s (OSU %s-compatible output)\n", info->name,
                   PROBE_OSU_VERSION);
        }
        MPI_Finalize();
        exit(EXIT_SUCCESS);
    case PARSE_ERROR:
        MPI_Finalize();
        exit(EXIT_FAILURE);
    case PARSE_RUN:
        break;
    }

    if (info->family != PROBE_COLLECTIVE && run->nranks != 2) {
        if (run->rank == 0) {
            fprintf(stderr, "This test requires exactly two processes\n");
        }
        MPI_Finalize();
        exit(EXIT_FAILURE);
    }
    if (info->family == PROBE_COLLECTIVE && run->nranks < 2) {
        if (run->rank == 0) {
            fprintf(stderr, "This test requires at least two processes\n");
        }
        MPI_Finalize();
        exit(EXIT_FAILURE);
    }
}

/* Finalise MPI and exit: 0, or 1 after a validation failure. */
static void __attribute__((noreturn)) probe_finish(const struct probe_run *run, int failed)
{
    (void)run;
    MPI_Finalize();
    exit(failed ? EXIT_FAILURE : EXIT_SUCCESS);
}

/* Print (rank 0) the probe's identification line and the OSU header lines. */
static void probe_print_header(const struct probe_run *run)
{
    const struct probe_info *info = run->info;
    const struct probe_options *opt = &run->opt;

    if (run->rank != 0) {
        return;
    }
    printf("# fabreg probe %s (OSU 7.x-compatible output)\n", info->name);
    if (info->family == PROBE_COLLECTIVE) {
        /* OSU 7.x collectives: blank line, title, datatype, column names. */
        printf("\n# %s v%s\n", info->title, PROBE_OSU_VERSION);
        printf("# Datatype: MPI_CHAR.\n");
        printf("%-*s%*s", PROBE_SIZE_WIDTH, "# Size", PROBE_FIELD_WIDTH, "Avg Latency(us)");
        if (opt->full) {
            printf("%*s%*s%*s", PROBE_FIELD_WIDTH, "Min Latency(us)", PROBE_FIELD_WIDTH,
                   "Max Latency(us)", PROBE_ITER_WIDTH, "Iterations");
        }
    } else {
        /* OSU 7.2 point-to-point: title, column names, then the datatype. */
        printf("# %s v%s\n", info->title, PROBE_OSU_VERSION);
        printf("%-*s%*s", PROBE_SIZE_WIDTH, "# Size", PROBE_FIELD_WIDTH,
               info->family == PROBE_LATENCY ? "Latency (us)" : "Bandwidth (MB/s)");
    }
    if (opt->validate) {
        printf("%*s", PROBE_FIELD_WIDTH, "Validation");
    }
    printf("\n");
    if (info->family != PROBE_COLLECTIVE) {
        printf("# Datatype: MPI_CHAR.\n");
    }
    fflush(stdout);
}

/* Iterations / warm-up iterations for one message size (OSU thresholds). */
static int probe_iterations(const struct probe_run *run, size_t size)
{
    return size > PROBE_LARGE_MESSAGE ? run->opt.iters_large : run->opt.iters_small;
}

static int probe_skip(const struct probe_run *run, size_t size)
{
    return size > PROBE_LARGE_MESSAGE ? run->opt.skip_large : run->opt.skip_small;
}

/* Message sizes: MIN, 2*MIN, 4*MIN, ... up to MAX (0 is skipped as in OSU). */
static size_t probe_first_size(const struct probe_run *run)
{
    return run->opt.min_size ? run->opt.min_size : 1;
}

static size_t probe_next_size(size_t size)
{
    return size * 2;
}

/* Page-aligned buffer, or MPI_Abort with a message naming the probe. */
static void *probe_alloc(const struct probe_run *run, size_t bytes)
{
    void *buf = NULL;
    long page = sysconf(_SC_PAGESIZE);

    if (page <= 0) {
        page = 4096;
    }
    if (posix_memalign(&buf, (size_t)page, bytes ? bytes : 1) != 0) {
        fprintf(stderr, "%s: error: cannot allocate %zu bytes on rank %d\n",
                run->info->name, bytes, run->rank);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
    }
    return buf;
}

static const char *verdict(int errors)
{
    return errors ? "Fail" : "Pass";
}

/* Print one point-to-point row (rank 0): size, value [, Pass/Fail]. */
static void probe_print_pt2pt_row(const struct probe_run *run, size_t size, double value,
                           int errors)
{
    if (run->rank != 0) {
        return;
    }
    printf("%-*zu%*.*f", PROBE_SIZE_WIDTH, size, PROBE_FIELD_WIDTH, PROBE_PRECISION, value);
    if (run->opt.validate) {
        printf("%*s", PROBE_FIELD_WIDTH, verdict(errors));
    }
    printf("\n");
    fflush(stdout);
}

void probe_prepare_exchange(const struct probe_run *run, char *s_buf, char *r_buf,
                            size_t size, int peer, int iter)
{
    probe_fill(s_buf, size, run->rank, peer, iter);
    memset(r_buf, 0xff, size);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Sum of validation errors over all ranks, on every rank. */
static int probe_sum_errors(int errors)
{
    int total = 0;

    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return total;
}

/*
 * Collective row: reduce this rank's average latency (us) to min/avg/max on
 * rank 0 and print it; sums the validation errors over all ranks and returns
 * that sum on every rank.
 */
static int probe_report_collective(const struct probe_run *run, size_t size, double latency_us,
                            int iterations, int errors)
{
    double min_us = 0.0, max_us = 0.0, sum_us = 0.0;
    int total = 0;

    MPI_Reduce(&latency_us, &min_us, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&latency_us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&latency_us, &sum_us, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (run->opt.validate) {
        total = probe_sum_errors(errors);
    }
    if (run->rank == 0) {
        printf("%-*zu%*.*f", PROBE_SIZE_WIDTH, size, PROBE_FIELD_WIDTH, PROBE_PRECISION,
               sum_us / run->nranks);
        if (run->opt.full) {
            printf("%*.*f%*.*f%*d", PROBE_FIELD_WIDTH, PROBE_PRECISION, min_us,
                   PROBE_FIELD_WIDTH, PROBE_PRECISION, max_us, PROBE_ITER_WIDTH, iterations);
        }
        if (run->opt.validate) {
            printf("%*s", PROBE_FIELD_WIDTH, verdict(total));
        }
        printf("\n");
        fflush(stdout);
    }
    return total;
}

/* Print (rank 0) the line that ends a run after a validation failure. */
static void probe_report_failure(const struct probe_run *run, size_t size)
{
    if (run->rank == 0) {
        fprintf(stderr, "%s: error: data validation failed at message size %zu\n",
                run->info->name, size);
        fflush(stderr);
    }
}

static unsigned char probe_pattern(int from, int to, size_t k, int iter)
{
    return (unsigned char)(((unsigned)from * 3u + (unsigned)to * 5u + (unsigned)iter +
                            (unsigned)(k % 251u)) & 7u);
}

void probe_fill(void *buf, size_t len, int from, int to, int iter)
{
    unsigned char *p = buf;
    size_t k;

    for (k = 0; k < len; k++) {
        p[k] = probe_pattern(from, to, k, iter);
    }
}

int probe_check(const void *buf, size_t len, int from, int to, int iter)
{
    const unsigned char *p = buf;
    size_t k;
    int wrong = 0;

    for (k = 0; k < len; k++) {
        if (p[k] != probe_pattern(from, to, k, iter)) {
            wrong++;
        }
    }
    return wrong;
}

static int probe_run_pt2pt(const struct probe_run *run, const struct probe_pt2pt *pt2pt)
{
    const size_t max = run->opt.max_size;
    const size_t window = (size_t)run->opt.window;
    struct probe_pt2pt_bufs bufs = {NULL, NULL, NULL, NULL};
    size_t size;
    int failed = 0;

    bufs.send = probe_alloc(run, max);
    bufs.recv = probe_alloc(run, max);
    if (run->info->family == PROBE_BANDWIDTH) {
        bufs.requests = probe_alloc(run, sizeof(*bufs.requests) * 2 * window);
        bufs.statuses = probe_alloc(run, sizeof(*bufs.statuses) * window);
    }
    probe_print_header(run);

    for (size = probe_first_size(run); size <= max && !failed; size = probe_next_size(size)) {
        const int iterations = probe_iterations(run, size);
        double value;
        int errors = 0;

        /* Touch the buffers for this size, then start together. */
        memset(bufs.send, 'a', size);
        memset(bufs.recv, 'b', size);
        MPI_Barrier(MPI_COMM_WORLD);

        value = pt2pt->run_size(run, &bufs, size, iterations, probe_skip(run, size), &errors);

        if (run->opt.validate) {
            errors = probe_sum_errors(errors);
        }
        probe_print_pt2pt_row(run, size, value, errors);
        if (errors) {
            probe_report_failure(run, size);
            failed = 1;
        }
    }

    free(bufs.send);
    free(bufs.recv);
    free(bufs.requests);
    free(bufs.statuses);
    return failed;
}

void probe_pt2pt_main(const struct probe_pt2pt *pt2pt, int argc, char **argv)
{
    struct probe_run run;

    probe_start(&run, &pt2pt->info, &argc, &argv);
    probe_finish(&run, probe_run_pt2pt(&run, pt2pt));
}

void probe_prepare_reduction(const struct probe_run *run, struct probe_coll_bufs *b,
                             size_t size, int iter)
{
    probe_fill(b->send, size, run->rank, 0, iter);
    memset(b->recv, 0xff, size);
}

int probe_check_reduction(const struct probe_run *run, const struct probe_coll_bufs *b,
                          size_t size, int iter)
{
    const unsigned char *got = (const unsigned char *)b->recv;
    int wrong = 0, r;
    size_t k;

    for (k = 0; k < size; k++) {
        unsigned sum = 0;

        for (r = 0; r < run->nranks; r++) {
            sum += probe_pattern(r, 0, k, iter);
        }
        if (got[k] != (unsigned char)(sum & 0xffu)) {
            wrong++;
        }
    }
    return wrong;
}

static int probe_run_collective(const struct probe_run *run,
                                const struct probe_collective *coll)
{
    const size_t max = run->opt.max_size;
    const size_t blocks = (size_t)run->nranks;
    const size_t send_len = coll->send_per_rank ? max * blocks : max;
    const size_t recv_len = coll->recv_per_rank ? max * blocks : max;
    struct probe_coll_bufs bufs;
    size_t size;
    int failed = 0;

    /* Allocate and touch every page once before any timing, as OSU does. */
    bufs.send = probe_alloc(run, send_len);
    bufs.recv = probe_alloc(run, recv_len);
    memset(bufs.send, 1, send_len);
    memset(bufs.recv, 0, recv_len);

    probe_print_header(run);

    for (size = probe_first_size(run); size <= max; size = probe_next_size(size)) {
        const int iterations = probe_iterations(run, size);
        const int skip = probe_skip(run, size);
        double timer = 0.0, t_start, t_stop;
        int errors = 0, i;

        MPI_Barrier(MPI_COMM_WORLD);
        for (i = 0; i < iterations + skip; i++) {
            if (run->opt.validate) {
                coll->prepare(run, &bufs, size, i);
                MPI_Barrier(MPI_COMM_WORLD);
            }
            if (coll->barrier_before) {
                MPI_Barrier(MPI_COMM_WORLD);
            }
            t_start = MPI_Wtime();
            coll->op(run, &bufs, size);
            t_stop = MPI_Wtime();
            if (!coll->barrier_before) {
                MPI_Barrier(MPI_COMM_WORLD);
            }
            if (run->opt.validate) {
                errors += coll->check(run, &bufs, size, i);
            }
            if (i >= skip) {
                timer += t_stop - t_start;
            }
        }
        errors = probe_report_collective(run, size, timer * 1e6 / iterations, iterations,
                                         errors);
        MPI_Barrier(MPI_COMM_WORLD);
        if (errors) {
            probe_report_failure(run, size);
            failed = 1;
            break;
        }
    }

    free(bufs.send);
    free(bufs.recv);
    return failed;
}

void probe_collective_main(const struct probe_collective *coll, int argc, char **argv)
{
    struct probe_run run;

    probe_start(&run, &coll->info, &argc, &argv);
    probe_finish(&run, probe_run_collective(&run, coll));
}
