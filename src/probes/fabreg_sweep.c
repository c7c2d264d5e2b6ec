/*
 * fabreg_sweep: rounds of concurrent node pairs, to find a bad node or a bad link.
 *
 * One rank per node. Every round is a set of directed pairs in which each rank
 * sends to at most one peer and receives from at most one, all at once:
 *
 *   shifts  round r = 1..n-1: rank i -> rank (i + r) mod n (ring shift; together
 *           the rounds measure every ordered pair, as mpiGraph does); round n/2
 *           is the bisection (every rank of one half with its twin in the other)
 *   xor     round k = 0..ceil(log2 n)-1: rank i <-> rank i XOR 2^k (recursive
 *           halving: each rank meets log2 n partners in log2 n rounds)
 *   pairs   n-1 rounds (n odd: n) of disjoint pairs exchanging both ways (round robin,
 *           circle method): every pair once, and every round loads every rank alike (a
 *           ring shift's round n/2 pairs ranks both ways, the others send to one rank and
 *           receive from another: over TCP the two measured differently, 30 % apart)
 *
 * -R limits the rounds (the first R of the pattern). Per directed pair a -> b:
 * bandwidth measured at b (bytes received / time since the round's barrier,
 * best of the repeats, which pass over all rounds in turn) and latency measured at a (median of ping-pong round
 * trips a -> b -> a, halved: the best one is judged, the median shown). Before the rounds every rank measures controls of
 * its own host that no network path carries: TCP over loopback (bandwidth and
 * latency) and memory copy bandwidth, so a node slow in every pair can be told
 * apart from a host that is slow at everything. Rank 0 prints one block (see
 * docs/isolation.md):
 *
 *   # fabreg_sweep v1 pattern=shifts ranks=4 rounds=3 size=1048576 count=8 ...
 *   # round pattern node_a node_b rank_a rank_b bw_mbs lat_us lat_p50_us
 *   0 loopback node1 node1 0 0 2345.6 12.3 nan
 *   0 memory node1 node1 0 0 8123.4 nan nan
 *   1 shift node1 node2 0 1 910.2 45.6 51.2
 *   # end fabreg_sweep status=ok pairs=12 seconds=3.2
 */
#include "probe_workload.h"
#include "probe_samples.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TAG_DATA 11
#define TAG_PING 12
#define TAG_PONG 13
#define NVAL 3  /* per rank and round: bandwidth in, best latency out, median latency out */

enum pattern { SHIFTS, XOR, PAIRS };
static const char *const patterns[] = {"shifts", "xor", "pairs", NULL};
/* the pattern column of a pair's row */
static const char *const row_kind[] = {"shift", "xor", "pair"};

struct options {
    long size;
    long count;
    int window;
    int repeats;
    long lat_size;
    int lat_iterations;
    int pattern;  /* enum pattern */
    int max_rounds;
    int no_controls;
};

#define FIELD(name) offsetof(struct options, name)
static const struct workload_option option_table[] = {
    {.name = "size", .letter = 's', .type = WORKLOAD_LONG, .offset = FIELD(size)},
    {.name = "count", .letter = 'n', .type = WORKLOAD_LONG, .offset = FIELD(count)},
    {.name = "window", .letter = 'w', .type = WORKLOAD_INT, .offset = FIELD(window)},
    {.name = "repeats", .letter = 'r', .type = WORKLOAD_INT, .offset = FIELD(repeats)},
    {.name = "lat-size", .letter = 'l', .type = WORKLOAD_LONG, .offset = FIELD(lat_size)},
    {.name = "lat-iterations", .letter = 'i', .type = WORKLOAD_INT,
     .offset = FIELD(lat_iterations)},
    {.name = "pattern", .letter = 'p', .type = WORKLOAD_CHOICE, .offset = FIELD(pattern),
     .choices = patterns, .invalid = "unknown pattern '%s' (shifts, xor, pairs)"},
    {.name = "rounds", .letter = 'R', .type = WORKLOAD_INT, .offset = FIELD(max_rounds)},
    {.name = "no-controls", .letter = 'C', .long_only = 1, .type = WORKLOAD_FLAG,
     .offset = FIELD(no_controls)},
    {.name = NULL},
};
#undef FIELD

