/*
 * test_proto_msgs.c - unit tests for the wire codec (core/src/wire/proto.c):
 * the nested messages. The stat, the replica set and the listing are
 * packed, compared with an independent little-endian encoding, decoded back,
 * cut at every byte offset and padded with trailing bytes, and refused when
 * their counts lie; the put requests' typed codecs agree with the generic
 * one. The framing and the field codec are test_proto.c; what both use is
 * proto_ref.h.
 */
#include <errno.h>
#include <limits.h>

#include "proto_ref.h"

/* ---- stat ---- */

static void assert_stat_equal(const mc_stat_t *a, const mc_stat_t *b)
{
    assert_int_equal(a->size, b->size);
    assert_int_equal(a->version, b->version);
    assert_int_equal(a->mtime_ns, b->mtime_ns);
    assert_int_equal(a->mode, b->mode);
    assert_int_equal(a->replicas, b->replicas);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->uid, b->uid);
    assert_int_equal(a->gid, b->gid);
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->nlink, b->nlink);
    assert_int_equal(a->atime_ns, b->atime_ns);
    assert_int_equal(a->ctime_ns, b->ctime_ns);
    assert_int_equal(a->rdev, b->rdev);
    assert_int_equal(a->ino, b->ino);
    assert_int_equal(a->alloc, b->alloc);
}

static void test_stat_round_trip(void **state)
{
    mc__wbuf_t w = {0};
    ref_t want = {0};

    assert_int_equal(mc__pack_stat(&w, &some_stat), 0);
    ref_le(&want, some_stat.size, 8);
    ref_le(&want, some_stat.version, 8);
    ref_le(&want, (uint64_t)some_stat.mtime_ns, 8);
    ref_le(&want, some_stat.mode, 4);
    ref_le(&want, some_stat.replicas, 4);
    ref_le(&want, some_stat.flags, 4);
    ref_le(&want, some_stat.uid, 4);
    ref_le(&want, some_stat.gid, 4);
    ref_le(&want, some_stat.type, 4);
    ref_le(&want, some_stat.nlink, 4);
    ref_le(&want, (uint64_t)some_stat.atime_ns, 8);
    ref_le(&want, (uint64_t)some_stat.ctime_ns, 8);
    ref_le(&want, some_stat.rdev, 8);
    ref_le(&want, some_stat.ino, 8);
    ref_le(&want, some_stat.alloc, 8);
    assert_int_equal(w.len, 92);
    assert_memory_equal(w.p, want.b, 92);
    assert_int_equal(mc__pack(&w, "u", 0xabcdu), 0); /* something after it */

    char *body = dup_bytes(w.p, w.len);
    const char *p = body;
    size_t n = w.len;
    mc_stat_t st;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    assert_stat_equal(&st, &some_stat);
    assert_ptr_equal(p, body + 92);
    assert_int_equal(n, 4);

    for (size_t cut = 0; cut < 92; cut++) {
        char *part = dup_bytes(body, cut);
        p = part;
        n = cut;
        assert_int_equal(mc__take_stat(&p, &n, &st), -EBADMSG);
        assert_ptr_equal(p, part);
        assert_int_equal(n, cut);
        free(part);
    }
    free(body);
    free(want.b);
    free(w.p);
}

/* ---- replica sets ---- */

typedef struct rep {
    uint32_t seg;
    const char *addr;
    const char *rdma; /* the node's RDMA record: opaque bytes */
    uint32_t next;
    uint64_t off[4], len[4];
} rep_t;

/* The encoder a server uses: proto.h has none for replica sets. */
static void pack_replicas(mc__wbuf_t *w, const rep_t *r, uint32_t count)
{
    mc__pack(w, "u", (unsigned)count);
    for (uint32_t i = 0; i < count; i++) {
        mc__pack(w, "uqssu", (unsigned)r[i].seg, (uint64_t)r[i].seg * 3 + 1, r[i].addr,
                 (uint32_t)strlen(r[i].addr), r[i].rdma, (uint32_t)strlen(r[i].rdma),
                 (unsigned)r[i].next);
        for (uint32_t e = 0; e < r[i].next; e++)
            mc__pack(w, "qq", r[i].off[e], r[i].len[e]);
    }
}

