/*
 * fabreg_streams: many transmitter -> receiver streams at once, with loss and
 * corruption accounting per stream.
 *
 * Every message carries a header (stream id, sequence number, checksum of the
 * payload); each receiver counts what it received, what is missing from the
 * sequence, what arrived corrupted or twice, and its rate in Gbit/s. After the
 * data a transmitter sends an END message with the number it sent, so a
 * receiver knows what it should have seen. Rank 0 prints one machine-readable
 * block (see docs/workloads.md):
 *
 *   # fabreg_streams v1 placement=pairs size=65536 window=64 count=2000 ranks=2 streams=1
 *   # stream tx rx tx_host rx_host sent received missed corrupted duplicate rate_gbps loss_rate
 *   0 0 1 node1 node1 2000 2000 0 0 0 12.345678 0
 *   # end fabreg_streams status=ok
 *
 * Placements (-p): pairs  rank 2i -> 2i+1 (neighbours: same node under block mapping)
 *                  cross  rank i -> i + n/2 (halves: across nodes under block mapping)
 *                  fanin  groups of k+1 ranks, ranks 1..k of a group -> its first rank
 * Fault injection for tests: --skip-every N (transmitters leave out every Nth
 * message: receivers must report it missed), --corrupt-every N (flip a payload
 * byte after the checksum was taken: receivers must report it corrupted).
 */
#include "probe_workload.h"

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG_DATA 1
#define TAG_END 2
#define HEADER_BYTES 24

enum placement { PAIRS, CROSS, FANIN };
static const char *const placements[] = {"pairs", "cross", "fanin", NULL};

struct options {
    long size;
    int window;
    long count;
    int placement;  /* enum placement */
    int fanin;
    long skip_every;
    long corrupt_every;
    double timeout;
};

#define FIELD(name) offsetof(struct options, name)
static const struct workload_option option_table[] = {
    {.name = "size", .letter = 's', .type = WORKLOAD_LONG, .offset = FIELD(size)},
    {.name = "window", .letter = 'w', .type = WORKLOAD_INT, .offset = FIELD(window)},
    {.name = "count", .letter = 'n', .type = WORKLOAD_LONG, .offset = FIELD(count)},
    {.name = "placement", .letter = 'p', .type = WORKLOAD_CHOICE, .offset = FIELD(placement),
     .choices = placements, .invalid = "unknown placement '%s'"},
    {.name = "fanin", .letter = 'k', .type = WORKLOAD_INT, .offset = FIELD(fanin)},
    {.name = "skip-every", .letter = 'S', .long_only = 1, .type = WORKLOAD_LONG,
     .offset = FIELD(skip_every)},
    {.name = "corrupt-every", .letter = 'C', .long_only = 1, .type = WORKLOAD_LONG,
     .offset = FIELD(corrupt_every)},
    {.name = "timeout", .letter = 'T', .long_only = 1, .type = WORKLOAD_DOUBLE,
     .offset = FIELD(timeout)},
    {.name = NULL},
};
#undef FIELD

static const struct workload_probe probe = {
    "fabreg_streams",
    "usage: %s [-s size] [-w window] [-n count] [-p pairs|cross|fanin] [-k fanin]\n"
    "          [--skip-every N] [--corrupt-every N] [--timeout seconds]\n",
    option_table,
};

struct header {
    uint64_t seq;
    uint32_t stream;
    uint32_t pad;
    uint64_t checksum;
};

/* Per-stream figures, reduced to rank 0 with MPI_SUM (only the receiver fills a row). */
struct figures {
    double sent, received, missed, corrupted, duplicate, seconds, bytes, timed_out;
};
#define NFIG 8