static const struct workload_probe probe = {
    "fabreg_sweep",
    "usage: %s [-s size] [-n count] [-w window] [-r repeats] [-l lat-size]\n"
    "          [-i lat-iterations] [-p shifts|xor|pairs] [-R rounds] [--no-controls]\n",
    option_table,
};

/*
 * MPI_Waitany that gives the CPU away while nothing is done: where ranks share cores (an
 * oversubscribed or emulated cluster), a spinning rank would otherwise hold the core its
 * peer needs for a whole time slice, and a pair would measure the scheduler, not the path.
 * On a node of its own, sched_yield returns at once.
 */
static void wait_any(int count, MPI_Request *req, int *idx)
{
    int flag = 0;
    for (;;) {
        MPI_Testany(count, req, idx, &flag, MPI_STATUS_IGNORE);
        if (flag) return;
        sched_yield();
    }
}

/* MPI_Barrier that yields while it waits (an idle rank must not spin on a shared core). */
static void barrier(void)
{
    MPI_Request req;
    int idx;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    wait_any(1, &req, &idx);
}

/* Best (minimum) and median of n samples (sorts them). */
static void best_and_median(double *samples, long n, double out[2])
{
    struct samples_summary s;
    samples_summarize(samples, n, &s);
    out[0] = s.min;
    out[1] = s.p50;
}

/* Rounds of the pattern for n ranks. */
static int pattern_rounds(int pattern, int n)
{
    int k = 0;
    if (pattern == SHIFTS)
        return n - 1;
    if (pattern == PAIRS)
        return n % 2 ? n : n - 1;
    while ((1 << k) < n) k++;
    return k;
}

/*
 * Round-robin partner (circle method): with m = n rounded up to even, rank m-1 stays and the
 * others turn; in round r, r meets m-1 and r+k meets r-k (mod m-1). -1: idle (odd n).
 */
static int tournament_partner(int round, int rank, int n)
{
    int m = n % 2 ? n + 1 : n, partner;
    if (rank == m - 1)
        partner = round;
    else if (rank == round)
        partner = m - 1;
    else
        partner = ((2 * round - rank) % (m - 1) + (m - 1)) % (m - 1);
    return partner >= n ? -1 : partner;
}

/* Peer this rank sends to (dst) and receives from (src) in round `round`; -1 = idle. */
static void round_peers(int pattern, int round, int rank, int n, int *dst, int *src)
{
    if (pattern == SHIFTS) {
        *dst = (rank + round) % n;
        *src = (rank - round + n) % n;
        return;
    }
    if (pattern == PAIRS) {
        *dst = *src = tournament_partner(round, rank, n);
        return;
    }
    *dst = rank ^ (1 << round);
    if (*dst >= n) *dst = -1;
    *src = *dst;
}

/*
 * Bytes/s of `count` messages received from src while `count` go to dst, `window` of each in
 * flight. The two directions complete independently (a slot is reposted as soon as it is
 * done), so a slow incoming pair does not slow this rank's outgoing pair: without that, a
 * ring shift runs every pair of the ring at the speed of its slowest link.
 */
