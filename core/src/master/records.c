/*
 * records.c - what nodes keep so that a master that restarts loses nothing
 * (see master.h): the dirty list of versions whose record changed, the
 * record of a version as a node keeps it, and merging the records nodes
 * report into an empty master.
 *
 * A node holds bytes; the master holds the metadata. So that a restarted
 * master can rebuild its namespace from the nodes, each node keeps, for
 * every published version with a replica in its segment, that version's
 * record (key, metadata, its extents there). The master tells it through
 * notices (service.c, nodes.c), sent after the fact: a change only marks its
 * version dirty here (a pointer on a list, on the commit path), and
 * mc__master_flush() stamps each dirty version once however often it
 * changed. Versions leaving the namespace are told at once, as drops.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master/master_i.h"

void mc__master_notices(mc__master_t *m, mc__notice_cb cb, void *arg)
{
    m->notice = cb;
    m->notice_arg = arg;
}

/* ---- the dirty versions ----
 *
 * A version whose nodes' records are stale sits in the dirty array (in the
 * order it became dirty) and in the table of their places there, by its
 * address (ptrmap.h), so that one leaving before the flush is found (and
 * its place emptied) without a walk. Both hold only what changed since the
 * last flush: a version keeps no field for it. */

/* Marks v dirty (mc__master_dirty() without telling a rebuilt version
 * changed: a merge's, or the master's own change of it). */
static void dirty(mc__master_t *m, mc__version_t *v)
{
    if (!m->notice || !v || v->state != MC__PUBLISHED || mc__ptrmap_find(&m->dplace, v))
        return;
    if (m->ndirty == m->dcap) {
        size_t cap = m->dcap ? m->dcap * 2 : 64;
        mc__version_t **d = realloc(m->dirty, cap * sizeof(*d));
        if (!d) {
            m->dirty_all = 1; /* out of memory: the next flush tells every version */
            return;
        }
        m->dirty = d;
        m->dcap = cap;
    }
    if (mc__ptrmap_add(&m->dplace, v, m->ndirty) < 0) {
        m->dirty_all = 1;
        return;
    }
    m->dirty[m->ndirty++] = v;
}

/* The entry of rebuilt version v, NULL for a version this run made. */
static mc__recovered_t *rebuilt_entry(const mc__master_t *m, const mc__version_t *v)
{
    if (!(v->flags & MC__V_REBUILT))
        return NULL;
    mc__recovered_t *e = (mc__recovered_t *)mc__ids_get(&m->rebuilt, v->id);
    return e && e->v == v ? e : NULL;
}

void mc__master_dirty(mc__master_t *m, mc__version_t *v)
{
    mc__recovered_t *e = v ? rebuilt_entry(m, v) : NULL;
    if (e)
        e->changed = 1;
    dirty(m, v);
}

void mc__master_dirty_records(mc__master_t *m, mc__version_t *v)
{
    dirty(m, v);
}

void mc__master_moved(mc__master_t *m, mc__version_t *v)
{
    mc__recovered_t *e = rebuilt_entry(m, v);
    if (e)
        e->moved = 1;
    mc__master_dirty(m, v);
}

/* Whether v, under its key, is newer than any record's version of that
 * key, whatever the ids: this run made it or moved it there, after every
 * record of a run before (a clock set back gives this run's ids below
 * theirs). */
static int this_runs(const mc__master_t *m, const mc__version_t *v)
{
    if (!(v->flags & MC__V_REBUILT))
        return 1;
    const mc__recovered_t *e = rebuilt_entry(m, v);
    return e && e->moved;
}

void mc__master_undirty(mc__master_t *m, mc__version_t *v)
{
    mc__ptrslot_t *e = mc__ptrmap_find(&m->dplace, v);
    if (!e)
        return;
    m->dirty[e->val] = NULL; /* the flush passes over it */
    mc__ptrmap_del(&m->dplace, e);
}

/* Stamps v and hands it to the notice callback. */
static void flush_one(mc__master_t *m, mc__version_t *v)
{
    ++m->stamp;
    v->flags |= MC__V_NOTED;
    mc__recovered_t *e = rebuilt_entry(m, v);
    if (e) /* its nodes' records have this stamp now */
        e->stamp = m->stamp;
    if (m->notice)
        m->notice(m->notice_arg, m, v, 0);
}

