/*
 * master_fixture.h - what test_master.c, test_master_space.c and
 * test_records.c share: a master with one segment, the space it reports, a
 * whole put, and listings rendered as strings. Included once by each test
 * file (its functions are static; a file uses some of them).
 *
 * The master has no clock and no I/O, so every test drives mc__master_*
 * directly with explicit `now` values (milliseconds). Sizes are multiples
 * of the 64-byte allocation unit so that space use can be checked exactly.
 */
#ifndef MC_TEST_MASTER_FIXTURE_H
#define MC_TEST_MASTER_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/master.h"
#include "unit.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

#define UNIT 64
#define SEG_SIZE (64 * 1024)
#define LEASE_MS 100
#define T0 1000 /* the first `now` of every test */

/* ---- helpers ---- */

/* v's replica r (mc__vrep_get()): a compact version's one extent copied
 * into one of a ring of slots, valid for the next 15 calls. */
static mc__replica_t vrep(const mc__version_t *v, uint32_t r)
{
    static mc__extent_t ring[16];
    static unsigned at;
    return mc__vrep_get(v, r, &ring[at++ % 16]);
}

/* 1 if v's first replica's one extent is packed in its fields (x1). */
static int in_x1(const mc__version_t *v)
{
    return mc__vcompact(v) && v->n1;
}

static mc__master_t *new_master_opts(uint64_t seg_size, unsigned high, unsigned ratio)
{
    mc__master_opts_t o = {
        .lease_ms = LEASE_MS,
        .evict_high_pct = high,
        .evict_ratio_pct = ratio,
        .align = UNIT,
    };
    mc__master_t *m = NULL;

    assert_int_equal(mc__master_new(&m, &o), 0);
    assert_int_equal(mc__master_add_segment(m, 0, seg_size), 0);
    return m;
}

static mc__master_t *new_master(void)
{
    return new_master_opts(SEG_SIZE, 0, 0);
}

static uint64_t used(const mc__master_t *m)
{
    mc_space_t sp;

    mc__master_space(m, &sp);
    return sp.used;
}

static uint64_t objects(const mc__master_t *m)
{
    mc_space_t sp;

    mc__master_space(m, &sp);
    return sp.objects;
}

static uint64_t evicted(const mc__master_t *m)
{
    mc_space_t sp;

    mc__master_space(m, &sp);
    return sp.evicted;
}

static mc__version_t *find(mc__master_t *m, const char *key)
{
    return mc__master_find(m, key, strlen(key));
}

/* Publishes key with size bytes (and pin) at now; returns the version. */
static mc__version_t *put_pin(mc__master_t *m, const char *key, uint64_t size, uint32_t pin,
                              uint64_t now)
{
    mc_put_opts_t po = {.pin = pin};
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, key, strlen(key), &po, now, &v), 0);
    assert_non_null(v);
    assert_int_equal(mc__master_reserve(m, v, size, now), 0);
    assert_int_equal(mc__master_commit(m, v, size, 0, now), 0);
    assert_ptr_equal(find(m, key), v);
    return v;
}

static mc__version_t *put(mc__master_t *m, const char *key, uint64_t size, uint64_t now)
{
    return put_pin(m, key, size, MC_PIN_NONE, now);
}

/* Renders a listing as "k1 k2 p/+ ..." (prefix entries marked with '+'),
 * and checks each entry's invariants on the way. */
static char *list_render(const mc_list_t *l)
{
    size_t cap = 64, n = 0;
    char *s = malloc(cap);

    assert_non_null(s);
    s[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        const mc_list_entry_t *e = &l->entries[i];
        assert_int_equal(strlen(e->key), e->klen);
        while (n + e->klen + 3 > cap) {
            cap *= 2;
            s = realloc(s, cap);
            assert_non_null(s);
        }
        n += (size_t)sprintf(s + n, "%s%s%s", i ? " " : "", e->key, e->is_prefix ? "+" : "");
    }
    return s;
}

/* One listing call, rendered; *more and *next (a copy) returned if asked. */
static char *list_str(mc__master_t *m, const char *prefix, const char *after, int delim, size_t max,
                      int *more, char **next)
{
    mc_list_t *l = NULL;
    int rc = mc__master_list(m, prefix, strlen(prefix), after, after ? strlen(after) : 0, delim,
                             max, T0, &l);

    assert_cmp(rc, >=, 0);
    assert_non_null(l);
    assert_int_equal((size_t)rc, l->n);
    if (l->n) {
        assert_non_null(l->next);
        assert_int_equal(l->next_len, l->entries[l->n - 1].klen);
        assert_memory_equal(l->next, l->entries[l->n - 1].key, l->next_len);
    }
    char *s = list_render(l);
    if (more)
        *more = l->more;
    if (next)
        *next = l->n ? strndup(l->next, l->next_len) : NULL;
    mc_list_free(l);
    return s;
}

/* The whole listing (one page of up to 1000), rendered; must not have more. */
static char *list_all(mc__master_t *m, const char *prefix, const char *after, int delim)
{
    int more = -1;
    char *got = list_str(m, prefix, after, delim, 0, &more, NULL);

    assert_int_equal(more, 0);
    return got;
}

/* A macro so that a failure names the caller's line. */
#define assert_list(m, prefix, after, delim, want)                                                 \
    do {                                                                                           \
        char *got_ = list_all(m, prefix, after, delim);                                            \
        assert_string_equal(got_, want);                                                           \
        free(got_);                                                                                \
    } while (0)

#pragma GCC diagnostic pop

#endif /* MC_TEST_MASTER_FIXTURE_H */