static double exchange(const struct options *o, int dst, int src, unsigned char *sbuf,
                       unsigned char *rbuf, MPI_Request *req)
{
    long posted_recv = 0, posted_send = 0, left = 0;
    long got = 0;
    double t0, t_recv = 0;
    int k, w = o->window;
    for (k = 0; k < 2 * w; k++) req[k] = MPI_REQUEST_NULL;
    barrier();
    t0 = MPI_Wtime();
    for (k = 0; k < w; k++) {
        if (src >= 0 && posted_recv < o->count) {
            MPI_Irecv(rbuf + (size_t)k * o->size, (int)o->size, MPI_BYTE, src, TAG_DATA,
                      MPI_COMM_WORLD, &req[k]);
            posted_recv++; left++;
        }
        if (dst >= 0 && posted_send < o->count) {
            MPI_Isend(sbuf, (int)o->size, MPI_BYTE, dst, TAG_DATA, MPI_COMM_WORLD, &req[w + k]);
            posted_send++; left++;
        }
    }
    while (left > 0) {
        int idx;
        wait_any(2 * w, req, &idx);
        if (idx == MPI_UNDEFINED) break;
        left--;
        if (idx < w) {
            if (++got == o->count) t_recv = MPI_Wtime();
            if (posted_recv < o->count) {
                MPI_Irecv(rbuf + (size_t)idx * o->size, (int)o->size, MPI_BYTE, src, TAG_DATA,
                          MPI_COMM_WORLD, &req[idx]);
                posted_recv++; left++;
            }
        } else if (posted_send < o->count) {
            MPI_Isend(sbuf, (int)o->size, MPI_BYTE, dst, TAG_DATA, MPI_COMM_WORLD, &req[idx]);
            posted_send++; left++;
        }
    }
    return src >= 0 && t_recv > t0 ? (double)o->size * o->count / (t_recv - t0) : NAN;
}

/*
 * Best and median one-way latency (us) of ping-pongs to dst, while answering src's pings as
 * they arrive: a rank never waits for its own pong before answering, so each round trip
 * depends on the pair's path only, not on the other pairs of the round. The best one is the
 * path's: waiting for a CPU (other work, or ranks spinning on a shared host) only adds time.
 */
static void pingpong(const struct options *o, int dst, int src, char *buf, double *samples,
                     double out[2])
{
    char *ping = buf, *pong = buf + o->lat_size, *theirs = buf + 2 * o->lat_size;
    int done = dst < 0 ? o->lat_iterations : 0, answered = src < 0 ? o->lat_iterations : 0;
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  /* their ping, our pong */
    double t0 = 0;
    barrier();
    if (answered < o->lat_iterations)
        MPI_Irecv(theirs, (int)o->lat_size, MPI_BYTE, src, TAG_PING, MPI_COMM_WORLD, &req[0]);
    while (done < o->lat_iterations || answered < o->lat_iterations) {
        int idx;
        if (done < o->lat_iterations && req[1] == MPI_REQUEST_NULL) {
            MPI_Irecv(pong, (int)o->lat_size, MPI_BYTE, dst, TAG_PONG, MPI_COMM_WORLD, &req[1]);
            t0 = MPI_Wtime();
            MPI_Send(ping, (int)o->lat_size, MPI_BYTE, dst, TAG_PING, MPI_COMM_WORLD);
        }
        wait_any(2, req, &idx);
        if (idx == 1) {
            samples[done++] = (MPI_Wtime() - t0) * 1e6 / 2.0;
        } else if (idx == 0) {
            MPI_Send(theirs, (int)o->lat_size, MPI_BYTE, src, TAG_PONG, MPI_COMM_WORLD);
            if (++answered < o->lat_iterations)
                MPI_Irecv(theirs, (int)o->lat_size, MPI_BYTE, src, TAG_PING, MPI_COMM_WORLD,
                          &req[0]);
        }
    }
    out[0] = out[1] = NAN;
    if (dst >= 0) best_and_median(samples, o->lat_iterations, out);
}

/*
 * Ping-pong between two ranks that are each other's peer (recursive halving, the bisection
 * shift): one pings while the other answers, then the roles swap. Both pinging at once would
 * queue each answer behind the answerer's own ping on the one connection: a round trip of
 * about twice the path's (seen on minicluster: 20 us against 9 in the other rounds).
 */