static void make_replicas(rep_t *r, uint32_t count)
{
    static const char *addrs[] = {"", "10.0.0.1:7000", "[::1]:7001", "shm:node-3"};
    static const char *rdmas[] = {"", "MCRR\x01", "", "any opaque record \xff"};
    for (uint32_t i = 0; i < count; i++) {
        r[i].seg = 0x80000000u + i;
        r[i].addr = addrs[i % 4];
        r[i].rdma = rdmas[(i / 2) % 4];
        r[i].next = i % 4;
        for (uint32_t e = 0; e < r[i].next; e++) {
            r[i].off[e] = ((uint64_t)i << 40) + e * 0x100000ull;
            r[i].len[e] = 4096ull * (e + 1) + i;
        }
    }
}

static void check_replicas(uint32_t count)
{
    rep_t r[8];
    mc__wire_replica_t got[8];
    mc__wbuf_t w = {0};

    make_replicas(r, count);
    pack_replicas(&w, r, count);
    assert_int_equal(mc__pack(&w, "q", (uint64_t)99), 0); /* what follows stays */
    char *body = dup_bytes(w.p, w.len);
    const char *p = body;
    size_t n = w.len;

    assert_int_equal(mc__take_replicas(&p, &n, got, 8), (int)count);
    assert_int_equal(n, 8);
    assert_ptr_equal(p, body + w.len - 8);
    for (uint32_t i = 0; i < count; i++) {
        assert_int_equal(got[i].seg, r[i].seg);
        assert_int_equal(got[i].epoch, (uint64_t)r[i].seg * 3 + 1);
        assert_int_equal(got[i].addr_len, strlen(r[i].addr));
        assert_memory_equal(got[i].addr, r[i].addr, got[i].addr_len);
        assert_int_equal(got[i].rdma_len, strlen(r[i].rdma));
        assert_memory_equal(got[i].rdma, r[i].rdma, got[i].rdma_len);
        assert_int_equal(got[i].next, r[i].next);
        for (uint32_t e = 0; e < r[i].next; e++) {
            uint64_t off, len;
            mc__wire_extent(&got[i], e, &off, &len);
            assert_int_equal(off, r[i].off[e]);
            assert_int_equal(len, r[i].len[e]);
        }
        uint64_t off = 1, len = 1;
        mc__wire_extent(&got[i], got[i].next, &off, &len); /* out of range */
        assert_int_equal(off, 0);
        assert_int_equal(len, 0);
    }

    /* max is enforced. */
    if (count) {
        p = body;
        n = w.len;
        assert_int_equal(mc__take_replicas(&p, &n, got, (int)count - 1), -EBADMSG);
        assert_ptr_equal(p, body);
    }

    /* Cut anywhere inside the set: -EBADMSG, nothing advanced. */
    for (size_t cut = 0; cut < w.len - 8; cut++) {
        char *part = dup_bytes(body, cut);
        p = part;
        n = cut;
        assert_int_equal(mc__take_replicas(&p, &n, got, 8), -EBADMSG);
        assert_ptr_equal(p, part);
        assert_int_equal(n, cut);
        free(part);
    }
    free(body);
    free(w.p);
}

static void test_replicas_round_trip(void **state)
{
    check_replicas(0);
    check_replicas(1);
    check_replicas(8);

    /* No replicas and max 0: out is never touched. */
    mc__wbuf_t w = {0};
    mc__pack(&w, "u", 0u);
    const char *p = w.p;
    size_t n = w.len;
    assert_int_equal(mc__take_replicas(&p, &n, NULL, 0), 0);
    assert_int_equal(n, 0);
    p = w.p;
    n = w.len;
    assert_int_equal(mc__take_replicas(&p, &n, NULL, -1), 0);
    free(w.p);
}

