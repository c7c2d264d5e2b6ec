/*
 * probe_workload.c - option table, start-up and refusal shared by fabreg's
 * workload probes (see probe_workload.h).
 */
#include "probe_workload.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The probe running in this process (set by workload_start), named in errors. */
static const struct workload_run *current;

static void out_of_memory(const struct workload_run *run)
{
    fprintf(stderr, "%s: out of memory on rank %d\n", run->probe->name, run->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

void *workload_alloc(size_t count, size_t size)
{
    void *mem = calloc(count ? count : 1, size ? size : 1);

    if (mem == NULL) {
        fprintf(stderr, "%s: error: cannot allocate %zu x %zu bytes on rank %d\n",
                current ? current->probe->name : "fabreg probe", count, size,
                current ? current->rank : -1);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return mem;
}

static const struct workload_option *find_option(const struct workload_probe *probe,
                                                 int letter)
{
    const struct workload_option *opt;

    for (opt = probe->options; opt->name != NULL; opt++) {
        if (opt->letter == letter) {
            return opt;
        }
    }
    return NULL;
}

/* Store one option's argument in its field; 0 when the argument is acceptable. A number
 * must be all number: "soon" or "10x" is refused, never read as 0 or 10. */
static int store(const struct workload_option *opt, const char *text, void *options)
{
    char *field = (char *)options + opt->offset;
    char *end;
    long whole;
    double real;
    int k;

    switch (opt->type) {
    case WORKLOAD_INT:
    case WORKLOAD_LONG:
        errno = 0;
        whole = strtol(text, &end, 10);
        if (end == text || *end != '\0' || errno == ERANGE
            || (opt->type == WORKLOAD_INT && (whole < INT_MIN || whole > INT_MAX)))
            return -1;
        if (opt->type == WORKLOAD_INT)
            *(int *)field = (int)whole;
        else
            *(long *)field = whole;
        return 0;
    case WORKLOAD_DOUBLE:
        errno = 0;
        real = strtod(text, &end);
        if (end == text || *end != '\0' || errno == ERANGE || real != real)
            return -1;
        *(double *)field = real;
        return 0;
    case WORKLOAD_STRING:
        *(const char **)field = text;
        return 0;
    case WORKLOAD_FLAG:
        *(int *)field = 1;
        return 0;
    case WORKLOAD_CHOICE:
        for (k = 0; opt->choices[k] != NULL; k++) {
            if (strcmp(text, opt->choices[k]) == 0) {
                *(int *)field = k;
                return 0;
            }
        }
        return -1;
    case WORKLOAD_CUSTOM:
        return opt->parse(text, options);
    }
    return -1;
}

void workload_start(struct workload_run *run, const struct workload_probe *probe,
                    void *options, int *argc, char ***argv)
{
    const struct workload_option *opt;
    struct option *longopts;
    char *optstring, *next;
    size_t n = 0, k;
    int c;

    MPI_Init(argc, argv);
    run->probe = probe;
    MPI_Comm_rank(MPI_COMM_WORLD, &run->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &run->nranks);
    current = run;

    /* The getopt_long tables, from the probe's option table. */
    for (opt = probe->options; opt->name != NULL; opt++) {
        n++;
    }
    longopts = calloc(n + 1, sizeof(*longopts));
    optstring = calloc(2 * n + 1, 1);
    if (longopts == NULL || optstring == NULL) {
        out_of_memory(run);
    }
    next = optstring;
    for (k = 0, opt = probe->options; k < n; k++, opt++) {
        longopts[k].name = opt->name;
        longopts[k].has_arg = opt->type == WORKLOAD_FLAG ? no_argument : required_argument;
        longopts[k].val = opt->letter;
        if (!opt->long_only) {
            *next++ = (char)opt->letter;
            if (opt->type != WORKLOAD_FLAG) {
                *next++ = ':';
            }
        }
    }

    if (run->rank != 0) {
        opterr = 0; /* getopt's complaint once, from rank 0 */
    }
    while ((c = getopt_long(*argc, *argv, optstring, longopts, NULL)) != -1) {
        opt = find_option(probe, c);
        if (opt == NULL) { /* getopt has said what is wrong */
            if (run->rank == 0) {
                fprintf(stderr, probe->usage, (*argv)[0]);
            }
            MPI_Finalize();
            exit(WORKLOAD_EXIT_USAGE);
        }
        if (store(opt, optarg, options) != 0) {
            if (opt->invalid != NULL)
                workload_refuse(run, opt->invalid, optarg);
            workload_refuse(run, "invalid --%s value '%s': expected %s", opt->name, optarg,
                            opt->type == WORKLOAD_DOUBLE ? "a number" : "a whole number");
        }
    }
    free(longopts);
    free(optstring);
}

void workload_refuse(const struct workload_run *run, const char *fmt, ...)
{
    va_list args;
    char *line;
    int len;

    if (run->rank == 0) {
        /* Formatted first, so that the line leaves in one write. */
        va_start(args, fmt);
        len = vsnprintf(NULL, 0, fmt, args);
        va_end(args);
        line = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (line == NULL) {
            out_of_memory(run);
        }
        va_start(args, fmt);
        vsnprintf(line, (size_t)len + 1, fmt, args);
        va_end(args);
        fprintf(stderr, "%s: %s\n", run->probe->name, line);
        free(line);
    }
    MPI_Finalize();
    exit(WORKLOAD_EXIT_USAGE);
}