void mc__master_flush(mc__master_t *m)
{
    /* In the order they became dirty; the callback may mark more. */
    while (m->dhead < m->ndirty) {
        mc__version_t *v = m->dirty[m->dhead++];
        if (!v)
            continue; /* left before the flush */
        mc__ptrslot_t *e = mc__ptrmap_find(&m->dplace, v);
        if (e)
            mc__ptrmap_del(&m->dplace, e);
        flush_one(m, v);
    }
    m->dhead = m->ndirty = 0;
    if (m->dplace.cap > 1024)
        mc__ptrmap_reset(&m->dplace); /* a burst passed: the table goes with it */
    if (m->dirty_all) {
        m->dirty_all = 0;
        mc__index_iter_t it;
        void *val;
        mc__index_seek(m->ix, &it, NULL, 0, 0);
        while (mc__index_next(&it, NULL, NULL, &val))
            flush_one(m, val);
    }
}

const mc__extent_t *mc__master_record(const mc__master_t *m, const mc__version_t *v, uint32_t seg,
                                      mc__rec_t *r, mc__extent_t *one)
{
    memset(r, 0, sizeof(*r));
    r->version = v->id;
    r->stamp = m->stamp;
    r->key = mc__vkey(v);
    r->klen = v->klen;
    r->link = mc__vmore(v)->link;
    r->linklen = mc__vmore(v)->linklen;
    r->size = mc__vsize(v);
    r->mtime_ns = v->mtime_ns;
    r->atime_ns = mc__vatime(v);
    r->ctime_ns = mc__vctime(v);
    r->mode = v->mode;
    mc__version_owner(m, v, &r->uid, &r->gid);
    r->type = v->type;
    r->rdev = mc__vmore(v)->rdev;
    r->links = mc__vmore(v)->links;
    /* A soft pin's expiry is a time of this master's clock: not kept. */
    r->pin = v->pin == MC_PIN_SOFT && mc__vmore(v)->pin_until ? MC_PIN_NONE : v->pin;
    r->want = v->want;
    r->xattr = mc__vmore(v)->xattr;
    r->xattr_len = mc__vmore(v)->xattr_len;
    for (uint32_t i = 0; i < v->nrep; i++) {
        mc__replica_t rep = mc__vrep_get(v, i, one);
        if (rep.seg == seg) {
            r->next = rep.n;
            return rep.ext; /* v's own array, or its one extent in *one */
        }
    }
    return NULL;
}

/* ---- the count of a hard-linked file's names ----
 *
 * A live master keeps an inode's count equal to its names in the index
 * (link, remove). The records of a file and of its names may sit on
 * different nodes (a name's on the file's nodes when it was made or
 * renamed, the file's on the nodes of its latest version) and reach a new
 * master in any order, from nodes that fetched more or fewer of the last
 * notices: a count taken from the file's record can be below the names
 * that come back, and removing one would free the file under another. So
 * a rebuilt inode counts the names merged, not its record's count. */

int mc__inode_no(const char *key, size_t klen, uint64_t *no)
{
    if (!mc__master_is_inode_key(key, klen) || klen == MC__INODE_PLEN ||
        klen - MC__INODE_PLEN > 16 || key[MC__INODE_PLEN] == '0')
        return 0;
    uint64_t n = 0;
    for (size_t i = MC__INODE_PLEN; i < klen; i++) {
        char c = key[i];
        if (c >= '0' && c <= '9')
            n = n << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            n = n << 4 | (uint64_t)(c - 'a' + 10);
        else
            return 0;
    }
    *no = n;
    return 1;
}

/* Adds delta names to those waiting for inode number no. */
static int waiting_add(mc__master_t *m, uint64_t no, int64_t delta)
{
    mc__waiting_t *w = m->waiting.b ? (mc__waiting_t *)mc__ids_get(&m->waiting, no) : NULL;
    if (!w && delta <= 0)
        return 0;
    if (!m->waiting.b && mc__ids_init(&m->waiting) < 0)
        return -ENOMEM;
    if (!w) {
        if (!(w = calloc(1, sizeof(*w))))
            return -ENOMEM;
        w->h.id = no;
        mc__ids_add(&m->waiting, &w->h);
    }
    int64_t n = (int64_t)w->names + delta;
    w->names = n < 0 ? 0 : n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    if (w->names == 0)
        free(mc__ids_del(&m->waiting, no));
    return 0;
}