/* Counts that promise more than the bytes hold are refused up front. */
static void test_replicas_lying_counts(void **state)
{
    mc__wire_replica_t got[4];
    mc__wbuf_t w = {0};
    const char *p;
    size_t n;

    /* Replica counts past max, or past what the bytes could hold. */
    const uint32_t counts[] = {0xffffffffu, 0x80000000u, 1000u, 2u};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        memset(&w, 0, sizeof(w));
        mc__pack(&w, "uuuuu", (unsigned)counts[i], 1u, 0u, 0u, 0u);
        p = w.p;
        n = w.len;
        assert_int_equal(mc__take_replicas(&p, &n, got, INT_MAX), -EBADMSG);
        free(w.p);
    }

    /* Extent counts whose byte size would wrap 32 bits, or just too many. */
    const uint32_t nexts[] = {0x10000000u, 0xffffffffu, 2u};
    for (size_t i = 0; i < sizeof(nexts) / sizeof(nexts[0]); i++) {
        memset(&w, 0, sizeof(w));
        mc__pack(&w, "uuqssuqq", 1u, 5u, (uint64_t)1, "a", (uint32_t)1, "", (uint32_t)0,
                 (unsigned)nexts[i], (uint64_t)0, (uint64_t)1);
        char *body = dup_bytes(w.p, w.len);
        p = body;
        n = w.len;
        assert_int_equal(mc__take_replicas(&p, &n, got, 4), -EBADMSG);
        free(body);
        free(w.p);
    }

    /* An address longer than what is left. */
    memset(&w, 0, sizeof(w));
    mc__pack(&w, "uuquuu", 1u, 5u, (uint64_t)1, 0x7fffffffu, 0u, 0u);
    p = w.p;
    n = w.len;
    assert_int_equal(mc__take_replicas(&p, &n, got, 4), -EBADMSG);
    free(w.p);

    /* An RDMA record longer than what is left. */
    memset(&w, 0, sizeof(w));
    mc__pack(&w, "uuqsuu", 1u, 5u, (uint64_t)1, "a", (uint32_t)1, 0x7fffffffu, 0u);
    p = w.p;
    n = w.len;
    assert_int_equal(mc__take_replicas(&p, &n, got, 4), -EBADMSG);
    free(w.p);
}

static void test_replicas_extent_overflow(void **state)
{
    mc__wire_replica_t got[1];
    const struct {
        uint64_t off1, len1, off2, len2;
        int ok;
    } cases[] = {
        {UINT64_MAX - 1, 1, 0, 0, 1},      /* ends exactly at 2^64 - 1 */
        {UINT64_MAX - 1, 2, 0, 0, 0},      /* offset + length wraps */
        {UINT64_MAX, 1, 0, 0, 1},          /* a hole (MC__WIRE_HOLE) */
        {UINT64_MAX, UINT64_MAX, 0, 1, 0}, /* a hole: lengths add up past 2^64 */
        {1, UINT64_MAX, 0, 0, 0},          /* offset + length wraps */
        {0, UINT64_MAX, 0, 0, 1},          /* one huge extent */
        {0, UINT64_MAX, 0, 1, 0},          /* lengths add up past 2^64 */
        {0, 1ull << 63, 0, 1ull << 63, 0}, /* lengths add up to 2^64 */
        {0, 1ull << 62, 1ull << 62, 3, 1}, /* fine */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        mc__wbuf_t w = {0};
        mc__pack(&w, "uuqssuqqqq", 1u, 1u, (uint64_t)1, "", (uint32_t)0, "", (uint32_t)0, 2u,
                 cases[i].off1, cases[i].len1, cases[i].off2, cases[i].len2);
        const char *p = w.p;
        size_t n = w.len;
        int rc = mc__take_replicas(&p, &n, got, 1);
        if (cases[i].ok) {
            assert_int_equal(rc, 1);
        } else {
            assert_int_equal(rc, -EBADMSG);
        }
        free(w.p);
    }
}

/* A GET_REPLICAS response as a client reads it: lease length, stat, then
 * replica set, then nothing. */
static void test_get_replicas_body(void **state)
{
    rep_t r[2];
    mc__wire_replica_t got[4];
    mc__wbuf_t w = {0};
    mc_stat_t st;

    make_replicas(r, 2);
    mc__pack(&w, "q", (uint64_t)5000);
    mc__pack_stat(&w, &some_stat);
    pack_replicas(&w, r, 2);
    assert_int_equal(w.err, 0);

    const char *rest;
    uint32_t rlen;
    uint64_t lease;
    assert_int_equal(
        mc__unpack(w.p, w.len, mc__op_format(MC__OP_GET_REPLICAS, 1), &lease, &rest, &rlen), 0);
    assert_int_equal(lease, 5000);
    const char *p = rest;
    size_t n = rlen;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    assert_stat_equal(&st, &some_stat);
    assert_int_equal(mc__take_replicas(&p, &n, got, 4), 2);
    assert_int_equal(n, 0);
    free(w.p);
}

