/* server_conn.c — the connection guard of `rocmforge serve`: a record per open connection
 * (libmicrohttpd's connection notifications), the watchdog thread that enforces --read-timeout
 * and closes half-closed idle connections, the --max-buffered byte count, and the lingering
 * thread that drains a client still uploading after an early answer before the socket closes. */
#define _GNU_SOURCE
#include "server_conn.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define GUARD_TICK_MS 100
/* Lingering close, as nginx's lingering_time / lingering_timeout: drain at most this long in
 * all, give up after this long without a byte, and never more than max(64 MiB, 4 x --max-body). */
#define LINGER_TOTAL_MS 10000
#define LINGER_QUIET_MS 2000
#define LINGER_MIN_BYTES (64LL << 20)
#define RESERVE_READ_MS 1000

struct srv_conn {
    srv_conn *prev, *next;
    int fd;
    atomic_int state;      /* srv_conn_state */
    atomic_llong t_ms;     /* when the state began, or the body's last piece */
    atomic_bool linger;
    bool reserve;
    int rdhup;             /* watchdog: consecutive ticks idle with the client's FIN seen */
};

typedef struct lingerer {
    struct lingerer *next;
    int fd;
    long long t_start, t_last;
    long long left;        /* bytes still to drain */
} lingerer;

struct srv_guard {
    long long read_ms;
    int max_conns;
    long long linger_bytes;
    int64_t max_buffered;
    atomic_llong buffered;
    pthread_mutex_t mu;    /* the connection list */
    srv_conn *list;
    int n_open;
    pthread_mutex_t lmu;   /* the lingering list */
    lingerer *lingering;
    atomic_int stop;
    pthread_t watchdog, linger;
    bool watchdog_started, linger_started;
};

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- connection records ------------------------------------------------------------------- */

/* Hands fd's socket to the lingering thread: a duplicate keeps it open after libmicrohttpd
 * closes its descriptor, so the kernel does not answer the client's unread bytes with a reset
 * (which would destroy the answer still in flight). */
static void linger_start(srv_guard *g, int fd) {
    lingerer *l = calloc(1, sizeof *l);
    int d = l ? dup(fd) : -1;
    if (d < 0) {
        free(l);
        return;
    }
    shutdown(d, SHUT_WR); /* libmicrohttpd did so already; harmless twice */
    l->fd = d;
    l->t_start = l->t_last = now_ms();
    l->left = g->linger_bytes;
    pthread_mutex_lock(&g->lmu);
    l->next = g->lingering;
    g->lingering = l;
    pthread_mutex_unlock(&g->lmu);
}

void srv_guard_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode code) {
    srv_guard *g = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_conn *k = calloc(1, sizeof *k);
        if (!k) return; /* unguarded: libmicrohttpd's --timeout still applies */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        k->fd = ci ? ci->connect_fd : -1;
        atomic_store(&k->state, SRV_CONN_NEW);
        atomic_store(&k->t_ms, now_ms());
        pthread_mutex_lock(&g->mu);
        k->reserve = g->n_open >= g->max_conns;
        k->next = g->list;
        if (g->list) g->list->prev = k;
        g->list = k;
        g->n_open++;
        pthread_mutex_unlock(&g->mu);
        *socket_context = k;
        return;
    }
    srv_conn *k = *socket_context;
    if (!k) return;
    *socket_context = NULL;
    /* libmicrohttpd closes the descriptor after this returns: unlisted first, under the lock the
     * watchdog holds while it shuts sockets down, so it never touches a reused descriptor */
    pthread_mutex_lock(&g->mu);
    if (k->prev) k->prev->next = k->next;
    else g->list = k->next;
    if (k->next) k->next->prev = k->prev;
    g->n_open--;
    pthread_mutex_unlock(&g->mu);
    if (k->fd >= 0) {
        int unread = 0;
        bool drain = atomic_load(&k->linger);
        if (!drain && ioctl(k->fd, FIONREAD, &unread) == 0 && unread > 0) drain = true;
        if (drain) linger_start(g, k->fd);
    }
    free(k);
}

void *srv_guard_on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)cls;
    (void)uri;
    srv_conn *k = srv_conn_of(c);
    if (k) srv_conn_set_state(k, SRV_CONN_HEADERS);
    return NULL; /* the access handler's *con_cls starts NULL */
}

