/* Sundial: the only allocation entry points; tests can make them fail on the Nth call. */
#ifndef SD_RUNNER_BASE_ALLOC_H
#define SD_RUNNER_BASE_ALLOC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* sd_malloc and sd_free are public (the C SDK hands memory to programs); see there. */
#include <sundial/memory.h>

/* Like malloc/calloc/realloc/free. Return NULL on failure (or an injected failure). */
void *sd_calloc(size_t count, size_t size);
void *sd_realloc(void *ptr, size_t size);

/*
 * Give the free memory inside the allocator's heaps back to the system (glibc: malloc_trim,
 * which also releases free pages in the middle of a heap, not only its top); a no-op with
 * other C libraries. Freed blocks below the allocator's mmap threshold otherwise stay
 * resident until reused: call it after freeing many megabytes of them that will not be
 * reused soon. Its cost grows with the number of free blocks, so not after every free.
 */
void sd_mem_trim(void);

/*
 * The whole pages inside [p, p + len) of a live allocation are not needed for now: they go
 * back to the system at once (Linux: madvise MADV_DONTNEED) and read as zeros when touched
 * again. The allocation stays the caller's; bytes on pages only partly inside are kept.
 * Best effort: a no-op where unsupported. sd_mem_page_size: the page size it works in.
 */
void sd_mem_discard(void *p, size_t len);
size_t sd_mem_page_size(void);

/* Copies; NULL on failure. sd_strndup copies at most n bytes and always terminates. */
char *sd_strdup(const char *s);
char *sd_strndup(const char *s, size_t n);
void *sd_memdup(const void *p, size_t n);

/* printf into a new string; NULL on failure. */
char *sd_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same with a va_list (ap is consumed). */
char *sd_vasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/*
 * A size in bytes as people write it: digits, then optionally K, M, G or T (powers of 1024),
 * each optionally followed by "iB" or "B" (so 512M, 512MB and 512MiB are the same), in either
 * case ("1g"). No sign, no fraction, no spaces. False when s is not one or it exceeds
 * UINT64_MAX.
 */
bool sd_size_parse(const char *s, uint64_t *out);

/*
 * Test hook: make the Nth allocation from now fail (1 = the next one), and every one after it
 * while `sticky` is set. n = 0 disables injection. Thread-safe.
 */
void sd_alloc_fail_after(long n, int sticky);

/* Number of allocations failed by injection since the last sd_alloc_fail_after(). */
long sd_alloc_injected_failures(void);

#endif