/* ---- listings ---- */

static void assert_list_equal(const mc_list_t *a, const mc_list_t *b)
{
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->more, b->more);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(a->entries[i].klen, b->entries[i].klen);
        assert_memory_equal(a->entries[i].key, b->entries[i].key, a->entries[i].klen);
        assert_int_equal(b->entries[i].key[b->entries[i].klen], '\0');
        assert_int_equal(a->entries[i].is_prefix, b->entries[i].is_prefix);
        assert_stat_equal(&a->entries[i].st, &b->entries[i].st);
    }
    if (b->n) {
        assert_ptr_equal(b->next, b->entries[b->n - 1].key);
        assert_int_equal(b->next_len, b->entries[b->n - 1].klen);
    } else {
        assert_null(b->next);
        assert_int_equal(b->next_len, 0);
    }
}

static void check_list(size_t count, int more)
{
    mc_list_t *l = make_list(count, more), *got = NULL;
    mc__wbuf_t w = {0};

    assert_int_equal(mc__pack_list(&w, l), 0);
    char *body = dup_bytes(w.p, w.len);
    assert_int_equal(mc__take_list(body, w.len, &got), (int)count);
    assert_list_equal(l, got);
    mc_list_free(got); /* the library's own free: the layouts agree */

    for (size_t cut = 0; cut < w.len; cut++) {
        char *part = dup_bytes(body, cut);
        got = (mc_list_t *)0x1;
        assert_int_equal(mc__take_list(part, cut, &got), -EBADMSG);
        assert_ptr_equal(got, (mc_list_t *)0x1); /* untouched */
        free(part);
    }
    char *longer = malloc(w.len + 1);
    assert_non_null(longer);
    memcpy(longer, body, w.len);
    longer[w.len] = 0;
    assert_int_equal(mc__take_list(longer, w.len + 1, &got), -EBADMSG);
    free(longer);

    free(body);
    free(w.p);
    mc_list_free(l);
}

static void assert_same_wbuf(const mc__wbuf_t *a, const mc__wbuf_t *b)
{
    assert_int_equal(a->len, b->len);
    assert_memory_equal(a->p, b->p, a->len);
}

/* A heap copy of w's bytes and one byte more, to cut at every length up
 * to one past the end (a trailing byte). */
static char *with_tail(const mc__wbuf_t *w)
{
    char *c = malloc(w->len + 1);
    assert_non_null(c);
    memcpy(c, w->p, w->len);
    c[w->len] = 'x';
    return c;
}

/* The put requests' own codecs write the bytes their formats do, and
 * decode (and refuse) what mc__unpack() does, cut at every length. */
static void check_typed_start(const mc__put_start_rq_t *rq)
{
    mc__wbuf_t a = {0}, b = {0};
    int ra = mc__pack(&a, "kquuuuqisuuuq", rq->key, rq->klen, rq->capacity, rq->flags, rq->mode,
                      rq->replicas, rq->pin, rq->pin_ttl_ms, rq->mtime_ns, rq->pref, rq->plen,
                      rq->uid, rq->gid, rq->type, rq->rdev);
    int rb = mc__pack_put_start(&b, rq);
    assert_int_equal(ra, rb);
    if (ra == 0) {
        assert_same_wbuf(&a, &b);
        for (size_t cut = 0; cut <= a.len + 1; cut++) {
            char *c = with_tail(&a);
            mc__put_start_rq_t t;
            const char *k, *pf;
            uint32_t kl, f, m, r, pn, pl, uid, gid, ty;
            uint64_t cap, ttl, rdev;
            int64_t mt;
            int ua = mc__unpack(c, cut, "kquuuuqisuuuq", &k, &kl, &cap, &f, &m, &r, &pn, &ttl, &mt,
                                &pf, &pl, &uid, &gid, &ty, &rdev);
            int ub = mc__take_put_start(c, cut, &t);
            assert_int_equal(ua, ub);
            if (ub == 0) {
                assert_int_equal(t.klen, rq->klen);
                assert_memory_equal(t.key, rq->key, rq->klen);
                assert_int_equal(t.capacity, rq->capacity);
                assert_int_equal(t.flags, rq->flags);
                assert_int_equal(t.mode, rq->mode);
                assert_int_equal(t.replicas, rq->replicas);
                assert_int_equal(t.pin, rq->pin);
                assert_int_equal(t.pin_ttl_ms, rq->pin_ttl_ms);
                assert_int_equal(t.mtime_ns, rq->mtime_ns);
                assert_int_equal(t.plen, rq->plen);
                assert_memory_equal(t.pref, rq->pref, rq->plen);
                assert_int_equal(t.uid, rq->uid);
                assert_int_equal(t.gid, rq->gid);
                assert_int_equal(t.type, rq->type);
                assert_int_equal(t.rdev, rq->rdev);
            }
            free(c);
        }
    }
    free(a.p);
    free(b.p);
}

