/*
 * nomem.h - malloc() and calloc() that can be told to fail, for the unit
 * tests of what runs out of memory (test_index_nomem.c, test_master_nomem.c,
 * test_service_nodes.c). Included once by a test program: it replaces
 * glibc's malloc and calloc for the whole program (the static library's
 * calls bind to them). Under AddressSanitizer, which owns malloc, nothing
 * is replaced: NO_WRAP is defined and the tests that need failures skip.
 */
#ifndef MC_TEST_NOMEM_H
#define MC_TEST_NOMEM_H

#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__)
#define NO_WRAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_WRAP 1
#endif
#endif

/* Allocations left before they fail (-1: never; 0: every one fails). */
static long allocs_left = -1;

#ifndef NO_WRAP
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);

static int may_allocate(void)
{
    if (allocs_left == 0)
        return 0;
    if (allocs_left > 0)
        allocs_left--;
    return 1;
}

void *malloc(size_t n)
{
    return may_allocate() ? __libc_malloc(n) : NULL;
}

void *calloc(size_t n, size_t size)
{
    return may_allocate() ? __libc_calloc(n, size) : NULL;
}
#endif

#endif /* MC_TEST_NOMEM_H */
