/*
 * Sundial: the blocking HTTP/1.1 client (http.h). The request is one write of the request
 * line and headers; the answer is read until the server closes the connection, then split at
 * the blank line after its headers: the status comes from the status line, the body is the
 * rest. No Content-Length or chunked decoding is needed: the server answers "Connection:
 * close" requests with the body as it is and closes.
 */
#include "runner/base/http.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

sd_status sd_http_target_parse(const char *url, sd_http_target *out, sd_err *err)
{
    memset(out, 0, sizeof(*out));
    if (url == NULL) {
        return sd_err_set(err, SD_EINVAL, "no web UI URL (expected http://HOST:PORT/)");
    }
    const char *p = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
    size_t n = strcspn(p, ":/");
    if (n == 0 || n >= sizeof(out->host)) {
        return sd_err_set(err, SD_EINVAL, "%s is not a web UI URL (expected http://HOST:PORT/)",
                          url);
    }
    memcpy(out->host, p, n);
    out->host[n] = '\0';
    snprintf(out->port, sizeof(out->port), "80");
    if (p[n] == ':') {
        size_t m = strcspn(p + n + 1, "/");
        if (m == 0 || m >= sizeof(out->port) || strspn(p + n + 1, "0123456789") != m) {
            return sd_err_set(err, SD_EINVAL, "%s: bad port (expected http://HOST:PORT/)", url);
        }
        memcpy(out->port, p + n + 1, m);
        out->port[m] = '\0';
    }
    return SD_OK;
}

/* A connected socket to t, or -1 with err set. */
static int dial(const sd_http_target *t, sd_err *err)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
    int gai = getaddrinfo(t->host, t->port, &hints, &ai);
    if (gai != 0) {
        (void)sd_err_set(err, SD_EIO, "%s:%s: %s", t->host, t->port, gai_strerror(gai));
        return -1;
    }
    int fd = -1, why = 0;
    for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            why = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        (void)sd_err_set(err, SD_EIO,
                         "the web UI at %s:%s cannot be reached: %s (is it served? sundial serve "
                         "--web_port N)",
                         t->host, t->port, strerror(why != 0 ? why : errno));
    }
    return fd;
}

sd_status sd_http_request(const sd_http_target *t,
                          const char *method,
                          const char *path,
                          int *status,
                          sd_buf *body,
                          sd_err *err)
{
    *status = 0;
    char head[4096];
    int len = snprintf(head, sizeof(head),
                       "%s %s HTTP/1.1\r\nHost: %s:%s\r\nX-Sundial-Action: 1\r\n"
                       "Content-Length: 0\r\nConnection: close\r\n\r\n",
                       method, path, t->host, t->port);
    if (len < 0 || (size_t)len >= sizeof(head)) {
        return sd_err_set(err, SD_EINVAL,
                          "%s %.64s...: the request is too long (%d bytes; at "
                          "most %zu)",
                          method, path, len, sizeof(head) - 1);
    }
    int fd = dial(t, err);
    if (fd < 0) {
        return SD_EIO;
    }
    if (write(fd, head, (size_t)len) != len) {
        close(fd);
        return sd_err_set(err, SD_EIO, "sending %s %s to %s:%s failed", method, path, t->host,
                          t->port);
    }
    sd_buf all;
    sd_buf_init(&all, 0);
    char chunk[4096];
    ssize_t got;
    sd_status st = SD_OK;
    while (st == SD_OK && (got = read(fd, chunk, sizeof(chunk))) > 0) {
        st = sd_buf_append(&all, chunk, (size_t)got);
    }
    close(fd);
    if (st == SD_OK) {
        st = sd_buf_append_byte(&all, '\0');
    }
    if (st != SD_OK) {
        sd_buf_deinit(&all);
        return sd_err_set(err, st, "out of memory reading the answer to %s %s", method, path);
    }
    const char *text = (const char *)all.data;
    const char *sep = strstr(text, "\r\n\r\n");
    if (sep == NULL || sscanf(text, "HTTP/%*s %d", status) != 1) {
        st = sd_err_set(err, SD_EPROTO, "the answer of %s:%s to %s %s is not HTTP", t->host,
                        t->port, method, path);
    } else if (sd_buf_append(body, sep + 4, strlen(sep + 4) + 1) != SD_OK) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory reading the answer to %s %s", method, path);
    }
    sd_buf_deinit(&all);
    return st;
}

sd_status sd_http_put_escaped(sd_buf *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    sd_status st = SD_OK;
    for (; st == SD_OK && *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     c == '-' || c == '_' || c == '.' || c == '~';
        if (plain) {
            st = sd_buf_append_byte(out, c);
        } else {
            uint8_t esc[3] = { '%', (uint8_t)hex[c >> 4], (uint8_t)hex[c & 15] };
            st = sd_buf_append(out, esc, 3);
        }
    }
    return st;
}