static void pingpong_pair(const struct options *o, int peer, int rank, char *buf,
                          double *samples, double out[2])
{
    int phase, it;
    out[0] = out[1] = NAN;
    barrier();
    for (phase = 0; phase < 2; phase++) {
        int pinging = (rank < peer) == (phase == 0);
        for (it = 0; it < o->lat_iterations; it++) {
            if (pinging) {
                double t0 = MPI_Wtime();
                MPI_Request req;
                int idx;
                MPI_Irecv(buf + o->lat_size, (int)o->lat_size, MPI_BYTE, peer, TAG_PONG,
                          MPI_COMM_WORLD, &req);
                MPI_Send(buf, (int)o->lat_size, MPI_BYTE, peer, TAG_PING, MPI_COMM_WORLD);
                wait_any(1, &req, &idx);
                samples[it] = (MPI_Wtime() - t0) * 1e6 / 2.0;
            } else {
                MPI_Request req;
                int idx;
                MPI_Irecv(buf + 2 * o->lat_size, (int)o->lat_size, MPI_BYTE, peer, TAG_PING,
                          MPI_COMM_WORLD, &req);
                wait_any(1, &req, &idx);
                MPI_Send(buf + 2 * o->lat_size, (int)o->lat_size, MPI_BYTE, peer, TAG_PONG,
                         MPI_COMM_WORLD);
            }
        }
        if (pinging) best_and_median(samples, o->lat_iterations, out);
    }
}

/* --- controls: this host alone, no network path ------------------------------- */

static int loopback_pair(int fds[2])
{
    struct sockaddr_in addr;
    socklen_t len = sizeof(addr);
    int one = 1, lst = socket(AF_INET, SOCK_STREAM, 0);
    if (lst < 0) return -1;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lst, (struct sockaddr *)&addr, sizeof(addr)) || listen(lst, 1) ||
        getsockname(lst, (struct sockaddr *)&addr, &len)) {
        close(lst);
        return -1;
    }
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&addr, sizeof(addr))) {
        close(lst);
        return -1;
    }
    fds[1] = accept(lst, NULL, NULL);
    close(lst);
    if (fds[1] < 0) return -1;
    setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fds[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    return 0;
}

/* Move `total` bytes from fds[0] to fds[1] in one thread; MB/s, NAN on error. */
static double loopback_bandwidth(int fds[2], char *buf, long chunk, long total)
{
    long sent = 0, got = 0;
    double t0 = MPI_Wtime();
    while (got < total) {
        struct pollfd p[2] = {{fds[0], POLLOUT, 0}, {fds[1], POLLIN, 0}};
        if (poll(p, 2, 5000) <= 0) return NAN;
        if (sent < total && (p[0].revents & POLLOUT)) {
            ssize_t w = write(fds[0], buf, (size_t)(total - sent < chunk ? total - sent : chunk));
            if (w > 0) sent += w;
            else if (w < 0 && errno != EAGAIN) return NAN;
        }
        if (p[1].revents & POLLIN) {
            ssize_t r = read(fds[1], buf + chunk, (size_t)chunk);
            if (r > 0) got += r;
            else if (r == 0 || errno != EAGAIN) return NAN;
        }
    }
    return (double)total / (MPI_Wtime() - t0) / 1e6;
}

static int read_exactly(int fd, char *buf, long n)
{
    long got = 0;
    while (got < n) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t r;
        if (poll(&p, 1, 5000) <= 0) return -1;
        r = read(fd, buf + got, (size_t)(n - got));
        if (r > 0) got += r;
        else if (r == 0 || errno != EAGAIN) return -1;
    }
    return 0;
}

/* Best one-way latency (us) of small messages bounced between the two loopback sockets. */
static double loopback_latency(int fds[2], char *buf, long size, int iterations,
                               double *samples)
{
    int it;
    for (it = 0; it < iterations; it++) {
        double t0 = MPI_Wtime();
        if (write(fds[0], buf, (size_t)size) != size || read_exactly(fds[1], buf, size) ||
            write(fds[1], buf, (size_t)size) != size || read_exactly(fds[0], buf, size))
            return NAN;
        samples[it] = (MPI_Wtime() - t0) * 1e6 / 2.0;
    }
    {
        double out[2];
        best_and_median(samples, iterations, out);
        return out[0];
    }
}

