/*
 * probe_workload.h - start-up of fabreg's own workload probes (fabreg_*.c).
 *
 * Unlike the osu_* probes (probe_common.h), these print fabreg's own result
 * blocks (docs/workloads.md) and share a simpler convention that their callers
 * (checks, `fabreg stress`) rely on: options described by a table and read
 * with getopt_long, numbers taken as atoi/atol/atof take them; bad input is
 * reported by rank 0 alone, as one line naming the probe, and every rank
 * exits 2.  Keeping that in one place keeps the four probes consistent.
 *
 * Part of fabreg; written for the project.
 */
#ifndef PROBE_WORKLOAD_H
#define PROBE_WORKLOAD_H

#include <stddef.h>

#include <mpi.h>

/* Exit status of every workload probe for bad options or an impossible run. */
#define WORKLOAD_EXIT_USAGE 2

enum workload_type {
    WORKLOAD_INT,     /* int field, atoi                                      */
    WORKLOAD_LONG,    /* long field, atol                                     */
    WORKLOAD_DOUBLE,  /* double field, atof                                   */
    WORKLOAD_STRING,  /* const char * field: the argument itself              */
    WORKLOAD_FLAG,    /* int field set to 1; takes no argument                */
    WORKLOAD_CHOICE,  /* int field: index of the argument in `choices`        */
    WORKLOAD_CUSTOM   /* parse(argument, options) stores it; 0 when it is good */
};

/* One option: --name, and -letter unless long_only.  A table ends with name NULL. */
struct workload_option {
    const char *name;
    int letter;
    int long_only;
    enum workload_type type;
    size_t offset;                 /* offsetof() the field in the options struct */
    const char *const *choices;    /* WORKLOAD_CHOICE: names, NULL-terminated    */
    int (*parse)(const char *text, void *options);  /* WORKLOAD_CUSTOM           */
    const char *invalid;           /* the one-line complaint, a printf format
                                      given the argument (%s); NULL for a number:
                                      "invalid --NAME value 'X': expected ..."  */
};

/* What a workload probe is: fixed per program. */
struct workload_probe {
    const char *name;    /* "fabreg_streams": first word of its error lines     */
    const char *usage;   /* printed on an unknown option; %s is argv[0]         */
    const struct workload_option *options;
};

/* One running workload probe and its place in MPI_COMM_WORLD. */
struct workload_run {
    const struct workload_probe *probe;
    int rank;
    int nranks;
};

/*
 * Initialise MPI and read the command line into `options` (which holds the
 * defaults on entry).  Returns only when the probe should run: an unknown
 * option (getopt's own line, then the usage) or a bad CHOICE/CUSTOM value ends
 * every rank with WORKLOAD_EXIT_USAGE, printed by rank 0 only.
 */
void workload_start(struct workload_run *run, const struct workload_probe *probe,
                    void *options, int *argc, char ***argv);

/*
 * Refuse to run: rank 0 prints "<probe>: <message>" as one line; every rank
 * finalises MPI and exits WORKLOAD_EXIT_USAGE.  Every rank must call it (they
 * all see the same options, so they all reach the same verdict).
 */
void workload_refuse(const struct workload_run *run, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/*
 * Zeroed memory for count elements of size bytes, or MPI_Abort with a line naming
 * the probe, the rank and the bytes asked for: a probe never runs on with NULL.
 */
void *workload_alloc(size_t count, size_t size);

#endif /* PROBE_WORKLOAD_H */
