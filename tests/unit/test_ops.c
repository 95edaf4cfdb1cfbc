/*
 * test_ops.c - unit tests of the life of an op (client/ops.c) through a
 * real embedded store (store_harness.h): ops made and freed on the loop
 * thread are kept for reuse.
 */
#include "store_harness.h"

/* Ops made on the loop thread are kept and reused (client/ops.c): a chain
 * of puts, stats and gets, each started from the previous one's callback, with
 * keys on both sides of the size of a reusable op (256 bytes with the
 * terminators), must leave each value under exactly its own key: no op
 * keeps a longer key's bytes, or the last one's fields (a get without a
 * stat must not fill the stat the op's previous user asked for). */
#define CHAIN 48
struct chain {
    mc_store_t *s;
    int i;
    char key[400], val[400], got[400];
    size_t klen;
    mc_stat_t st;
    int rc;
    cbw_t *done;
};

static size_t chain_key(int i, char *key)
{
    static const size_t lens[] = {300, 7, 254, 1, 255, 256, 120, 253};
    size_t n = lens[i % 8];
    memset(key, 'a' + i % 26, n);
    if (n >= 3)
        memcpy(key, (char[]){'0' + i / 10, '0' + i % 10, '-'}, 3);
    return n;
}

static void chain_step(void *arg, int rc);

static void chain_got(void *arg, int rc)
{
    struct chain *c = arg;
    if (rc != (int)c->klen || memcmp(c->got, c->val, c->klen) || c->st.size) {
        c->rc = rc < 0 ? rc : -EIO;
        return cbw_cb(c->done, c->rc);
    }
    c->i++;
    chain_step(c, 0);
}

static void chain_stat(void *arg, int rc)
{
    struct chain *c = arg;
    if (rc == 0 && c->st.size != c->klen)
        rc = -EIO;
    memset(&c->st, 0, sizeof(c->st)); /* a get without a stat leaves it so */
    if (rc < 0 || (rc = mc_get_async(c->s, c->key, c->klen, 0, c->got, sizeof(c->got), NULL,
                                     chain_got, c)) < 0)
        cbw_cb(c->done, rc);
}

static void chain_put(void *arg, int rc)
{
    struct chain *c = arg;
    if (rc < 0 || (rc = mc_stat_async(c->s, c->key, c->klen, &c->st, chain_stat, c)) < 0)
        cbw_cb(c->done, rc);
}

static void chain_step(void *arg, int rc)
{
    struct chain *c = arg;
    if (rc < 0 || c->i == CHAIN)
        return cbw_cb(c->done, rc);
    c->klen = chain_key(c->i, c->key);
    memcpy(c->val, c->key, c->klen);
    c->val[0] ^= 0x20; /* the value is not the key */
    if ((rc = mc_put_async(c->s, c->key, c->klen, c->val, c->klen, NULL, chain_put, c)) < 0)
        cbw_cb(c->done, rc);
}

static void chain_start(mc_store_t *s, void *arg)
{
    (void)s;
    chain_step(arg, 0);
}

static void test_ops_reused_on_the_loop(void **state)
{
    mc_store_t *s = *state;
    cbw_t done;
    struct chain c = {.s = s, .done = &done};
    char key[400], buf[400];
    mc_list_t *l = NULL;

    cbw_init(&done, s);
    on_loop(s, chain_start, &c);
    assert_int_equal(cbw_wait(&done), 0);
    assert_int_equal(c.i, CHAIN);
    for (int i = 0; i < CHAIN; i++) {
        size_t n = chain_key(i, key);
        assert_int_equal(mc_get(s, key, n, 0, buf, sizeof(buf), NULL), (int)n);
        assert_memory_equal(buf + 1, key + 1, n - 1);
    }
    assert_int_equal(mc_list(s, NULL, 0, NULL, 0, 0, 0, &l), CHAIN);
    assert_int_equal(l->n, CHAIN);
    for (size_t i = 0; i < l->n; i++) {
        int k = l->entries[i].klen >= 3
                    ? (l->entries[i].key[0] - '0') * 10 + (l->entries[i].key[1] - '0')
                    : -1;
        size_t n = 0;
        for (int j = 0; j < CHAIN && k < 0; j++) /* keys of 1 byte: find theirs */
            if ((n = chain_key(j, key)) == l->entries[i].klen && key[0] == l->entries[i].key[0])
                k = j;
        assert_true(k >= 0 && k < CHAIN);
        n = chain_key(k, key);
        assert_int_equal(l->entries[i].klen, n);
        assert_memory_equal(l->entries[i].key, key, n);
    }
    mc_list_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ops_reused_on_the_loop, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