int mc__master_count_name(mc__master_t *m, const char *ino, size_t ilen, int delta)
{
    mc__version_t *f = mc__index_get(m->ix, ino, ilen);
    if (f && delta < 0) {
        if (mc__vmore(f)->links) /* has rare fields then */
            f->rare->links--;
        return 0;
    }
    if (f) {
        mc__vmore_t *x = mc__version_more(f);
        if (!x)
            return -ENOMEM;
        x->links++;
        return 0;
    }
    uint64_t no;
    return mc__inode_no(ino, ilen, &no) ? waiting_add(m, no, delta) : 0;
}

int mc__master_names_wait(mc__master_t *m, const mc__version_t *f)
{
    uint64_t no;
    uint32_t n = mc__vmore(f)->links;
    return n && mc__inode_no(mc__vkey(f), f->klen, &no) ? waiting_add(m, no, n) : 0;
}

/* The count of names waiting for inode key ino[0..ilen) (0: none). */
static uint32_t names_waiting(const mc__master_t *m, const char *ino, size_t ilen)
{
    uint64_t no;
    if (!m->waiting.b || !mc__inode_no(ino, ilen, &no))
        return 0;
    const mc__waiting_t *w = (const mc__waiting_t *)mc__ids_get(&m->waiting, no);
    return w ? w->names : 0;
}

uint32_t mc__master_names_take(mc__master_t *m, const char *ino, size_t ilen)
{
    uint64_t no;
    if (!m->waiting.b || !mc__inode_no(ino, ilen, &no))
        return 0;
    mc__waiting_t *w = (mc__waiting_t *)mc__ids_del(&m->waiting, no);
    uint32_t n = w ? w->names : 0;
    free(w);
    return n;
}

/* ---- merging ---- */

/* 1 if xattr[0..len) is a well-formed packed list (xattr.c's layout)
 * within the per-object limits. */
static int xattrs_ok(const char *x, uint32_t len)
{
    if (len > MC_XATTR_TOTAL_MAX)
        return 0;
    for (uint32_t at = 0; at < len;) {
        uint32_t nl = (unsigned char)x[at], vl;
        if (nl == 0 || len - at < 1 + nl + sizeof(vl))
            return 0;
        memcpy(&vl, x + at + 1 + nl, sizeof(vl));
        if (vl > MC_XATTR_SIZE_MAX || len - at - 1 - nl - sizeof(vl) < vl)
            return 0;
        at += 1 + nl + (uint32_t)sizeof(vl) + vl;
    }
    return 1;
}

/* Takes the record's extents out of segment s's free space into *rep.
 * Returns 0, or -EBUSY (some are not free: nothing is taken) / -ENOMEM. */
static int take_extents(mc__segment_t *s, const mc__rec_t *r, const mc__extent_t *ext,
                        mc__replica_t *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->seg = s->id;
    if (!r->next)
        return 0;
    rep->ext = malloc(sizeof(*rep->ext) * mc__replica_room(r->next));
    if (!rep->ext)
        return -ENOMEM;
    for (uint32_t i = 0; i < r->next; i++) {
        uint64_t off = ext[i].off, len = ext[i].len;
        int rc = off == MC__HOLE ? 0 : mc__alloc_take(s->alloc, off, len); /* a hole: no space */
        if (rc < 0) {
            mc__extents_put(s->alloc, rep->ext, rep->n);
            free(rep->ext);
            rep->ext = NULL;
            return rc == -ENOMEM ? rc : -EBUSY;
        }
        rep->ext[rep->n++] = (mc__extent_t){off, len};
    }
    return 0;
}

static uint64_t rec_bytes(const mc__rec_t *r, const mc__extent_t *ext)
{
    uint64_t t = 0;
    for (uint32_t i = 0; i < r->next; i++)
        t += ext[i].len;
    return t;
}

/* Sets v's metadata (not its key or replicas) from r. Returns 0 or -ENOMEM
 * (its owner may have changed then, nothing else). */
