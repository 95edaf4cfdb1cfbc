/*
 * test_oplog.c - unit tests of the op log as data (core/src/master/oplog.c):
 * a view keeps the latest record of each version on each segment, forgets
 * a version dropped (and its late records), forgets a segment dropped,
 * refuses a batch that does not decode, and its snapshot applied to an
 * empty view gives the same view back.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/oplog.h"
#include "unit.h"

/* Appends to w the entry: segment seg, kind, version id, record rec. */
static void entry(mc__wbuf_t *w, uint32_t seg, uint8_t kind, uint64_t id, const char *rec)
{
    mc__wbuf_t note = {0};
    if (kind == MC__NOTE_PUT)
        mc__pack(&note, "bqs", kind, id, rec, (uint32_t)strlen(rec));
    else
        mc__pack(&note, "bq", kind, id);
    assert_int_equal(mc__oplog_pack(w, seg, note.p, note.len), 0);
    free(note.p);
}

typedef struct find {
    const char *rec;
    int found;
} find_t;

static void on_find(void *arg, const char *rec, size_t len)
{
    find_t *f = arg;
    f->found |= len == strlen(f->rec) && memcmp(rec, f->rec, len) == 0;
}

static int has(const mc__oplog_t *l, uint32_t seg, const char *rec)
{
    find_t f = {rec, 0};
    mc__oplog_each(l, seg, on_find, &f);
    return f.found;
}

static void on_count(void *arg, const char *rec, size_t len)
{
    (void)rec;
    (void)len;
    ++*(int *)arg;
}

static int count(const mc__oplog_t *l, uint32_t seg)
{
    int n = 0;
    mc__oplog_each(l, seg, on_count, &n);
    return n;
}

static void on_gone(void *arg, uint64_t id)
{
    *(uint64_t *)arg += id;
}

static void on_seg(void *arg, uint32_t seg)
{
    *(uint32_t *)arg |= 1u << seg;
}

static void test_latest_record_per_segment(void **state)
{
    mc__oplog_t *l;
    assert_int_equal(mc__oplog_new(&l), 0);
    mc__wbuf_t w = {0};
    entry(&w, 1, MC__NOTE_PUT, 10, "v10-a");
    entry(&w, 2, MC__NOTE_PUT, 10, "v10-a");
    entry(&w, 1, MC__NOTE_PUT, 11, "v11");
    entry(&w, 1, MC__NOTE_PUT, 10, "v10-b"); /* renamed: replaces the first */
    assert_int_equal(mc__oplog_apply(l, w.p, w.len), 0);
    assert_true(has(l, 1, "v10-b"));
    assert_false(has(l, 1, "v10-a"));
    assert_true(has(l, 2, "v10-a"));
    assert_int_equal(count(l, 1), 2);
    uint32_t segs = 0; /* each segment once */
    mc__oplog_each_seg(l, on_seg, &segs);
    assert_int_equal(segs, (1u << 1) | (1u << 2));

    /* A drop forgets the version everywhere, and its late records. */
    w.len = 0;
    entry(&w, 2, MC__NOTE_DROP, 10, NULL);
    entry(&w, 1, MC__NOTE_PUT, 10, "late");
    assert_int_equal(mc__oplog_apply(l, w.p, w.len), 0);
    assert_int_equal(count(l, 1), 1);
    assert_int_equal(count(l, 2), 0);
    uint64_t gone = 0;
    mc__oplog_each_gone(l, on_gone, &gone);
    assert_int_equal(gone, 10);

    /* Segments' nodes: the last mount says. */
    w.len = 0;
    entry(&w, 1, MC__LOG_SEG_NODE, 11, NULL);
    entry(&w, 3, MC__LOG_SEG_NODE, 12, NULL);
    entry(&w, 1, MC__LOG_SEG_NODE, 13, NULL);
    assert_int_equal(mc__oplog_apply(l, w.p, w.len), 0);
    assert_int_equal(mc__oplog_seg_node(l, 1), 13);
    assert_int_equal(mc__oplog_seg_node(l, 3), 12);
    assert_int_equal(mc__oplog_seg_node(l, 2), 0);

    /* A segment dropped: its records and its node go, the others' stay. */
    w.len = 0;
    entry(&w, 3, MC__NOTE_PUT, 12, "v12");
    entry(&w, 1, MC__LOG_SEG_GONE, 0, NULL);
    assert_int_equal(mc__oplog_apply(l, w.p, w.len), 0);
    assert_int_equal(count(l, 1), 0);
    assert_true(has(l, 3, "v12"));
    assert_int_equal(mc__oplog_seg_node(l, 1), 0);
    assert_int_equal(mc__oplog_seg_node(l, 3), 12);

    /* A batch cut short: refused. */
    w.len = 0;
    entry(&w, 3, MC__NOTE_PUT, 13, "v13");
    assert_int_equal(mc__oplog_apply(l, w.p, w.len - 1), -EBADMSG);
    free(w.p);
    mc__oplog_free(l);
}

