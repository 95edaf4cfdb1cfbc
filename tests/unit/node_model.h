/*
 * node_model.h - a node's store of records as core/src/client/node.c keeps
 * it (one record per version id, as the master's notices say), for the
 * tests of the service that restart its master: test_link_records.c and
 * test_record_ids.c. Include it after "svc_fixture.h".
 */
#ifndef MC_TEST_NODE_MODEL_H
#define MC_TEST_NODE_MODEL_H

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

/* A record the node keeps: the version's id and the record's bytes. */
typedef struct trec {
    uint64_t id;
    char *b;
    uint32_t len;
} trec_t;

/* A node: its id, its segment's, and its records. */
typedef struct tnode {
    uint64_t id;
    uint32_t seg;
    trec_t recs[64];
    int n;
} tnode_t;

static void node_forget(tnode_t *nd, uint64_t id)
{
    for (int i = 0; i < nd->n; i++) {
        if (nd->recs[i].id == id) {
            free(nd->recs[i].b);
            nd->recs[i] = nd->recs[--nd->n];
            return;
        }
    }
}

static void node_free(tnode_t *nd)
{
    while (nd->n)
        node_forget(nd, nd->recs[0].id);
}

/* Fetches and applies every notice waiting for nd's segment at f. */
static void node_take(fixture_t *f, tnode_t *nd, uint64_t now)
{
    uint64_t ack = 0;
    for (;;) {
        assert_int_equal(call(f, 0, now, MC__OP_RECORDS_TAKE, "quq", nd->id, nd->seg, ack), 0);
        if (f->resp.len == 0)
            return;
        ack = f->resp.len;
        const char *p = f->resp.p;
        size_t left = f->resp.len;
        while (left) {
            const char *e, *rest, *r, *b;
            uint32_t el, rl, len, bl;
            uint8_t kind;
            uint64_t id;
            assert_int_equal(mc__unpack(p, left, "s*", &e, &el, &rest, &rl), 0);
            assert_int_equal(mc__unpack(e, el, "bq*", &kind, &id, &r, &len), 0);
            node_forget(nd, id);
            if (kind == MC__NOTE_PUT) {
                assert_int_equal(mc__unpack(r, len, "s", &b, &bl), 0);
                assert_true(nd->n < 64);
                trec_t *t = &nd->recs[nd->n++];
                t->id = id;
                t->len = bl;
                t->b = malloc(bl);
                memcpy(t->b, b, bl);
            }
            p = rest;
            left = rl;
        }
    }
}

/* 1 if nd keeps a record of key. */
static int node_has(const tnode_t *nd, const char *key)
{
    for (int i = 0; i < nd->n; i++) {
        mc__rec_t r;
        assert_int_equal(mc__take_rec(nd->recs[i].b, nd->recs[i].len, &r), 0);
        if (r.klen == strlen(key) && memcmp(r.key, key, r.klen) == 0)
            return 1;
    }
    return 0;
}

/* nd mounts its segment again at the new master g (under its id of before,
 * or if another node has that one there, under a new one, as node.c does)
 * and reports every record it keeps. */
static void node_report(fixture_t *g, tnode_t *nd, uint64_t now)
{
    const char *addr = "127.0.0.1:7000";
    int rc;
    for (uint32_t seg = nd->seg;; seg = 0) {
        rc =
            call(g, 1, now, MC__OP_MOUNT_SEGMENT, "qusqsuq", nd->id, seg, addr,
                 (uint32_t)strlen(addr), 16 * MiB, "", 0u, (uint32_t)MC__MOUNT_REPORT, (uint64_t)5);
        if (rc != -EEXIST || !seg)
            break;
    }
    assert_int_equal(rc, 0);
    uint64_t run, epoch;
    assert_int_equal(mc__unpack(g->resp.p, g->resp.len, "uqq", &nd->seg, &run, &epoch), 0);
    mc__wbuf_t body = {0};
    for (int i = 0; i < nd->n; i++)
        mc__pack(&body, "s", nd->recs[i].b, nd->recs[i].len);
    assert_int_equal(call(g, 0, now, MC__OP_RECORDS_REPORT, "quu*", nd->id, nd->seg, 1u,
                          body.p ? body.p : "", (uint32_t)body.len),
                     0);
    free(body.p);
}

#pragma GCC diagnostic pop

#endif /* MC_TEST_NODE_MODEL_H */
