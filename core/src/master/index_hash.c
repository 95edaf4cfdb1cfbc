/*
 * index_hash.c - the index's hash table of values by exact key (index_i.h):
 * Robin Hood open addressing over 8-byte slots.
 *
 * A value is stored once, as a pointer in one slot: the table costs 8 bytes
 * per slot and nothing per value beyond that. It grows by half when it
 * would pass 15/16 full (Robin Hood keeps probes short that full: a value
 * never sits much farther from home than its neighbours) and halves when
 * under a quarter full, so it spends between about 8.5 and 13 bytes per
 * value. A slot's home is the hash scaled to the table size (a multiply,
 * no power of two needed). Pointers must fit in 48 bits, as every
 * user-space pointer on Linux does unless mapped above that on request.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master/index_i.h"

#define HASH_MIN 64 /* slots of a new table */
#define PTR_MASK ((1ULL << 48) - 1)
#define DIST_SAT 255 /* a stored distance this large means "compute it" */

uint64_t mc__ihash_key(const char *key, size_t len)
{
    const unsigned char *p = (const unsigned char *)key;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ len;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        uint64_t w;

        memcpy(&w, p + i, sizeof(w));
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    if (i < len) {
        uint64_t w = 0;

        memcpy(&w, p + i, len - i);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
    }
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

static size_t home_of(size_t cap, uint64_t hv)
{
    return (size_t)(((hv & 0xffffffffULL) * cap) >> 32);
}

static uint64_t slot_make(const void *val, uint64_t hv, size_t dist)
{
    uint64_t d = dist < DIST_SAT ? dist : DIST_SAT;

    return (uint64_t)(uintptr_t)val | d << 48 | (hv >> 56) << 56;
}

static uint64_t hash_of_val(const mc__ihash_t *h, const void *val)
{
    size_t len;
    const char *k = h->keyof(val, &len);

    return mc__ihash_key(k, len);
}

/* How far the value in slot s (at index i) sits from its home. */
static size_t slot_dist(const mc__ihash_t *h, uint64_t s, size_t i)
{
    size_t d = (size_t)(s >> 48) & 0xff, home;

    if (d < DIST_SAT)
        return d;
    home = home_of(h->cap, hash_of_val(h, (void *)(uintptr_t)(s & PTR_MASK)));
    return i >= home ? i - home : i + h->cap - home;
}

/* Places val (hash hv) in a table with a free slot, displacing values
 * nearer their home (Robin Hood). */
static void place(mc__ihash_t *h, void *val, uint64_t hv)
{
    size_t i = home_of(h->cap, hv), d = 0;
    uint64_t cur = slot_make(val, hv, 0);

    for (;;) {
        uint64_t s = h->slot[i];

        if (!s) {
            h->slot[i] = (cur & ~(0xffULL << 48)) | (uint64_t)(d < DIST_SAT ? d : DIST_SAT) << 48;
            return;
        }
        size_t sd = slot_dist(h, s, i);

        if (sd < d) {
            h->slot[i] = (cur & ~(0xffULL << 48)) | (uint64_t)(d < DIST_SAT ? d : DIST_SAT) << 48;
            cur = s;
            d = sd;
        }
        i = i + 1 == h->cap ? 0 : i + 1;
        d++;
    }
}

/* Moves every value into a new array of cap slots. Returns 0 or -ENOMEM
 * (the table unchanged). */
static int resize(mc__ihash_t *h, size_t cap)
{
    uint64_t *old = h->slot;
    size_t ocap = h->cap;

    h->slot = calloc(cap, sizeof(*h->slot));
    if (!h->slot) {
        h->slot = old;
        return -ENOMEM;
    }
    h->cap = cap;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i]) {
            void *val = (void *)(uintptr_t)(old[i] & PTR_MASK);

            place(h, val, hash_of_val(h, val));
        }
    }
    free(old);
    return 0;
}

int mc__ihash_init(mc__ihash_t *h, mc__index_key_cb keyof)
{
    memset(h, 0, sizeof(*h));
    h->keyof = keyof;
    h->slot = calloc(HASH_MIN, sizeof(*h->slot));
    if (!h->slot)
        return -ENOMEM;
    h->cap = HASH_MIN;
    return 0;
}

void mc__ihash_fini(mc__ihash_t *h)
{
    free(h->slot);
    h->slot = NULL;
}

int mc__ihash_reserve(mc__ihash_t *h, size_t n)
{
    size_t want = h->count + n;

    if (want <= h->cap - h->cap / 16)
        return 0;
    size_t cap = h->cap + h->cap / 2;

    if (cap < want + want / 15 + 1)
        cap = want + want / 15 + 1;
    if (resize(h, cap) == 0)
        return 0;
    return want < h->cap ? 0 : -ENOMEM; /* full, but a slot stays free */
}

long mc__ihash_find(const mc__ihash_t *h, const char *key, size_t len, uint64_t hv)
{
    size_t i = home_of(h->cap, hv);
    uint64_t tag = hv >> 56;

    for (size_t d = 0;; d++) {
        uint64_t s = h->slot[i];

        if (!s || slot_dist(h, s, i) < d)
            return -1;
        if (s >> 56 == tag) {
            size_t kl;
            const char *k = h->keyof((void *)(uintptr_t)(s & PTR_MASK), &kl);

            if (kl == len && (len == 0 || memcmp(k, key, len) == 0))
                return (long)i;
        }
        i = i + 1 == h->cap ? 0 : i + 1;
    }
}

long mc__ihash_find_ptr(const mc__ihash_t *h, const void *val, uint64_t hv)
{
    size_t i = home_of(h->cap, hv);

    for (size_t d = 0;; d++) {
        uint64_t s = h->slot[i];

        if (!s || slot_dist(h, s, i) < d)
            return -1;
        if ((s & PTR_MASK) == (uint64_t)(uintptr_t)val)
            return (long)i;
        i = i + 1 == h->cap ? 0 : i + 1;
    }
}

void mc__ihash_add(mc__ihash_t *h, void *val, uint64_t hv)
{
    place(h, val, hv);
    h->count++;
}

void mc__ihash_del(mc__ihash_t *h, long at)
{
    size_t i = (size_t)at;

    for (;;) {
        size_t j = i + 1 == h->cap ? 0 : i + 1;
        uint64_t s = h->slot[j];
        size_t d;

        if (!s || (d = slot_dist(h, s, j)) == 0)
            break;
        d--;
        h->slot[i] = (s & ~(0xffULL << 48)) | (uint64_t)(d < DIST_SAT ? d : DIST_SAT) << 48;
        i = j;
    }
    h->slot[i] = 0;
    h->count--;
    if (h->cap > HASH_MIN && h->count < h->cap / 4)
        (void)resize(h, h->cap / 2 > HASH_MIN ? h->cap / 2 : HASH_MIN); /* failing: keeps working */
}

size_t mc__ihash_sample(const mc__ihash_t *h, uint64_t at, void **out, size_t n)
{
    size_t got = 0, look = 8 * n < h->cap ? 8 * n : h->cap;
    for (size_t i = (size_t)(at % h->cap); look-- && got < n; i = (i + 1) % h->cap)
        if (h->slot[i])
            out[got++] = mc__ihash_val(h, (long)i);
    return got;
}
