/*
 * index_fixture.h - what the index's unit tests share (test_index.c,
 * test_index_tree.c): values that carry their keys and tags, kept in an
 * arena freed at teardown, and the calls in a key-and-tag shape.
 */
#ifndef MC_TEST_INDEX_FIXTURE_H
#define MC_TEST_INDEX_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "master/index.h"

/* A key with an explicit length, so zero bytes inside are allowed. */
typedef struct key {
    const char *s;
    size_t len;
} test_key_t;

#define K(lit)                                                                                     \
    {                                                                                              \
        (lit), sizeof(lit) - 1                                                                     \
    }
#define V(n) ((void *)(uintptr_t)(n))
#define ENT_GONE ((uintptr_t)-1) /* the tag of a value its owner dropped */

/* A value of the index: it carries its key (a copy) and a tag the tests
 * compare, V(tag). Values live in an arena freed at teardown. */
typedef struct ent {
    size_t len;
    uintptr_t tag;
    char key[];
} ent_t;

static ent_t **arena __attribute__((unused));
static size_t narena __attribute__((unused)), arena_cap __attribute__((unused));

static inline const char *ent_key(const void *val, size_t *len)
{
    const ent_t *e = val;

    assert_true(e->tag != ENT_GONE); /* the index reads no value it gave back */
    *len = e->len;
    return e->key;
}

static inline ent_t *ent_new(const char *key, size_t len, uintptr_t tag)
{
    ent_t *e = malloc(sizeof(*e) + len + 1);

    assert_non_null(e);
    e->len = len;
    e->tag = tag;
    if (len)
        memcpy(e->key, key, len);
    e->key[len] = '\0';
    return e;
}

static inline ent_t *ent(const char *key, size_t len, uintptr_t tag)
{
    if (narena == arena_cap) {
        arena_cap = arena_cap ? arena_cap * 2 : 256;
        arena = realloc(arena, arena_cap * sizeof(*arena));
        assert_non_null(arena);
    }
    return arena[narena++] = ent_new(key, len, tag);
}

static inline void *tag_of(void *val)
{
    return val ? V(((ent_t *)val)->tag) : NULL;
}

/* The tests' calling shape: a key, its length and a tag (the index takes
 * a value carrying the key: made here). */
static inline int ins(mc__index_t *ix, const char *key, size_t len, void *tag, void **old)
{
    void *was = NULL;
    int rc = mc__index_insert(ix, ent(key, len, (uintptr_t)tag), &was);

    if (rc == 1 && old)
        *old = tag_of(was);
    return rc;
}

static inline void *get_(mc__index_t *ix, const char *key, size_t len)
{
    return tag_of(mc__index_get(ix, key, len));
}

static inline void *rem(mc__index_t *ix, const char *key, size_t len)
{
    return tag_of(mc__index_remove(ix, key, len));
}

static inline int nxt(mc__index_iter_t *it, const char **key, size_t *len, void **val)
{
    int rc = mc__index_next(it, key, len, val);

    if (rc && val)
        *val = tag_of(*val);
    return rc;
}

static inline int setup(void **state)
{
    *state = mc__index_new(ent_key);
    return *state ? 0 : -1;
}

static inline int teardown(void **state)
{
    assert_int_equal(mc__index_check(*state), 0);
    mc__index_free(*state, NULL);
    for (size_t i = 0; i < narena; i++)
        free(arena[i]);
    free(arena);
    arena = NULL;
    narena = arena_cap = 0;
    return 0;
}

#endif /* MC_TEST_INDEX_FIXTURE_H */