static double memory_bandwidth(long size, int repeats)
{
    char *a = workload_alloc(1, (size_t)size), *b = workload_alloc(1, (size_t)size);
    double best = 0;
    int k;
    memset(a, 1, (size_t)size);
    for (k = 0; k < repeats; k++) {
        double t0 = MPI_Wtime(), t;
        memcpy(b, a, (size_t)size);
        t = MPI_Wtime() - t0;
        a[k % size] = b[(k + 1) % size];  /* keep the copy observable */
        if (t > 0 && size / t / 1e6 > best) best = size / t / 1e6;
    }
    free(a);
    free(b);
    return best;
}

/* [loopback bw, loopback lat, memory bw] of this host. */
static void controls(const struct options *o, double out[3], double *samples)
{
    int fds[2];
    long chunk = 65536;
    char *buf = workload_alloc(2, (size_t)chunk);
    int k;
    out[0] = out[1] = NAN;
    if (loopback_pair(fds) == 0) {
        out[0] = 0;
        for (k = 0; k < o->repeats; k++) {
            double bw = loopback_bandwidth(fds, buf, chunk, o->size * o->count);
            if (!(bw <= out[0])) out[0] = bw;
        }
        out[1] = loopback_latency(fds, buf, o->lat_size > chunk ? chunk : o->lat_size,
                                  o->lat_iterations, samples);
        close(fds[0]);
        close(fds[1]);
    }
    out[2] = memory_bandwidth(o->size * 8, 3 * o->repeats);
    free(buf);
}

