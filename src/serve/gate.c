/*
 * The gate: our own accept loop in front of libmicrohttpd.
 *
 * libmicrohttpd 0.9.75 (Debian 12) only has an idle timeout, which a client
 * resets with one byte per second, and when it is full it closes new
 * sockets at once (the client sees a reset).  The gate owns the listening
 * socket and hands accepted sockets to MHD (MHD_add_connection), so that
 *   - every connection has a deadline: its headers must be complete
 *     header_timeout after it was accepted (or after its previous request
 *     ended), its body within header_timeout + size / SP_GATE_MIN_BODY_RATE
 *     (http.c moves the deadline as the request advances); a connection
 *     past its deadline is shut down (MHD's thread then sees the end of the
 *     stream and closes it);
 *   - connections beyond max_conns, or beyond max_per_ip from one address,
 *     get a short 503 with Retry-After and are closed, instead of a reset;
 *     the socket lingers up to a second, read and discarded, so that the
 *     close does not turn into a reset that destroys the 503 unread.
 * With one thread per connection (MHD's mode here), a slow client only
 * ever holds its own thread, and the caps keep one address from taking all
 * of them, so /health answers others at once.
 *
 * The connection table is guarded by mu.  MHD notifies CLOSED before it
 * closes the socket (thread-per-connection mode), and the shutdown of an
 * expired connection happens under mu while its slot is live, so the gate
 * never shuts a descriptor that was closed and reused.
 */
#include "serve/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define GATE_TICK_MS 100          /* how often deadlines are looked at */
#define GATE_LINGER_MAX 64        /* refused sockets waiting to close */
#define GATE_LINGER_NS 1000000000ull

typedef struct gate_conn {
    int fd;                       /* -1: free slot */
    unsigned char ip[16];         /* the client address (IPv4 in the first 4 bytes) */
    uint64_t deadline;            /* ns (sp_now_ns); 0 = none.  Atomic */
} gate_conn;

typedef struct gate_linger {
    int fd;
    uint64_t until;
} gate_linger;

struct sp_gate {
    sp_gate_opts o;
    sp_metrics *mx;               /* borrowed */
    struct MHD_Daemon *d;
    int lfd;                      /* listening socket; -1 once closed */
    pthread_t th;
    bool started;
    int stop, quiesce;            /* atomic */
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* quiesce handshake */
    gate_conn *conns;             /* (o.max_conns) under mu */
    gate_linger linger[GATE_LINGER_MAX];   /* gate thread only */
    int n_linger;
};

static const char busy_body[] =
    "{\"error\":{\"message\":\"Too many connections; retry later.\",\"type\":\"server_error\","
    "\"param\":null,\"code\":\"too_many_connections\"}}";

/* ----------------------------------------------------------------------------
 * Creation, listening
 * ------------------------------------------------------------------------- */

sp_gate *sp_gate_create(const sp_gate_opts *o, sp_metrics *mx) {
    sp_gate *g = sp_xcalloc(1, sizeof *g);
    g->o = *o;
    g->mx = mx;
    g->lfd = -1;
    g->conns = sp_xcalloc((size_t)o->max_conns, sizeof *g->conns);
    for (int i = 0; i < o->max_conns; i++) g->conns[i].fd = -1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    return g;
}

int sp_gate_listen(sp_gate *g, const struct sockaddr *addr, unsigned len, int *port, sp_err *err) {
    const int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return sp_err_set(err, "%s", strerror(errno));
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, addr, len) || listen(fd, 256)) {
        const int e = errno;
        close(fd);
        return sp_err_set(err, "%s", strerror(e));
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
    g->lfd = fd;
    return 0;
}

/* ----------------------------------------------------------------------------
 * The connection table
 * ------------------------------------------------------------------------- */

static void ip_key(const struct sockaddr_storage *ss, unsigned char out[16]) {
    memset(out, 0, 16);
    if (ss->ss_family == AF_INET) memcpy(out, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    else if (ss->ss_family == AF_INET6) memcpy(out, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
}

/* A free slot for a new connection from ip, or NULL if the total or the
 * per-address cap is reached (caller holds mu). */
static gate_conn *slot_for(sp_gate *g, const unsigned char ip[16]) {
    gate_conn *free_slot = NULL;
    int same = 0;
    for (int i = 0; i < g->o.max_conns; i++) {
        gate_conn *c = &g->conns[i];
        if (c->fd < 0) { if (!free_slot) free_slot = c; continue; }
        if (!memcmp(c->ip, ip, 16)) same++;
    }
    return same >= g->o.max_per_ip ? NULL : free_slot;
}

void sp_gate_notify(void *cls, struct MHD_Connection *c, void **socket_context, int closed) {
    sp_gate *g = cls;
    pthread_mutex_lock(&g->mu);
    if (!closed) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        for (int i = 0; ci && i < g->o.max_conns; i++)
            if (g->conns[i].fd == ci->connect_fd) { *socket_context = &g->conns[i]; break; }
    } else if (*socket_context) {
        gate_conn *gc = *socket_context;
        gc->fd = -1;
        __atomic_store_n(&gc->deadline, 0, __ATOMIC_RELAXED);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&g->mu);
}

void sp_gate_deadline(struct MHD_Connection *c, uint64_t deadline_ns) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    gate_conn *gc = ci ? ci->socket_context : NULL;
    if (gc) __atomic_store_n(&gc->deadline, deadline_ns, __ATOMIC_RELAXED);
}

uint64_t sp_gate_header_deadline(const sp_gate *g) {
    return sp_now_ns() + (uint64_t)g->o.header_timeout_s * 1000000000ull;
}

