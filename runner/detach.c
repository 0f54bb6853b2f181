/*
 * Sundial: the launcher steps aside once its Python client is past start-up.
 *
 * Why. Beam Python's PrismRunner starts the runner with subprocess.Popen (stdout a pipe that
 * stderr shares) and stops it when the Python process exits, from an atexit handler, by
 * checking whether the process is still running, sending it SIGINT, sleeping one second, and
 * checking again (Beam 2.77, apache_beam/utils/subprocess_server.py, _really_stop_process).
 * However fast the runner exits on SIGINT, that second is spent: every Python process that
 * used the runner exits a second late. For a pytest file of five small pipeline tests that is
 * about a fifth of its wall time, on any runner Beam starts this way (Prism included). The
 * handler skips the signal and the sleep only when the process it started has already exited
 * when it first looks.
 *
 * What. When the launch is that one (sd_detach_wanted), the process splits in two right after
 * it listens, before any thread starts: the launcher (the process Python started and holds)
 * waits, and the server, its child, serves. Once the first job is prepared the server tells
 * the launcher (sd_detach_ready), which exits 0: by then Python has finished its start-up
 * checks, which look at that process and would take its exit for a failed start. From then on
 * the server lives exactly as long as its client: a thread waits on the server's stdout, the
 * pipe Python reads the runner's log from, and when its reading end closes (the Python process
 * is gone, however it ended) sends the server SIGTERM, the usual graceful shutdown. Until the
 * launcher exits it forwards SIGINT and SIGTERM to the server, and if the server ends first
 * (it could not start), exits with its status, so Python sees what it always saw.
 *
 * Nothing else changes: same port, same log lines on the same pipe, same shutdown. A client that
 * never prepares a job keeps the launcher, and stops it as before. SUNDIAL_DETACH=0 turns this
 * off (and =1 waives the check that the parent is a Python interpreter).
 */
#include "runner/detach.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Whether the parent process runs a Python interpreter (its executable's name starts with
 * "python": python3, python3.11, a venv's python). */
static bool parent_is_python(void)
{
    char link[64], exe[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/%ld/exe", (long)getppid());
    ssize_t n = readlink(link, exe, sizeof(exe) - 1);
    if (n <= 0) {
        return false;
    }
    exe[n] = '\0';
    const char *base = strrchr(exe, '/');
    base = base != NULL ? base + 1 : exe;
    return strncmp(base, "python", 6) == 0;
}

bool sd_detach_wanted(bool prism_cli, bool log_kind_given)
{
    const char *env = getenv("SUNDIAL_DETACH");
    if (env != NULL && strcmp(env, "0") == 0) {
        return false;
    }
    struct stat out, err;
    if (!prism_cli || !log_kind_given || fstat(STDOUT_FILENO, &out) != 0 ||
        fstat(STDERR_FILENO, &err) != 0 || !S_ISFIFO(out.st_mode) || out.st_dev != err.st_dev ||
        out.st_ino != err.st_ino) {
        return false;
    }
    return (env != NULL && strcmp(env, "1") == 0) || parent_is_python();
}

/* ---------------------------------------------------------------- the server's side */

/* Wait until stdout's reading end is gone, then stop this process as a SIGTERM would. */
static void *watch_client(void *arg)
{
    (void)arg;
    for (;;) {
        /* No events asked: a pipe's writing end reports POLLERR once no reader is left. */
        struct pollfd p = { .fd = STDOUT_FILENO, .events = 0, .revents = 0 };
        int n = poll(&p, 1, -1);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
            (void)kill(getpid(), SIGTERM);
        }
        return NULL;
    }
}

void sd_detach_ready(int *fd)
{
    if (*fd < 0) {
        return;
    }
    char b = 1;
    ssize_t n;
    do {
        n = write(*fd, &b, 1);
    } while (n < 0 && errno == EINTR);
    (void)close(*fd);
    *fd = -1;
}

/* ---------------------------------------------------------------- the launcher's side */

static volatile pid_t server_pid;

static void forward(int sig)
{
    if (server_pid > 0) {
        (void)kill(server_pid, sig);
    }
}

/* The launcher: wait for the server's word (exit 0) or its end (exit with its status). */
static void launcher(int go)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward; /* no SA_RESTART: the read below sees EINTR and goes on */
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    for (;;) {
        char b;
        ssize_t n = read(go, &b, 1);
        if (n == 1) {
            _exit(0);
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        break; /* the server closed the pipe without a word: it is ending */
    }
    int status = 0;
    while (waitpid(server_pid, &status, 0) < 0) {
        if (errno != EINTR) {
            _exit(1);
        }
    }
    if (WIFSIGNALED(status)) {
        _exit(128 + WTERMSIG(status));
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

int sd_detach_split(int keep_fd)
{
    int go[2];
    if (pipe(go) != 0) {
        return -1;
    }
    /* Not into anything the server execs (PROCESS workers). */
    if (fcntl(go[0], F_SETFD, FD_CLOEXEC) != 0 || fcntl(go[1], F_SETFD, FD_CLOEXEC) != 0) {
        (void)close(go[0]);
        (void)close(go[1]);
        return -1;
    }
    (void)fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        (void)close(go[0]);
        (void)close(go[1]);
        return -1;
    }
    if (pid > 0) {
        server_pid = pid;
        (void)close(go[1]);
        if (keep_fd >= 0) {
            (void)close(keep_fd);
        }
        launcher(go[0]); /* never returns */
    }
    (void)close(go[0]);
    pthread_t t;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) == 0) {
        (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, watch_client, NULL) != 0) {
            /* No watcher: keep the launcher, so Python stops the server as before. */
            (void)close(go[1]);
            go[1] = -1;
        }
        (void)pthread_attr_destroy(&attr);
    } else {
        (void)close(go[1]);
        go[1] = -1;
    }
    return go[1];
}
