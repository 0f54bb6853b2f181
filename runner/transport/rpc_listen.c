/*
 * Sundial: a listening socket bound before gRPC exists, and its connections handed to gRPC.
 *
 * Beam's launchers start the runner binary and connect a few milliseconds later; a refused
 * connect costs their gRPC client its reconnect backoff, a whole second. gRPC's own listener
 * exists only once grpc_init, the server and its services are up (tens of milliseconds under
 * load), so `sundial` binds and listens on a plain socket first thing (sd_rpc_listen_early):
 * from then on the kernel completes every connect and queues it, and the bytes a client sends
 * wait in the socket until the server takes them. When the server starts it watches that
 * socket on its loop, accepts each connection and gives it to gRPC as a channel
 * (grpc_server_add_channel_from_fd, which serves it with the server's channel arguments,
 * exactly as gRPC serves a connection it accepted itself). At shutdown the socket is closed
 * first, so no connection is accepted that could not be served.
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>

#include "runner/base/log.h"
#include "runner/transport/rpc_int.h"

/* After an accept fails for want of descriptors, wait this long before trying again. */
#define ACCEPT_PAUSE_S 0.1
#define LISTEN_BACKLOG 512

sd_status sd_rpc_listen_early(const char *host, int port, int *fd_out, int *bound, sd_err *err)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int one = 1;

    *fd_out = -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    if (port < 0 || port > 65535) {
        return sd_err_set(err, SD_EINVAL, "port %d is not in 0..65535", port);
    }
    a.sin_port = htons((uint16_t)port);
    if (host == NULL || inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        return SD_OK; /* not a numeric IPv4 address: gRPC resolves and binds it later */
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        return sd_err_set(err, SD_EIO, "cannot listen on %s:%d: socket: %s", host, port,
                          strerror(errno));
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, LISTEN_BACKLOG) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        int e = errno;
        (void)close(fd);
        return sd_err_set(err, SD_EIO, "cannot listen on %s:%d: %s", host, port, strerror(e));
    }
    *fd_out = fd;
    *bound = ntohs(a.sin_port);
    return SD_OK;
}

/* Accept every queued connection and give each to gRPC. */
static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    sd_rpc_listener *l = w->data;
    (void)revents;
    for (;;) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* Out of descriptors (or worse): the connection stays queued; try again
                 * shortly instead of spinning on a socket that stays readable. */
                SD_WARN(SD_RPC_MOD, "accepting a connection: %s; retrying in %.0f ms",
                        strerror(errno), ACCEPT_PAUSE_S * 1000);
                ev_io_stop(loop, &l->io);
                ev_timer_set(&l->pause, ACCEPT_PAUSE_S, 0.);
                ev_timer_start(loop, &l->pause);
            }
            return;
        }
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
        grpc_server_add_channel_from_fd(l->gs, fd, creds); /* gRPC owns fd from here */
        grpc_server_credentials_release(creds);
    }
}

static void on_pause_over(struct ev_loop *loop, ev_timer *w, int revents)
{
    sd_rpc_listener *l = w->data;
    (void)revents;
    ev_io_start(loop, &l->io);
}

void sd__rpc_listener_start(sd_rpc_listener *l, struct ev_loop *loop, grpc_server *gs)
{
    if (l->fd < 0 || l->active) {
        return;
    }
    l->gs = gs;
    ev_io_init(&l->io, on_accept, l->fd, EV_READ);
    l->io.data = l;
    ev_init(&l->pause, on_pause_over);
    l->pause.data = l;
    ev_io_start(loop, &l->io);
    l->active = true;
}

void sd__rpc_listener_close(sd_rpc_listener *l, struct ev_loop *loop)
{
    if (l->active) {
        ev_io_stop(loop, &l->io);
        ev_timer_stop(loop, &l->pause);
        l->active = false;
    }
    if (l->fd >= 0) {
        (void)close(l->fd);
        l->fd = -1;
    }
}