static int take_meta(mc__master_t *m, mc__version_t *v, const mc__rec_t *r)
{
    char *x = NULL;
    mc__vmore_t *more = NULL;
    if ((r->xattr_len || r->rdev || r->links || r->ctime_ns != r->mtime_ns ||
         r->size >= MC__VSIZE_BIG || v->has_more) &&
        !(more = mc__version_more(v)))
        return -ENOMEM;
    if (mc__version_set_owner(m, v, r->uid, r->gid) < 0)
        return -ENOMEM;
    if (r->xattr_len && !(x = malloc(r->xattr_len)))
        return -ENOMEM;
    if (x)
        memcpy(x, r->xattr, r->xattr_len);
    if (more) { /* rare fields: a version without any stays without */
        free(more->xattr);
        more->xattr = x;
        more->xattr_len = r->xattr_len;
        more->rdev = r->rdev;
        more->pin_until = 0; /* links: the names merged count (above) */
    }
    (void)mc__version_set_size(v, r->size); /* cannot fail: its rare fields are made */
    v->mtime_ns = r->mtime_ns;
    mc__version_set_atime(v, r->atime_ns);
    (void)mc__version_set_ctime(v, r->ctime_ns); /* cannot fail: its rare fields are made */
    v->mode = r->mode & 07777;
    v->type = r->type;
    v->pin = r->pin;
    v->want = r->want > MC__MAX_REPLICAS ? MC__MAX_REPLICAS : r->want;
    v->flags |= MC__V_NOTED; /* its nodes keep its record */
    return 0;
}

/* Puts v (not in the index yet) under key[0..klen), which it owns already
 * in v->key, replacing an older version there: a name (its file counts one
 * name less), or an older version of an inode v is (v takes its count of
 * names; v has rare fields, see mc__master_merge()). Returns 0, -ENOMEM. */
static int publish(mc__master_t *m, mc__version_t *v, uint64_t now)
{
    void *old = NULL;
    int rc = mc__index_insert(m->ix, v, &old);
    if (rc < 0)
        return rc;
    v->state = MC__PUBLISHED;
    mc__lru_touch(m, v);
    if (rc == 1 && old && old != v) {
        const mc__vmore_t *ox = mc__vmore(old);
        if (ox->link)
            (void)mc__master_count_name(m, ox->link, ox->linklen, -1); /* cannot fail */
        else if (ox->links && v->has_more)
            v->rare->links = ox->links;
        mc__master_retire(m, old, now);
    }
    return 0;
}

static uint64_t reported_id(const mc__master_t *m, const mc__version_t *v);

/* Takes v out of the namespace (replaced, or out of memory). */
static void rebuilt_leaves(mc__master_t *m, mc__version_t *v, uint64_t now)
{
    if (mc__vmore(v)->link) /* a name: its file counts one less */
        (void)mc__master_count_name(m, mc__vmore(v)->link, mc__vmore(v)->linklen, -1);
    mc__master_retire(m, v, now);
}

/* A later record of version v (rebuilt already) renames it: it moves when
 * its new key holds no newer version, and leaves when it does (it was
 * replaced there). Newer: what this run made or renamed there (after every
 * record of a run before, whatever the ids: this_runs()), or a version
 * rebuilt from a record of a higher id. */
static void rekey(mc__master_t *m, mc__version_t *v, const mc__rec_t *r, uint64_t now)
{
    if ((r->klen == v->klen && memcmp(r->key, mc__vkey(v), r->klen) == 0) ||
        mc__master_is_inode_key(mc__vkey(v), v->klen) || mc__master_is_inode_key(r->key, r->klen))
        return; /* an inode's key never changes */
    mc__version_t *there = mc__index_get(m->ix, r->key, r->klen);
    if (there && (this_runs(m, there) || reported_id(m, there) >= reported_id(m, v))) {
        mc__index_remove(m->ix, mc__vkey(v), v->klen);
        rebuilt_leaves(m, v, now);
        return;
    }
    char *k = mc__version_more(v) ? mc__dup_key(r->key, r->klen) : NULL;
    if (!k || mc__index_reserve(m->ix, 1) < 0) {
        free(k);
        return;
    }
    mc__index_remove(m->ix, mc__vkey(v), v->klen);
    mc__version_set_key(v, k, r->klen);
    if (publish(m, v, now) < 0)
        rebuilt_leaves(m, v, now); /* out of memory: lost */
}

/* ---- ids handed out twice ----
 *
 * A master without etcd starts its ids at its wall clock (first_id), above
 * every id of the runs before only while the clock never went back. Set
 * back, it hands out ids that records not yet reported may carry, for
 * other keys; nodes keep records by id, and the next restart merges them
 * by id. So a record reported with an id at or above the first this run
 * handed out (first_made) is rebuilt under a new id, and its nodes are
 * told to keep it under that one (mc__master_merge() returns 2). The
 * order of the versions of a key stays that of the ids they were reported
 * under. */

/* The pair's other id of id in map t (0: none). */
static uint64_t renamed(const mc__ids_t *t, uint64_t id)
{
    const mc__renamed_t *e = t->b ? (const mc__renamed_t *)mc__ids_get(t, id) : NULL;
    return e ? e->id : 0;
}