srv_conn *srv_conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (srv_conn *)ci->socket_context : NULL;
}

void srv_conn_set_state(srv_conn *k, srv_conn_state st) {
    if (!k) return;
    atomic_store(&k->t_ms, now_ms());
    atomic_store(&k->state, (int)st);
}

void srv_conn_touch(srv_conn *k) {
    if (k) atomic_store(&k->t_ms, now_ms());
}

bool srv_conn_reserve(const srv_conn *k) { return k && k->reserve; }

void srv_conn_set_linger(srv_conn *k) {
    if (k) atomic_store(&k->linger, true);
}

bool srv_guard_reserve(srv_guard *g, int64_t n) {
    if (n <= 0) return true;
    long long cur = atomic_load(&g->buffered);
    do {
        if (cur + n > g->max_buffered) return false;
    } while (!atomic_compare_exchange_weak(&g->buffered, &cur, cur + n));
    return true;
}

void srv_guard_release(srv_guard *g, int64_t n) {
    if (n > 0) atomic_fetch_sub(&g->buffered, n);
}

/* ---- the watchdog ------------------------------------------------------------------------- */

/* Bytes the client sent that libmicrohttpd has not read yet: when there are some, the server
 * (a busy HTTP thread), not the client, is the slow one. */
static int unread_bytes(int fd) {
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}

/* One pass: a connection past its read deadline with nothing unread, or idle with the client's
 * FIN seen on two ticks in a row and nothing unread, is shut down; libmicrohttpd then reads
 * end-of-file and closes it. A connection from the reserve has at most 1 s to send its request. */
static void watchdog_pass(srv_guard *g, struct pollfd **pfd, srv_conn ***pk, int *cap) {
    long long t = now_ms();
    pthread_mutex_lock(&g->mu);
    if (g->n_open > *cap) {
        int nc = g->n_open * 2;
        struct pollfd *a = realloc(*pfd, (size_t)nc * sizeof *a);
        if (a) *pfd = a;
        srv_conn **b = realloc(*pk, (size_t)nc * sizeof *b);
        if (b) *pk = b;
        if (a && b) *cap = nc;
    }
    int n = 0;
    for (srv_conn *k = g->list; k; k = k->next) {
        if (k->fd < 0) continue;
        int st = atomic_load(&k->state);
        bool timed = st == SRV_CONN_NEW || st == SRV_CONN_HEADERS || st == SRV_CONN_BODY;
        long long limit = g->read_ms;
        if (k->reserve && (limit <= 0 || limit > RESERVE_READ_MS)) limit = RESERVE_READ_MS;
        if (timed && limit > 0 && t - atomic_load(&k->t_ms) > limit && unread_bytes(k->fd) == 0) {
            shutdown(k->fd, SHUT_RDWR);
            k->fd = -1; /* once */
            continue;
        }
        if ((st == SRV_CONN_IDLE || st == SRV_CONN_NEW) && n < *cap) {
            (*pfd)[n] = (struct pollfd){.fd = k->fd, .events = POLLRDHUP};
            (*pk)[n++] = k;
        } else {
            k->rdhup = 0;
        }
    }
    if (n > 0 && poll(*pfd, (nfds_t)n, 0) > 0) {
        for (int i = 0; i < n; i++) {
            srv_conn *k = (*pk)[i];
            int st = atomic_load(&k->state);
            bool hup = ((*pfd)[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) && (st == SRV_CONN_IDLE || st == SRV_CONN_NEW);
            k->rdhup = hup ? k->rdhup + 1 : 0;
            /* two ticks: libmicrohttpd may be about to read a request that came with the FIN */
            if (k->rdhup >= 2 && unread_bytes(k->fd) == 0) {
                shutdown(k->fd, SHUT_RDWR);
                k->fd = -1;
            }
        }
    } else {
        for (int i = 0; i < n; i++) (*pk)[i]->rdhup = 0;
    }
    pthread_mutex_unlock(&g->mu);
}

static void *watchdog_main(void *arg) {
    srv_guard *g = arg;
    struct pollfd *pfd = NULL;
    srv_conn **pk = NULL;
    int cap = 0;
    while (!atomic_load(&g->stop)) {
        sleep_ms(GUARD_TICK_MS);
        watchdog_pass(g, &pfd, &pk, &cap);
    }
    free(pfd);
    free(pk);
    return NULL;
}

/* ---- lingering close ---------------------------------------------------------------------- */

static void linger_pass(srv_guard *g, char *buf, size_t bufsz) {
    pthread_mutex_lock(&g->lmu);
    lingerer *l = g->lingering;
    g->lingering = NULL;
    pthread_mutex_unlock(&g->lmu);
    int n = 0;
    for (lingerer *x = l; x; x = x->next) n++;
    struct pollfd *pfd = n ? calloc((size_t)n, sizeof *pfd) : NULL;
    if (n && pfd) {
        int i = 0;
        for (lingerer *x = l; x; x = x->next) pfd[i++] = (struct pollfd){.fd = x->fd, .events = POLLIN};
        if (poll(pfd, (nfds_t)n, GUARD_TICK_MS) < 0) memset(pfd, 0, (size_t)n * sizeof *pfd);
    } else {
        sleep_ms(GUARD_TICK_MS);
    }
    long long t = now_ms();
    lingerer *keep = NULL;
    int i = 0;
    for (lingerer *x = l, *next; x; x = next, i++) {
        next = x->next;
        bool done = false;
        if (pfd && pfd[i].revents) {
            for (;;) { /* drain what is there */
                ssize_t k = recv(x->fd, buf, bufsz, MSG_DONTWAIT);
                if (k > 0) {
                    x->left -= k;
                    x->t_last = t;
                    if (x->left <= 0) {
                        done = true;
                        break;
                    }
                    continue;
                }
                if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) done = true;
                break;
            }
        }
        if (!pfd) done = true; /* out of memory: close now */
        if (t - x->t_start > LINGER_TOTAL_MS || t - x->t_last > LINGER_QUIET_MS) done = true;
        if (done) {
            close(x->fd);
            free(x);
        } else {
            x->next = keep;
            keep = x;
        }
    }
    free(pfd);
    if (keep) {
        pthread_mutex_lock(&g->lmu);
        lingerer *tail = keep;
        while (tail->next) tail = tail->next;
        tail->next = g->lingering;
        g->lingering = keep;
        pthread_mutex_unlock(&g->lmu);
    }
}