static void check_typed_commit(const mc__put_commit_rq_t *rq)
{
    mc__wbuf_t a = {0}, b = {0};
    int ra = mc__pack(&a, "qkquui", rq->id, rq->key, rq->klen, rq->size, rq->what, rq->mode,
                      rq->mtime_ns);
    int rb = mc__pack_put_commit(&b, rq);
    assert_int_equal(ra, rb);
    if (ra == 0) {
        assert_same_wbuf(&a, &b);
        for (size_t cut = 0; cut <= a.len + 1; cut++) {
            char *c = with_tail(&a);
            mc__put_commit_rq_t t;
            uint64_t id, size;
            const char *k;
            uint32_t kl, wh, m;
            int64_t mt;
            int ua = mc__unpack(c, cut, "qkquui", &id, &k, &kl, &size, &wh, &m, &mt);
            int ub = mc__take_put_commit(c, cut, &t);
            assert_int_equal(ua, ub);
            if (ub == 0) {
                assert_int_equal(t.id, rq->id);
                assert_int_equal(t.klen, rq->klen);
                assert_memory_equal(t.key, rq->key, rq->klen);
                assert_int_equal(t.size, rq->size);
                assert_int_equal(t.what, rq->what);
                assert_int_equal(t.mode, rq->mode);
                assert_int_equal(t.mtime_ns, rq->mtime_ns);
            }
            free(c);
        }
    }
    free(a.p);
    free(b.p);
}

static void test_put_requests_typed(void **state)
{
    (void)state;
    static char longkey[MC_KEY_MAX + 1];
    memset(longkey, 'k', sizeof(longkey));
    const struct {
        const char *key;
        uint32_t klen;
    } keys[] = {{"a/b", 3},
                {"x", 1},
                {"", 0},
                {"a\0b", 3},
                {longkey, MC_KEY_MAX},
                {longkey, MC_KEY_MAX + 1}};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        mc__put_start_rq_t s = {.key = keys[i].key,
                                .klen = keys[i].klen,
                                .capacity = 0x0102030405060708ull,
                                .flags = 3,
                                .mode = 0644,
                                .replicas = 2,
                                .pin = 1,
                                .pin_ttl_ms = 7000,
                                .mtime_ns = -5,
                                .pref = i % 2 ? "10.0.0.1:7000" : "",
                                .plen = i % 2 ? 13 : 0,
                                .uid = 1000 + (uint32_t)i,
                                .gid = MC_OWNER_NONE,
                                .type = MC_TYPE_BLK,
                                .rdev = 0x0807060504030201ull};
        check_typed_start(&s);
        mc__put_commit_rq_t c = {.id = 0xfedcba9876543210ull,
                                 .key = keys[i].key,
                                 .klen = keys[i].klen,
                                 .size = 1024,
                                 .what = MC_META_MODE | MC_META_MTIME,
                                 .mode = 0600,
                                 .mtime_ns = 1700000000000000000ll};
        check_typed_commit(&c);
    }
}

/* A replica's head and extents written by their own encoders are the
 * bytes "u" + "uqssu" + "qq"... would be, and decode back. */