static uint64_t payload_checksum(const unsigned char *p, long n, uint64_t seq, uint32_t stream)
{
    uint64_t h = 1469598103934665603ULL ^ (seq * 0x9E3779B97F4A7C15ULL) ^ stream;
    long words = n / 8, i;
    for (i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        h = (h ^ w) * 1099511628211ULL;
    }
    for (i = words * 8; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* The streams of this placement: tx[i] -> rx[i]; returns how many. */
static int build_streams(const struct options *o, int nranks, int *tx, int *rx)
{
    int n = 0, i, g;
    if (o->placement == PAIRS) {
        for (i = 0; i + 1 < nranks; i += 2) { tx[n] = i; rx[n] = i + 1; n++; }
    } else if (o->placement == CROSS) {
        for (i = 0; i < nranks / 2; i++) { tx[n] = i; rx[n] = i + nranks / 2; n++; }
    } else {
        for (g = 0; (g + 1) * (o->fanin + 1) <= nranks; g++)
            for (i = 1; i <= o->fanin; i++) {
                tx[n] = g * (o->fanin + 1) + i; rx[n] = g * (o->fanin + 1); n++;
            }
    }
    return n;
}

static void transmit(const struct options *o, int stream, int dest, struct figures *f)
{
    int w = o->window, k;
    unsigned char **buf = workload_alloc(w, sizeof(*buf));
    MPI_Request *req = workload_alloc(w, sizeof(*req));
    MPI_Status *stat = workload_alloc(w, sizeof(*stat));
    long seq = 0, sent = 0;
    uint64_t total;
    for (k = 0; k < w; k++) {
        long i;
        buf[k] = workload_alloc(1, o->size);
        for (i = 0; i < o->size; i++)
            buf[k][i] = (unsigned char)((i * 131 + k * 17 + stream * 7) & 0xff);
    }
    while (seq < o->count) {
        int posted = 0;
        for (k = 0; k < w && seq < o->count; k++, seq++) {
            struct header h;
            if (o->skip_every > 0 && (seq + 1) % o->skip_every == 0)
                continue;
            h.seq = (uint64_t)seq; h.stream = (uint32_t)stream; h.pad = 0;
            h.checksum = payload_checksum(buf[k] + HEADER_BYTES, o->size - HEADER_BYTES,
                                          h.seq, h.stream);
            memcpy(buf[k], &h, sizeof(h));
            if (o->corrupt_every > 0 && (seq + 1) % o->corrupt_every == 0)
                buf[k][o->size - 1] ^= 0x5a;  /* after the checksum: the receiver must notice */
            MPI_Isend(buf[k], (int)o->size, MPI_BYTE, dest, TAG_DATA, MPI_COMM_WORLD,
                      &req[posted++]);
            sent++;
        }
        MPI_Waitall(posted, req, stat);
        if (o->corrupt_every > 0)  /* undo the flip so the slot is clean for reuse */
            for (k = 0; k < w; k++) {
                long i = o->size - 1;
                buf[k][i] = (unsigned char)((i * 131 + k * 17 + stream * 7) & 0xff);
            }
    }
    total = (uint64_t)sent;
    MPI_Send(&total, 1, MPI_UINT64_T, dest, TAG_END, MPI_COMM_WORLD);
    f->sent = (double)sent;
    for (k = 0; k < w; k++) free(buf[k]);
    free(buf); free(req); free(stat);
}

/* State of one stream at its receiver. */
struct rx_stream {
    int id, src, done;
    unsigned char *seen;  /* one flag per sequence number */
    struct figures *f;
    double t_last;
};

static void account(const struct options *o, struct rx_stream *s, const unsigned char *msg,
                    int nbytes, double t0)
{
    struct header h;
    if (nbytes < HEADER_BYTES || nbytes != o->size) { s->f->corrupted++; return; }
    memcpy(&h, msg, sizeof(h));
    s->f->bytes += nbytes;
    s->t_last = MPI_Wtime() - t0;
    if (h.stream != (uint32_t)s->id || h.seq >= (uint64_t)o->count ||
        h.checksum != payload_checksum(msg + HEADER_BYTES, nbytes - HEADER_BYTES, h.seq,
                                       h.stream)) {
        s->f->corrupted++;
        return;
    }
    if (s->seen[h.seq]) { s->f->duplicate++; return; }
    s->seen[h.seq] = 1;
    s->f->received++;
}

static void receive(const struct options *o, struct rx_stream *st, int nst, double t0)
{
    int w = o->window, nreq = nst * w, i, active = nst;
    unsigned char **buf = workload_alloc(nreq, sizeof(*buf));
    MPI_Request *req = workload_alloc(nreq, sizeof(*req));
    double idle_since = MPI_Wtime();
    for (i = 0; i < nreq; i++) {
        buf[i] = workload_alloc(1, o->size);
        MPI_Irecv(buf[i], (int)o->size, MPI_BYTE, st[i / w].src, MPI_ANY_TAG, MPI_COMM_WORLD,
                  &req[i]);
    }
    while (active > 0) {
        int idx, flag, nbytes;
        MPI_Status status;
        MPI_Testany(nreq, req, &idx, &flag, &status);
        if (!flag || idx == MPI_UNDEFINED) {
            if (MPI_Wtime() - idle_since > o->timeout) {
                for (i = 0; i < nst; i++)
                    if (!st[i].done) { st[i].f->timed_out = 1; st[i].done = 1; }
                break;
            }
            continue;
        }
        idle_since = MPI_Wtime();
        {
            struct rx_stream *s = &st[idx / w];
            if (status.MPI_TAG == TAG_END) {
                int j;
                /* Receives already matched to data complete normally; the rest are cancelled. */
                for (j = (idx / w) * w; j < (idx / w + 1) * w; j++) {
                    int cancelled;
                    MPI_Status st2;
                    if (j == idx || req[j] == MPI_REQUEST_NULL) continue;
                    MPI_Cancel(&req[j]);
                    MPI_Wait(&req[j], &st2);
                    MPI_Test_cancelled(&st2, &cancelled);
                    if (!cancelled) {
                        MPI_Get_count(&st2, MPI_BYTE, &nbytes);
                        account(o, s, buf[j], nbytes, t0);
                    }
                }
                s->done = 1;
                active--;
                continue;
            }
            MPI_Get_count(&status, MPI_BYTE, &nbytes);
            account(o, s, buf[idx], nbytes, t0);
            MPI_Irecv(buf[idx], (int)o->size, MPI_BYTE, s->src, MPI_ANY_TAG, MPI_COMM_WORLD,
                      &req[idx]);
        }
    }
    for (i = 0; i < nst; i++) {
        struct figures *f = st[i].f;
        /* Sequence numbers 0..count-1 that never arrived at all (a corrupted
         * message stands for one that did arrive). */
        f->missed = (double)o->count - f->received - f->corrupted;
        if (f->missed < 0) f->missed = 0;
        f->seconds = st[i].t_last;
    }
    for (i = 0; i < nreq; i++) free(buf[i]);
    free(buf); free(req);
}

int main(int argc, char **argv)
{
    struct options o = {.size = 65536, .window = 64, .count = 1000, .placement = PAIRS,
                        .fanin = 2, .skip_every = 0, .corrupt_every = 0, .timeout = 60.0};
    struct workload_run run;
    int rank, nranks, nst, i, mine = 0, namelen;
    int *tx, *rx;
    struct figures *fig, *all;
    char name[MPI_MAX_PROCESSOR_NAME], *names = NULL;
    double t0;

    workload_start(&run, &probe, &o, &argc, &argv);
    rank = run.rank;
    nranks = run.nranks;
    if (o.size < HEADER_BYTES)
        workload_refuse(&run, "size must be at least %d bytes (the header)", HEADER_BYTES);
    if (o.window < 1 || o.count < 1 || o.fanin < 1 || o.timeout <= 0)
        workload_refuse(&run, "window, count, fanin and timeout must be positive");
    tx = workload_alloc(nranks, sizeof(int));
    rx = workload_alloc(nranks, sizeof(int));
    nst = build_streams(&o, nranks, tx, rx);
    if (nst == 0)
        workload_refuse(&run, "placement %s needs at least %d ranks, got %d",
                        placements[o.placement], o.placement == FANIN ? o.fanin + 1 : 2, nranks);
    fig = workload_alloc(nst, sizeof(*fig));
    all = workload_alloc(nst, sizeof(*all));
    memset(name, 0, sizeof(name));
    MPI_Get_processor_name(name, &namelen);
    if (rank == 0) names = workload_alloc(nranks, MPI_MAX_PROCESSOR_NAME);
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
               0, MPI_COMM_WORLD);

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (i = 0; i < nst; i++)
        if (tx[i] == rank) transmit(&o, i, rx[i], &fig[i]);
    for (i = 0; i < nst; i++)
        if (rx[i] == rank) mine++;
    if (mine) {
        struct rx_stream *st = workload_alloc(mine, sizeof(*st));
        int j = 0;
        for (i = 0; i < nst; i++)
            if (rx[i] == rank) {
                st[j].id = i; st[j].src = tx[i];
                st[j].seen = workload_alloc(o.count, 1); st[j].f = &fig[i];
                j++;
            }
        receive(&o, st, mine, t0);
        for (j = 0; j < mine; j++)
            if (st[j].f->timed_out) {
                /* A transmitter may be blocked on this receiver: no clean way on. */
                fprintf(stderr, "fabreg_streams: stream %d (rank %d -> %d): no message for %g s "
                        "after %.0f received; aborting\n", st[j].id, st[j].src, rank, o.timeout,
                        st[j].f->received);
                fflush(stderr);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        for (j = 0; j < mine; j++) free(st[j].seen);
        free(st);
    }
    MPI_Reduce(fig, all, nst * NFIG, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);

    if (rank == 0) {
        printf("# fabreg_streams v1 placement=%s size=%ld window=%d count=%ld ranks=%d streams=%d",
               placements[o.placement], o.size, o.window, o.count, nranks, nst);
        if (o.placement == FANIN) printf(" fanin=%d", o.fanin);
        printf("\n# stream tx rx tx_host rx_host sent received missed corrupted duplicate "
               "rate_gbps loss_rate\n");
        for (i = 0; i < nst; i++) {
            struct figures *f = &all[i];
            double rate = f->seconds > 0 ? f->bytes * 8.0 / f->seconds / 1e9 : 0.0;
            double loss = o.count > 0 ? f->missed / (double)o.count : 0.0;
            printf("%d %d %d %s %s %.0f %.0f %.0f %.0f %.0f %.6f %.6g\n", i, tx[i], rx[i],
                   names + (size_t)tx[i] * MPI_MAX_PROCESSOR_NAME,
                   names + (size_t)rx[i] * MPI_MAX_PROCESSOR_NAME, f->sent, f->received,
                   f->missed, f->corrupted, f->duplicate, rate, loss);
        }
        printf("# end fabreg_streams status=ok\n");
        fflush(stdout);
        free(names);
    }
    free(fig); free(all); free(tx); free(rx);
    MPI_Finalize();
    return 0;
}