/* A move: one replica of a version leaves (its record on that segment),
 * the version and its record elsewhere stay. */
static void test_replica_gone_keeps_the_version(void **state)
{
    (void)state;
    mc__oplog_t *l;
    assert_int_equal(mc__oplog_new(&l), 0);
    mc__wbuf_t w = {0};
    entry(&w, 1, MC__NOTE_PUT, 20, "v20");
    entry(&w, 2, MC__NOTE_PUT, 20, "v20");
    entry(&w, 1, MC__LOG_REP_GONE, 20, NULL);
    entry(&w, 3, MC__LOG_REP_GONE, 99, NULL); /* of no version: nothing */
    assert_int_equal(mc__oplog_apply(l, w.p, w.len), 0);
    assert_int_equal(count(l, 1), 0);
    assert_true(has(l, 2, "v20"));
    uint64_t gone = 0;
    mc__oplog_each_gone(l, on_gone, &gone);
    assert_int_equal(gone, 0);
    free(w.p);
    mc__oplog_free(l);
}

static void test_snapshot_round_trip(void **state)
{
    mc__oplog_t *l, *back;
    assert_int_equal(mc__oplog_new(&l), 0);
    mc__wbuf_t w = {0};
    char rec[32];
    for (uint64_t id = 1; id <= 300; id++) {
        snprintf(rec, sizeof(rec), "r%llu", (unsigned long long)id);
        entry(&w, (uint32_t)(id % 3 + 1), MC__NOTE_PUT, id, rec);
        if (id % 7 == 0)
            entry(&w, 1, MC__NOTE_DROP, id, NULL);
    }
    for (uint32_t seg = 1; seg <= 3; seg++)
        entry(&w, seg, MC__LOG_SEG_NODE, 10 + seg, NULL);
    assert_int_equal(mc__oplog_apply(l, w.p, w.len), 0);
    free(w.p);

    mc__wbuf_t *b;
    size_t n;
    assert_int_equal(mc__oplog_snapshot(l, 512, &b, &n), 0);
    assert_cmp(n, >, 1); /* cut into batches of at most 512 bytes */
    assert_int_equal(mc__oplog_new(&back), 0);
    for (size_t i = 0; i < n; i++) {
        assert_cmp(b[i].len, <=, 512);
        assert_int_equal(mc__oplog_apply(back, b[i].p, b[i].len), 0);
        free(b[i].p);
    }
    free(b);
    uint64_t live1, gone1, live2, gone2;
    mc__oplog_counts(l, &live1, &gone1);
    mc__oplog_counts(back, &live2, &gone2);
    assert_int_equal(live1, live2);
    assert_int_equal(gone1, gone2);
    assert_int_equal(gone1, 300 / 7);
    for (uint32_t seg = 1; seg <= 3; seg++)
        assert_int_equal(count(l, seg), count(back, seg));
    assert_true(has(back, 2, "r1"));
    assert_false(has(back, 1, "r7"));
    for (uint32_t seg = 1; seg <= 3; seg++)
        assert_int_equal(mc__oplog_seg_node(back, seg), 10 + seg);
    mc__oplog_free(l);
    mc__oplog_free(back);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_latest_record_per_segment),
        cmocka_unit_test(test_snapshot_round_trip),
        cmocka_unit_test(test_replica_gone_keeps_the_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