/* A pair of entries for the maps, in one block (the maps' keys are set when
 * they are added); NULL if out of memory. */
static mc__renamed_t *rename_new(mc__master_t *m)
{
    if ((!m->renamed_to.b && mc__ids_init(&m->renamed_to) < 0) ||
        (!m->renamed_from.b && mc__ids_init(&m->renamed_from) < 0))
        return NULL;
    return calloc(2, sizeof(mc__renamed_t));
}

/* Adds pair (rename_new()): reported id from, id here to. */
static void rename_add(mc__master_t *m, mc__renamed_t *pair, uint64_t from, uint64_t to)
{
    pair[0] = (mc__renamed_t){.h.id = from, .id = to};
    pair[1] = (mc__renamed_t){.h.id = to, .id = from};
    mc__ids_add(&m->renamed_to, &pair[0].h);
    mc__ids_add(&m->renamed_from, &pair[1].h);
}

/* The id v's records were reported under (its order among them). */
static uint64_t reported_id(const mc__master_t *m, const mc__version_t *v)
{
    uint64_t from = renamed(&m->renamed_from, v->id);
    return from ? from : v->id;
}

int mc__master_merge(mc__master_t *m, uint32_t seg, const mc__rec_t *r, const mc__extent_t *ext,
                     uint64_t now)
{
    mc__segment_t *s = mc__master_seg(m, seg);
    uint64_t ino;
    if (!s)
        return 0;
    if (r->version == 0 || r->type > MC_TYPE_MAX || r->pin > MC_PIN_HARD ||
        (r->linklen && r->next) || !xattrs_ok(r->xattr, r->xattr_len) ||
        (r->linklen && !mc__inode_no(r->link, r->linklen, &ino)) ||
        (mc__master_is_inode_key(r->key, r->klen) &&
         (r->linklen || !mc__inode_no(r->key, r->klen, &ino))) ||
        mc_key_check(r->key, r->klen) < 0)
        return -EINVAL; /* inode keys: as masters make them (mc__inode_no()) */
    /* This run may have handed out its id (see above). */
    int clash = m->first_made && r->version >= m->first_made;
    /* Ids and stamps handed out from now on are newer than any reported. */
    if (r->version >= m->next_id)
        m->next_id = r->version + 1;
    if (r->stamp > m->stamp)
        m->stamp = r->stamp;

    /* A version rebuilt from the records of r->version: found by that id,
     * or if its id may be this run's, only by the one it took here (ids
     * this run handed out, renamed ones too, are not the record's). */
    uint64_t here = renamed(&m->renamed_to, r->version);
    mc__recovered_t *e = here    ? (mc__recovered_t *)mc__ids_get(&m->rebuilt, here)
                         : clash ? NULL
                                 : (mc__recovered_t *)mc__ids_get(&m->rebuilt, r->version);
    if (e && !e->v)
        return 0; /* rebuilt, then removed or replaced: it stays gone */
    mc__replica_t rep;
    if (e) {
        /* Another replica of a version rebuilt already. */
        mc__version_t *v = e->v;
        int rc = 1;
        int twice = 0; /* reported again (by the node and the op log) */
        for (uint32_t i = 0; i < v->nrep; i++)
            twice |= mc__vrep_seg(v, i) == seg;
        if (!mc__vmore(v)->link && !twice) {
            if (v->nrep >= MC__MAX_REPLICAS || rec_bytes(r, ext) != mc__vcap(v))
                return 0;
            if ((rc = take_extents(s, r, ext, &rep)) < 0)
                return rc == -ENOMEM ? rc : 0;
            if (mc__master_replica_attach(v, &rep) < 0) {
                mc__master_replica_release(m, &rep);
                return -ENOMEM;
            }
            rc = 1;
        }
        /* The metadata of the record with the latest stamp, unless this
         * run changed it. */
        if (!e->changed && r->stamp > e->meta) {
            if (take_meta(m, v, r) < 0)
                return -ENOMEM;
            e->meta = r->stamp;
            if (r->stamp > e->stamp)
                e->stamp = r->stamp;
            rekey(m, v, r, now);
        }
        if (r->stamp != e->stamp || (here && rc == 1))
            dirty(m, v); /* one of its nodes has a stale record */
        return here && rc == 1 ? 2 : rc;
    }

    /* A version this master has not seen: the newest version of a key wins.
     * Whatever this run made (not rebuilt) or renamed to the key was put
     * there after every record of a run before, whatever the ids say: they
     * grow across runs only while the wall clock does (first_id), a clock
     * set back leaves this run's ids below the records', and a rebuilt
     * version renamed over a key whose version was not reported yet may
     * have the lower id. Among records, the higher id they were reported
     * under. */
    mc__version_t *cur = mc__index_get(m->ix, r->key, r->klen);
    if (cur && (this_runs(m, cur) || reported_id(m, cur) >= r->version))
        return 0;
    uint64_t bytes = rec_bytes(r, ext);
    if (bytes < r->size || bytes - r->size >= m->o.align)
        return 0; /* not the space of this size */
    /* Compact to begin with: one extent or none goes in its fields, more
     * take an array (mc__master_replica_attach()). */
    mc__version_t *v = mc__version_new(m, r->key, r->klen, 0);
    e = calloc(1, sizeof(*e));
    mc__renamed_t *pair = clash ? rename_new(m) : NULL;
    int rc = v && e && (pair || !clash) ? 0 : -ENOMEM;
    int inode = mc__master_is_inode_key(r->key, r->klen); /* counts its names */
    mc__vmore_t *more = rc == 0 && (r->linklen || inode) ? mc__version_more(v) : NULL;
    if (rc == 0 && inode && !more)
        rc = -ENOMEM;
    if (rc == 0 && r->linklen && (!more || !(more->link = mc__dup_key(r->link, r->linklen))))
        rc = -ENOMEM;
    if (more)
        more->linklen = (uint16_t)r->linklen;
    if (rc == 0)
        rc = take_meta(m, v, r);
    if (rc == 0 && !r->linklen)
        rc = take_extents(s, r, ext, &rep);
    if (rc < 0) {
        if (v)
            mc__version_free(m, v);
        free(e);
        free(pair);
        return rc == -ENOMEM ? rc : 0;
    }
    v->id = clash ? m->next_id++ : r->version;
    mc__version_set_cap(v, bytes);
    if (!r->linklen && (rep.n == 0 || (rep.n == 1 && mc__x1_fits(&rep.ext[0])))) {
        /* Compact: its one extent (never a hole, one that fits) in x1,
         * whose length is bytes. */
        mc__extent_t one;
        if (rep.n) {
            one = rep.ext[0];
            free(rep.ext);
            rep.ext = &one;
        }
        mc__vrep_put(v, 0, &rep, &one);
        v->nrep = 1;
    } else if (!r->linklen && mc__master_replica_attach(v, &rep) < 0) {
        mc__master_replica_release(m, &rep);
        mc__version_free(m, v);
        free(e);
        free(pair);
        return -ENOMEM;
    }
    /* Its count of names: those merged before it (an older version's, or
     * those waiting for it) and one more for each merged after it. */
    if (r->linklen && mc__master_count_name(m, r->link, r->linklen, 1) < 0) {
        mc__version_destroy(m, v);
        free(e);
        free(pair);
        return -ENOMEM;
    }
    if (inode)
        more->links = names_waiting(m, r->key, r->klen);
    if (publish(m, v, now) < 0) {
        if (r->linklen)
            (void)mc__master_count_name(m, r->link, r->linklen, -1);
        mc__version_destroy(m, v);
        free(e);
        free(pair);
        return -ENOMEM;
    }
    if (inode)
        (void)mc__master_names_take(m, r->key, r->klen); /* counted now */
    e->h.id = v->id;
    e->v = v;
    e->stamp = r->stamp;
    e->meta = r->stamp;
    v->flags |= MC__V_REBUILT;
    mc__ids_add(&m->rebuilt, &e->h);
    if (!clash)
        return 1;
    rename_add(m, pair, r->version, v->id);
    dirty(m, v); /* its nodes keep it under its new id */
    return 2;
}

int mc__master_forget(mc__master_t *m, uint64_t id)
{
    if (id >= m->next_id)
        m->next_id = id + 1;
    if (mc__ids_get(&m->rebuilt, id))
        return 0;
    mc__recovered_t *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->h.id = id;
    mc__ids_add(&m->rebuilt, &e->h);
    return 0;
}

void mc__master_seen(mc__master_t *m, uint64_t id, uint64_t stamp)
{
    if (id >= m->next_id)
        m->next_id = id + 1;
    if (stamp > m->stamp)
        m->stamp = stamp;
}