int main(int argc, char **argv)
{
    struct options o = {.size = 1 << 20, .count = 8, .window = 4, .repeats = 3, .lat_size = 8,
                        .lat_iterations = 200, .pattern = SHIFTS, .max_rounds = 0,
                        .no_controls = 0};
    struct workload_run run;
    int rank, n, rounds, r, k, namelen, pairs = 0;
    char name[MPI_MAX_PROCESSOR_NAME], *names = NULL;
    unsigned char *sbuf, *rbuf;
    char *lbuf;
    double *samples, *mine, *all = NULL, ctl[3], *allctl = NULL, t_start;
    MPI_Request *req;

    workload_start(&run, &probe, &o, &argc, &argv);
    rank = run.rank;
    n = run.nranks;
    if (n < 2)
        workload_refuse(&run, "needs at least 2 ranks (one per node), got %d", n);
    if (o.size < 1 || o.count < 1 || o.window < 1 || o.repeats < 1 || o.lat_size < 1 ||
        o.lat_iterations < 1 || o.max_rounds < 0)
        workload_refuse(&run, "size, count, window, repeats, lat-size and lat-iterations must "
                        "be positive, rounds at least 0");
    rounds = pattern_rounds(o.pattern, n);
    if (o.max_rounds > 0 && o.max_rounds < rounds) rounds = o.max_rounds;

    memset(name, 0, sizeof(name));
    MPI_Get_processor_name(name, &namelen);
    if (rank == 0) names = workload_alloc(n, MPI_MAX_PROCESSOR_NAME);
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
               0, MPI_COMM_WORLD);

    sbuf = workload_alloc(1, (size_t)o.size);
    rbuf = workload_alloc((size_t)o.window, (size_t)o.size);
    lbuf = workload_alloc(3, (size_t)o.lat_size);
    req = workload_alloc(2 * (size_t)o.window, sizeof(*req));
    samples = workload_alloc((size_t)o.lat_iterations, sizeof(double));
    memset(sbuf, 0xa5, (size_t)o.size);
    /* per round: [bw of the pair src -> me, best and median latency of the pair me -> dst] */
    mine = workload_alloc(NVAL * (size_t)(rounds ? rounds : 1), sizeof(double));
    if (rank == 0) {
        all = workload_alloc(NVAL * (size_t)n * (rounds ? rounds : 1), sizeof(double));
        allctl = workload_alloc(3 * (size_t)n, sizeof(double));
    }

    t_start = MPI_Wtime();
    ctl[0] = ctl[1] = ctl[2] = NAN;
    if (!o.no_controls) controls(&o, ctl, samples);
    MPI_Gather(ctl, 3, MPI_DOUBLE, allctl, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);

    /*
     * Repeats are the outer loop: every round is measured once per pass, so a burst of other
     * work on the host (minutes-long on a shared machine) slows one pass of every round, not
     * every repeat of one round, and the best of the repeats leaves it out.
     */
    for (r = 0; r < rounds; r++) mine[NVAL * r] = NAN;
    for (k = 0; k < o.repeats; k++)
        for (r = 0; r < rounds; r++) {
            int dst, src;
            double bw;
            round_peers(o.pattern, o.pattern == SHIFTS ? r + 1 : r, rank, n, &dst, &src);
            bw = exchange(&o, dst, src, sbuf, rbuf, req) / 1e6;
            if (!isnan(bw) && (isnan(mine[NVAL * r]) || bw > mine[NVAL * r]))
                mine[NVAL * r] = bw;
        }
    for (r = 0; r < rounds; r++) {
        int dst, src;
        round_peers(o.pattern, o.pattern == SHIFTS ? r + 1 : r, rank, n, &dst, &src);
        if (dst >= 0 && dst == src)
            pingpong_pair(&o, dst, rank, lbuf, samples, &mine[NVAL * r + 1]);
        else
            pingpong(&o, dst, src, lbuf, samples, &mine[NVAL * r + 1]);
    }
    MPI_Gather(mine, NVAL * rounds, MPI_DOUBLE, all, NVAL * rounds, MPI_DOUBLE, 0,
               MPI_COMM_WORLD);

    if (rank == 0) {
        int i;
        printf("# fabreg_sweep v1 pattern=%s ranks=%d rounds=%d size=%ld count=%ld window=%d "
               "repeats=%d lat_size=%ld lat_iterations=%d\n", patterns[o.pattern], n, rounds,
               o.size, o.count, o.window, o.repeats, o.lat_size, o.lat_iterations);
        printf("# round pattern node_a node_b rank_a rank_b bw_mbs lat_us lat_p50_us\n");
        for (i = 0; i < n && !o.no_controls; i++) {
            const char *h = names + (size_t)i * MPI_MAX_PROCESSOR_NAME;
            printf("0 loopback %s %s %d %d %.3f %.3f nan\n", h, h, i, i, allctl[3 * i],
                   allctl[3 * i + 1]);
            printf("0 memory %s %s %d %d %.3f nan nan\n", h, h, i, i, allctl[3 * i + 2]);
        }
        for (r = 0; r < rounds; r++)
            for (i = 0; i < n; i++) {
                int dst, src, dsrc, ddst;
                int step = o.pattern == SHIFTS ? r + 1 : r;
                round_peers(o.pattern, step, i, n, &dst, &src);
                if (dst < 0) continue;
                /* bandwidth of i -> dst was measured at dst (as its incoming pair) */
                round_peers(o.pattern, step, dst, n, &ddst, &dsrc);
                (void)ddst;
                printf("%d %s %s %s %d %d %.3f %.3f %.3f\n", r + 1,
                       row_kind[o.pattern],
                       names + (size_t)i * MPI_MAX_PROCESSOR_NAME,
                       names + (size_t)dst * MPI_MAX_PROCESSOR_NAME, i, dst,
                       all[(size_t)dst * NVAL * rounds + NVAL * r],
                       all[(size_t)i * NVAL * rounds + NVAL * r + 1],
                       all[(size_t)i * NVAL * rounds + NVAL * r + 2]);
                pairs++;
            }
        printf("# end fabreg_sweep status=ok pairs=%d seconds=%.3f\n", pairs,
               MPI_Wtime() - t_start);
        fflush(stdout);
        free(names);
        free(all);
        free(allctl);
    }
    free(sbuf); free(rbuf); free(lbuf); free(req); free(samples); free(mine);
    MPI_Finalize();
    return 0;
}