static void *linger_main(void *arg) {
    srv_guard *g = arg;
    static const size_t bufsz = 1 << 16;
    char *buf = malloc(bufsz);
    while (!atomic_load(&g->stop)) {
        if (buf) linger_pass(g, buf, bufsz);
        else sleep_ms(GUARD_TICK_MS);
    }
    free(buf);
    return NULL;
}

/* ---- start and stop ----------------------------------------------------------------------- */

srv_guard *srv_guard_new(const rf_server_config *cfg) {
    srv_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->read_ms = cfg->read_timeout_s > 0 ? (long long)cfg->read_timeout_s * 1000 : 0;
    g->max_conns = cfg->max_conns > 0 ? cfg->max_conns : 1;
    g->max_buffered = cfg->max_buffered > 0 ? cfg->max_buffered : INT64_MAX / 2;
    g->linger_bytes = cfg->max_body * 4 > LINGER_MIN_BYTES ? cfg->max_body * 4 : LINGER_MIN_BYTES;
    pthread_mutex_init(&g->mu, NULL);
    pthread_mutex_init(&g->lmu, NULL);
    if (pthread_create(&g->watchdog, NULL, watchdog_main, g) == 0) g->watchdog_started = true;
    if (pthread_create(&g->linger, NULL, linger_main, g) == 0) g->linger_started = true;
    if (!g->watchdog_started || !g->linger_started) {
        srv_guard_free(g);
        return NULL;
    }
    return g;
}

void srv_guard_free(srv_guard *g) {
    if (!g) return;
    atomic_store(&g->stop, 1);
    if (g->watchdog_started) pthread_join(g->watchdog, NULL);
    if (g->linger_started) pthread_join(g->linger, NULL);
    for (lingerer *x = g->lingering, *next; x; x = next) {
        next = x->next;
        close(x->fd);
        free(x);
    }
    for (srv_conn *k = g->list, *next; k; k = next) { /* none once the daemon stopped */
        next = k->next;
        free(k);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_mutex_destroy(&g->lmu);
    free(g);
}