static void test_replica_encoder(void **state)
{
    (void)state;
    mc__wbuf_t a = {0}, b = {0};
    mc__pack(&a, "uuqssuqqqq", 1u, 9u, (uint64_t)77, "h:1", 3u, "rd", 2u, 2u, (uint64_t)4096,
             (uint64_t)100, (uint64_t)8192, (uint64_t)24);
    mc__pack(&b, "u", 1u);
    assert_int_equal(mc__pack_replica(&b, 9, 77, "h:1", 3, "rd", 2, 2), 0);
    assert_int_equal(mc__pack_extent(&b, 4096, 100), 0);
    assert_int_equal(mc__pack_extent(&b, 8192, 24), 0);
    assert_same_wbuf(&a, &b);
    const char *p = b.p;
    size_t n = b.len;
    mc__wire_replica_t r;
    assert_int_equal(mc__take_replicas(&p, &n, &r, 1), 1);
    assert_int_equal(n, 0);
    assert_int_equal(r.epoch, 77);
    uint64_t off, len;
    mc__wire_extent(&r, 1, &off, &len);
    assert_int_equal(off, 8192);
    assert_int_equal(len, 24);
    free(a.p);
    free(b.p);
}

static void test_list_round_trip(void **state)
{
    check_list(0, 0);
    check_list(0, 1);
    check_list(1, 0);
    check_list(7, 1);
    check_list(100, 0);
}

/* The layout of one listing entry, written without the codec. */
static void ref_entry(ref_t *r, const char *key, uint32_t klen, unsigned is_prefix)
{
    ref_le(r, klen, 4);
    ref_bytes(r, key, klen);
    ref_le(r, is_prefix, 1);
    for (int i = 0; i < 36; i++)
        ref_byte(r, 0);
}

static void test_list_malformed(void **state)
{
    mc_list_t *got = NULL;
    const struct {
        const char *what;
        uint32_t count, more;
        const char *key;
        uint32_t klen;
        unsigned is_prefix;
    } cases[] = {
        {"more is 2", 1, 2, "a", 1, 0},
        {"is_prefix is 2", 1, 0, "a", 1, 2},
        {"empty key", 1, 0, "", 0, 0},
        {"NUL in key", 1, 0, "a\0b", 3, 0},
        {"count past the bytes", 2, 0, "a", 1, 0},
        {"count 2^32 - 1", 0xffffffffu, 0, "a", 1, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ref_t r = {0};
        ref_le(&r, cases[i].count, 4);
        ref_le(&r, cases[i].more, 4);
        ref_entry(&r, cases[i].key, cases[i].klen, cases[i].is_prefix);
        char *body = dup_bytes(r.b, r.n);
        if (mc__take_list(body, r.n, &got) != -EBADMSG)
            fail_msg("listing with %s was accepted", cases[i].what);
        free(body);
        free(r.b);
    }

    /* A key of MC_KEY_MAX + 1 bytes. */
    static char long_key[MC_KEY_MAX + 1];
    memset(long_key, 'k', sizeof(long_key));
    ref_t r = {0};
    ref_le(&r, 1, 4);
    ref_le(&r, 0, 4);
    ref_entry(&r, long_key, sizeof(long_key), 0);
    assert_int_equal(mc__take_list((const char *)r.b, r.n, &got), -EBADMSG);
    free(r.b);

    /* The encoder refuses a bad key too. */
    mc_list_t *l = make_list(2, 0);
    free((char *)l->entries[1].key);
    l->entries[1].key = strdup("");
    l->entries[1].klen = 0;
    mc__wbuf_t w = {0};
    assert_int_equal(mc__pack_list(&w, l), -EINVAL);
    free(w.p);
    mc_list_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stat_round_trip),
        cmocka_unit_test(test_replicas_round_trip),
        cmocka_unit_test(test_replicas_lying_counts),
        cmocka_unit_test(test_replicas_extent_overflow),
        cmocka_unit_test(test_get_replicas_body),
        cmocka_unit_test(test_put_requests_typed),
        cmocka_unit_test(test_replica_encoder),
        cmocka_unit_test(test_list_round_trip),
        cmocka_unit_test(test_list_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
