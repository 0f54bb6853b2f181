/*
 * Sundial: allocation.
 *
 * Every allocation in the project goes through these wrappers so that unit tests can run an
 * "OOM loop": fail allocation 1, 2, 3, ... until the operation under test succeeds, checking
 * each time that it reports SD_ENOMEM and leaks nothing. The countdown is an atomic so that
 * gRPC or worker threads allocating concurrently do not corrupt it; with injection disabled the
 * cost is one relaxed atomic load per call.
 */
#define _DEFAULT_SOURCE /* madvise, MADV_DONTNEED (sd_mem_discard) */
#include "runner/base/alloc.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

static atomic_long fail_countdown;
static atomic_int fail_sticky;
static atomic_long injected;

void sd_alloc_fail_after(long n, int sticky)
{
    atomic_store(&fail_countdown, n);
    atomic_store(&fail_sticky, sticky);
    atomic_store(&injected, 0);
}

long sd_alloc_injected_failures(void)
{
    return atomic_load(&injected);
}

static int should_fail(void)
{
    long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (n <= 0) {
        return 0;
    }
    n = atomic_fetch_sub(&fail_countdown, 1);
    if (n == 1) {
        if (atomic_load(&fail_sticky)) {
            atomic_store(&fail_countdown, 1);
        }
        atomic_fetch_add(&injected, 1);
        return 1;
    }
    return 0;
}

void *sd_malloc(size_t size)
{
    if (should_fail()) {
        return NULL;
    }
    return malloc(size == 0 ? 1 : size);
}

void *sd_calloc(size_t count, size_t size)
{
    if (should_fail()) {
        return NULL;
    }
    if (count == 0 || size == 0) {
        count = 1;
        size = 1;
    }
    return calloc(count, size);
}

void *sd_realloc(void *ptr, size_t size)
{
    if (should_fail()) {
        return NULL;
    }
    return realloc(ptr, size == 0 ? 1 : size);
}

void sd_free(void *ptr)
{
    free(ptr);
}

void sd_mem_trim(void)
{
#if defined(__GLIBC__)
    (void)malloc_trim(0);
#endif
}

size_t sd_mem_page_size(void)
{
    static atomic_size_t page;
    size_t n = atomic_load_explicit(&page, memory_order_relaxed);
    if (n == 0) {
#if defined(__linux__)
        long v = sysconf(_SC_PAGESIZE);
        n = v > 0 ? (size_t)v : 4096;
#else
        n = 4096;
#endif
        atomic_store_explicit(&page, n, memory_order_relaxed);
    }
    return n;
}

void sd_mem_discard(void *p, size_t len)
{
#if defined(__linux__) && defined(MADV_DONTNEED)
    size_t page = sd_mem_page_size();
    uintptr_t a = (uintptr_t)p, start = (a + page - 1) & ~(uintptr_t)(page - 1);
    if (len > UINTPTR_MAX - a) {
        return;
    }
    uintptr_t end = (a + len) & ~(uintptr_t)(page - 1);
    if (end > start) {
        (void)madvise((void *)start, end - start, MADV_DONTNEED);
    }
#else
    (void)p;
    (void)len;
#endif
}

void *sd_memdup(const void *p, size_t n)
{
    void *q = sd_malloc(n);
    if (q != NULL && n > 0) {
        memcpy(q, p, n);
    }
    return q;
}

char *sd_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *q = sd_malloc(len + 1);
    if (q != NULL) {
        memcpy(q, s, len);
        q[len] = '\0';
    }
    return q;
}

char *sd_strdup(const char *s)
{
    return sd_strndup(s, strlen(s));
}

char *sd_vasprintf(const char *fmt, va_list ap)
{
    va_list again;
    int n;
    char *s;

    va_copy(again, ap);
    n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    if (n < 0) {
        return NULL;
    }
    s = sd_malloc((size_t)n + 1);
    if (s == NULL) {
        return NULL;
    }
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

char *sd_asprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    s = sd_vasprintf(fmt, ap);
    va_end(ap);
    return s;
}

bool sd_size_parse(const char *s, uint64_t *out)
{
    static const char units[] = "KMGT";
    uint64_t v = 0;
    size_t i = 0;
    if (s == NULL) {
        return false;
    }
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    if (i == 0) {
        return false;
    }
    const char *u = s + i;
    if (*u != '\0') {
        char c = (char)(*u >= 'a' && *u <= 'z' ? *u - 'a' + 'A' : *u);
        const char *at = c != '\0' ? strchr(units, c) : NULL;
        if (at == NULL) {
            return false;
        }
        for (long k = 0; k <= at - units; k++) {
            if (v > UINT64_MAX / 1024) {
                return false;
            }
            v *= 1024;
        }
        u++;
        if ((u[0] == 'i' || u[0] == 'I') && (u[1] == 'B' || u[1] == 'b') && u[2] == '\0') {
            u += 2;
        } else if ((u[0] == 'B' || u[0] == 'b') && u[1] == '\0') {
            u++;
        }
        if (*u != '\0') {
            return false;
        }
    }
    *out = v;
    return true;
}