uint64_t sp_gate_body_deadline(const sp_gate *g, uint64_t t_headers, uint64_t bytes) {
    return t_headers + (uint64_t)g->o.header_timeout_s * 1000000000ull +
           bytes * (1000000000ull / SP_GATE_MIN_BODY_RATE);
}

/* Shuts down every connection past its deadline (the gate thread). */
static void expire(sp_gate *g) {
    const uint64_t now = sp_now_ns();
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->o.max_conns; i++) {
        gate_conn *c = &g->conns[i];
        const uint64_t dl = __atomic_load_n(&c->deadline, __ATOMIC_RELAXED);
        if (c->fd < 0 || !dl || now < dl) continue;
        shutdown(c->fd, SHUT_RDWR);
        __atomic_store_n(&c->deadline, 0, __ATOMIC_RELAXED);
        sp_metrics_http(g->mx, "(connection)", 408);
    }
    pthread_mutex_unlock(&g->mu);
}

/* ----------------------------------------------------------------------------
 * Accepting and refusing
 * ------------------------------------------------------------------------- */

static void linger_close(sp_gate *g, int i) {
    close(g->linger[i].fd);
    g->linger[i] = g->linger[--g->n_linger];
}

/* Answers 503 without reading the request, then lets the socket linger. */
static void refuse(sp_gate *g, int fd) {
    char msg[512];
    const int n = snprintf(msg, sizeof msg,
                           "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                           "Retry-After: 1\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                           sizeof busy_body - 1, busy_body);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    (void)!send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
    sp_metrics_http(g->mx, "(connection)", 503);
    if (g->n_linger == GATE_LINGER_MAX) { close(fd); return; }
    g->linger[g->n_linger++] = (gate_linger){ fd, sp_now_ns() + GATE_LINGER_NS };
}

static void admit(sp_gate *g, int fd, const struct sockaddr_storage *ss, socklen_t len) {
    unsigned char ip[16];
    ip_key(ss, ip);
    pthread_mutex_lock(&g->mu);
    gate_conn *c = slot_for(g, ip);
    if (c) {
        c->fd = fd;
        memcpy(c->ip, ip, 16);
        __atomic_store_n(&c->deadline, sp_gate_header_deadline(g), __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&g->mu);
    if (!c) { refuse(g, fd); return; }
    if (MHD_add_connection(g->d, fd, (const struct sockaddr *)ss, len) == MHD_YES) return;
    /* MHD closed the socket; free the slot unless its CLOSED notice did */
    pthread_mutex_lock(&g->mu);
    if (c->fd == fd) c->fd = -1;
    pthread_mutex_unlock(&g->mu);
}

/* Accepts every pending connection; false when accept failed for a reason
 * that leaves the socket readable (out of descriptors or memory), so the
 * caller waits a tick instead of spinning on it. */
static bool accept_all(sp_gate *g) {
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        const int fd = accept4(g->lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
        if (fd < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED;
        admit(g, fd, &ss, len);
    }
}

/* Reads and drops what refused clients send; closes them on EOF or after
 * GATE_LINGER_NS. */
static void linger_poll(sp_gate *g, const struct pollfd *p, uint64_t now) {
    char scratch[4096];
    for (int i = g->n_linger - 1; i >= 0; i--) {
        bool done = now >= g->linger[i].until;
        if (!done && p[i].revents) done = recv(g->linger[i].fd, scratch, sizeof scratch, MSG_DONTWAIT) <= 0;
        if (done) linger_close(g, i);
    }
}

static void gate_quiesce_now(sp_gate *g) {
    pthread_mutex_lock(&g->mu);
    if (g->lfd >= 0) close(g->lfd);
    g->lfd = -1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void *gate_main(void *arg) {
    sp_gate *g = arg;
    struct pollfd p[GATE_LINGER_MAX + 1];
    bool backoff = false;            /* accept failed hard last time: skip the socket a tick */
    while (!__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE)) {
        if (__atomic_load_n(&g->quiesce, __ATOMIC_ACQUIRE) && g->lfd >= 0) gate_quiesce_now(g);
        for (int i = 0; i < g->n_linger; i++) p[i] = (struct pollfd){ .fd = g->linger[i].fd, .events = POLLIN };
        p[g->n_linger] = (struct pollfd){ .fd = backoff ? -1 : g->lfd, .events = POLLIN };
        const int n_linger = g->n_linger;
        if (poll(p, (nfds_t)n_linger + 1, GATE_TICK_MS) < 0 && errno != EINTR) break;
        linger_poll(g, p, sp_now_ns());
        backoff = false;
        if (g->lfd >= 0 && (p[n_linger].revents & POLLIN)) backoff = !accept_all(g);
        expire(g);
    }
    while (g->n_linger) linger_close(g, 0);
    return NULL;
}

int sp_gate_run(sp_gate *g, struct MHD_Daemon *d) {
    g->d = d;
    if (pthread_create(&g->th, NULL, gate_main, g)) return -1;
    g->started = true;
    return 0;
}

/* ----------------------------------------------------------------------------
 * Stopping
 * ------------------------------------------------------------------------- */

void sp_gate_quiesce(sp_gate *g) {
    if (!g->started) return;
    pthread_mutex_lock(&g->mu);
    __atomic_store_n(&g->quiesce, 1, __ATOMIC_RELEASE);
    while (g->lfd >= 0) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

void sp_gate_free(sp_gate *g) {
    if (!g) return;
    if (g->started) {
        __atomic_store_n(&g->stop, 1, __ATOMIC_RELEASE);
        pthread_join(g->th, NULL);
    }
    if (g->lfd >= 0) close(g->lfd);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->conns);
    free(g);
}
