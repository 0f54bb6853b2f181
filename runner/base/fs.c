/*
 * Sundial: safe directory handling.
 *
 * The runner writes staged artifacts under one directory. On a shared machine another user
 * may have created a directory or a symlink where we are about to write, so: a directory we
 * make gets an unpredictable name (mkdtemp), a directory we are given is checked with lstat
 * (a real directory, ours, writable only by us), and removal walks the tree with *at()
 * calls that never follow a symlink, so a link planted inside cannot make us delete files
 * elsewhere.
 */
#include "runner/base/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner/base/alloc.h"

#define RMTREE_MAX_DEPTH 64

static void rmtree_at(int parent, const char *name, int depth)
{
    struct stat sb;
    if (fstatat(parent, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
        return;
    }
    if (!S_ISDIR(sb.st_mode)) {
        (void)unlinkat(parent, name, 0);
        return;
    }
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    DIR *d = depth < RMTREE_MAX_DEPTH ? fdopendir(fd) : NULL;
    if (d == NULL) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            rmtree_at(dirfd(d), e->d_name, depth + 1);
        }
    }
    closedir(d); /* closes fd */
    (void)unlinkat(parent, name, AT_REMOVEDIR);
}

void sd_rmtree(const char *path)
{
    if (path != NULL && path[0] != '\0') {
        rmtree_at(AT_FDCWD, path, 0);
    }
}

sd_status sd_private_dir(const char *path, sd_err *err)
{
    struct stat sb;
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        return sd_err_set(err, SD_EIO, "cannot create directory \"%s\": %s", path, strerror(errno));
    }
    if (lstat(path, &sb) != 0) {
        return sd_err_set(err, SD_EIO, "cannot examine \"%s\": %s", path, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode)) {
        return sd_err_set(err, SD_EIO,
                          "\"%s\" is a symlink; the artifact directory must be a "
                          "real directory",
                          path);
    }
    if (!S_ISDIR(sb.st_mode)) {
        return sd_err_set(err, SD_EIO, "\"%s\" is not a directory", path);
    }
    if (sb.st_uid != geteuid()) {
        return sd_err_set(err, SD_EIO,
                          "\"%s\" belongs to another user (uid %u); the artifact "
                          "directory must be ours",
                          path, (unsigned)sb.st_uid);
    }
    if ((sb.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return sd_err_set(err, SD_EIO,
                          "\"%s\" is writable by other users (mode %03o); the "
                          "artifact directory must not be",
                          path, (unsigned)(sb.st_mode & 0777));
    }
    return SD_OK;
}

sd_status sd_private_tmpdir(const char *prefix, char **out, sd_err *err)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] == '\0') {
        tmp = "/tmp";
    }
    char *path = sd_asprintf("%s/%s-XXXXXX", tmp, prefix);
    if (path == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (mkdtemp(path) == NULL) {
        sd_status st = sd_err_set(err, SD_EIO, "cannot create a private directory in %s: %s", tmp,
                                  strerror(errno));
        sd_free(path);
        return st;
    }
    *out = path;
    return SD_OK;
}

/*
 * The janitor: a child forked while this process is still single-threaded (so it may call
 * anything), in a process group of its own (a signal to ours, a terminal's ^C, does not reach
 * it), with nothing open but the read end of a pipe whose write end only we hold (close on
 * exec, so no worker we start keeps it). When we are gone, however we went, the read returns
 * end of file and it removes the directory; after a clean exit there is nothing left to
 * remove.
 */
static void janitor(int fd, const char *path)
{
    char c;
    (void)prctl(PR_SET_NAME, "sundial-janitor", 0, 0, 0); /* what ps and top show */
    (void)setpgid(0, 0);
    (void)signal(SIGINT, SIG_IGN);
    (void)signal(SIGTERM, SIG_IGN);
    (void)signal(SIGHUP, SIG_IGN);
    (void)signal(SIGPIPE, SIG_IGN);
    long max = sysconf(_SC_OPEN_MAX);
    for (int i = 0; i < (max > 0 && max < 65536 ? max : 1024); i++) {
        if (i != fd) {
            (void)close(i);
        }
    }
    int null = open("/dev/null", O_RDWR);
    while (null >= 0 && null < 3) {
        null = dup(null); /* 0, 1 and 2 on /dev/null */
    }
    for (;;) {
        ssize_t n = read(fd, &c, 1);
        if (n == 0 || (n < 0 && errno != EINTR)) {
            break;
        }
    }
    sd_rmtree(path);
    _exit(0);
}

sd_status sd_remove_when_gone(const char *path, sd_err *err)
{
    int fds[2];
    if (pipe(fds) != 0) {
        return sd_err_set(err, SD_EIO, "cannot make a pipe for %s's cleanup: %s", path,
                          strerror(errno));
    }
    if (fcntl(fds[1], F_SETFD, FD_CLOEXEC) != 0) {
        int e = errno;
        (void)close(fds[0]);
        (void)close(fds[1]);
        return sd_err_set(err, SD_EIO, "cannot make a pipe for %s's cleanup: %s", path,
                          strerror(e));
    }
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        (void)close(fds[0]);
        (void)close(fds[1]);
        return sd_err_set(err, SD_EIO, "cannot start %s's cleanup process: %s", path, strerror(e));
    }
    if (pid == 0) {
        /* Forked twice: the janitor is not our child, so nothing of ours ever waits for it or
         * counts it among our children. */
        (void)close(fds[1]);
        pid_t g = fork();
        if (g == 0) {
            janitor(fds[0], path);
        }
        _exit(g < 0 ? 1 : 0);
    }
    (void)close(fds[0]); /* fds[1] stays open, unused, until this process ends */
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        (void)close(fds[1]);
        return sd_err_set(err, SD_EIO, "cannot start %s's cleanup process", path);
    }
    return SD_OK;
}
