/* Sundial: telling ThreadSanitizer about an ordering it cannot see. */
#ifndef SD_RUNNER_BASE_TSAN_H
#define SD_RUNNER_BASE_TSAN_H

/*
 * Some hand-overs order memory through code ThreadSanitizer does not see: gRPC's completion
 * queue (libgrpc is not instrumented), libev's ev_async (an eventfd and fences). Under
 * -fsanitize=thread we state such an edge on an address both sides name: RELEASE before the
 * hand-over, ACQUIRE where it arrives. Nothing otherwise.
 */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define SD_TSAN_RELEASE(p) __tsan_release(p)
#define SD_TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define SD_TSAN_RELEASE(p) ((void)(p))
#define SD_TSAN_ACQUIRE(p) ((void)(p))
#endif

#endif
