/*
 * _store_group.c - requests in flight. A request is a group of one or more
 * ops; each op is one chain of async library calls that runs on the store's
 * loop thread (a whole-object get is "read the first bytes and the size,
 * then open the version", chained on the loop thread). When the last op of a
 * group is done the group completes: a sync caller waiting with the GIL
 * released wakes up, or the group is queued on its Completer
 * (_store_completer.c) for the event loop.
 *
 * A get larger than its first read is opened (the handle pins the version)
 * and, when its bytes lie in this process's memory (the store's own segment,
 * or a co-located node's mapped over shared memory: mc_obj_view()), copied
 * once by the caller's thread into a result allocated at its final size
 * (mcpy_group_feed()): sync callers in several threads copy in parallel, and
 * an event loop's one thread shares a large group with the loop thread (the
 * group then comes back once more). Elsewhere (TCP, RDMA) the loop thread
 * reads the bytes into that result instead (also one more turn).
 *
 * Ownership: a group holds strong references to the keys, the value and
 * target objects (and their Py_buffer exports), the future, the Completer and
 * the Store until it is freed, which happens with the GIL held after it
 * completed (after the wait, or in drain). Cancelling a future therefore never
 * frees memory that the loop thread still writes into.
 */
#include "_store_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Below this many bytes, a copy's page faults are left to the copy. */
#define PREFAULT_MIN (64 * 1024)
#define PREFAULT_PAGE 4096

/* ---- the loop thread side: no Python here ---- */

/* Called once per group, on whichever thread finished its last op. */
static void group_done(group_t *g)
{
    StoreObject *store = g->store;
    if (g->comp) {
        /* Queued before it stops counting as in flight: close() waits for
         * nothing in flight and then drains, and must find it. (The group
         * may be freed at once, but its store cannot: Store_dealloc() waits
         * for this leave.) */
        mcpy_completer_push(g->comp, g);
        mcpy_store_leave(store);
    } else {
        mcpy_store_leave(store);
        pthread_mutex_lock(&g->mu);
        g->done = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
    }
}

static void op_finish(op_t *o, int result)
{
    o->result = result;
    group_t *g = o->g;
    /* Before the group can complete: the region lives until it is freed. */
    if (o->region)
        mcpy_region_idle(o->region);
    if (atomic_fetch_sub(&g->pending, 1) == 1)
        group_done(g);
}

static void op_cb(void *arg, int r);

/* Starts the library call for the op's current phase. Returns 0 (op_cb will
 * run) or -errno (it will not). */
/* K_GET's phases: the first read (which gives the size), the open of a
 * larger object, and its reads when it has no views. */
enum { GET_FIRST, GET_OPEN, GET_READ };

static int op_issue(op_t *o)
{
    mc_store_t *s = o->g->store->s;
    size_t n;
    switch (o->kind) {
    case K_GET:
        if (o->phase == GET_FIRST)
            return mc_get_async(s, o->key, o->klen, 0, o->buf, o->cap, &o->st, op_cb, o);
        if (o->phase == GET_OPEN)
            return mc_obj_open_async(s, o->key, o->klen, &o->obj, op_cb, o);
        n = o->len - o->off < READ_CHUNK ? o->len - o->off : READ_CHUNK;
        return mc_obj_read_async(o->obj, o->off, o->dst + o->off, n, op_cb, o);
    case K_GET_INTO:
        if (o->phase == 0)
            return mc_stat_async(s, o->key, o->klen, &o->st, op_cb, o);
        n = o->len - o->off < READ_CHUNK ? o->len - o->off : READ_CHUNK;
        return mc_get_async(s, o->key, o->klen, o->off, o->buf + o->off, n, &o->st, op_cb, o);
    case K_RANGE:
        return mc_get_async(s, o->key, o->klen, o->off, o->buf, o->cap, &o->st, op_cb, o);
    case K_PUT:
        return mc_putv_async(s, o->key, o->klen, o->iov, o->iovcnt, &o->g->po, op_cb, o);
    case K_STAT:
        return mc_stat_async(s, o->key, o->klen, &o->st, op_cb, o);
    case K_REMOVE:
        return mc_remove_async(s, o->key, o->klen, o->flags, op_cb, o);
    case K_LIST:
        return mc_list_async(s, o->key, o->klen, o->after, o->after ? o->alen : 0, 0,
                             o->max > 0 ? (size_t)o->max : 0, &o->list, op_cb, o);
    case K_STATFS:
        return mc_statfs_async(s, &o->sp, op_cb, o);
    }
    return -EINVAL;
}

/* K_GET: collects where the open version's bytes lie in this process's
 * memory. Returns 0, or -1 when some are elsewhere (or in too many pieces):
 * then nothing is kept. Loop thread. */
static int get_views(op_t *o)
{
    size_t cap = 0;
    for (uint64_t off = 0; off < o->len;) {
        const void *p;
        int64_t n = mc_obj_view(o->obj, off, o->len - off, &p);
        if (n <= 0 || (size_t)o->nviews == GET_MAX_VIEWS)
            goto elsewhere;
        if ((size_t)o->nviews == cap) {
            cap = cap ? 2 * cap : 4;
            struct iovec *nv = realloc(o->views, cap * sizeof(*nv));
            if (!nv)
                goto elsewhere;
            o->views = nv;
        }
        o->views[o->nviews++] = (struct iovec){(void *)p, (size_t)n};
        off += (uint64_t)n;
    }
    return 0;
elsewhere:
    free(o->views);
    o->views = NULL;
    o->nviews = 0;
    return -1;
}

/* K_GET: decides what follows a step. Returns 1 to issue the next one, 0
 * when the op is finished (for now) with *r set. */
static int get_step(op_t *o, int *r)
{
    switch (o->phase) {
    case GET_FIRST:
        if (o->st.size <= o->cap) {
            o->len = o->st.size;
            *r = 0;
            return 0;
        }
        o->phase = GET_OPEN; /* the version read so far may be replaced: pin one */
        return 1;
    case GET_OPEN:
        o->st = *mc_obj_stat(o->obj);
        if (o->st.size > SIZE_MAX || o->st.size > PY_SSIZE_T_MAX) {
            *r = -EFBIG;
            return 0;
        }
        o->len = o->st.size;
        /* The caller copies from the views, or gives the memory to read into. */
        o->need = get_views(o) < 0 && o->len > 0;
        *r = 0;
        return 0;
    default: /* GET_READ */
        if (*r == 0) {
            *r = -EIO; /* an open version cannot shrink */
            return 0;
        }
        o->off += (uint64_t)*r;
        if (o->off < o->len)
            return 1;
        *r = 0;
        return 0;
    }
}

/* K_GET_INTO: stat first so that a buffer too small is never written. */
static int get_into_step(op_t *o, int *r)
{
    if (o->phase == 0) {
        if (o->st.size > o->cap) {
            *r = -E_TOOSMALL;
            return 0;
        }
        o->phase = 1;
        o->off = 0;
        o->len = o->st.size;
        o->version = 0;
        return 1;
    }
    if (o->off == 0) {
        /* The version actually read decides the size. */
        if (o->st.size > o->cap) {
            *r = -E_TOOSMALL;
            return 0;
        }
        o->len = o->st.size;
        o->version = o->st.version;
    } else if (o->st.version != o->version) {
        if (++o->tries >= GET_MAX_TRIES) {
            *r = -EIO; /* replaced too often: INTERNAL_ERROR */
            return 0;
        }
        o->phase = 0;
        return 1;
    }
    o->off += (uint64_t)*r;
    if (o->off<o->len && * r> 0)
        return 1;
    *r = 0; /* the result is o->len bytes */
    return 0;
}

static void op_cb(void *arg, int r)
{
    op_t *o = arg;
    int again = 0;
    if (r >= 0) {
        switch (o->kind) {
        case K_GET:
            again = get_step(o, &r);
            break;
        case K_GET_INTO:
            again = get_into_step(o, &r);
            break;
        case K_RANGE:
            if (o->off + o->cap > o->st.size)
                r = -E_OUTSIDE;
            break;
        default:
            break;
        }
    }
    if (again) {
        int rc = op_issue(o);
        if (rc < 0)
            op_finish(o, rc);
        return;
    }
    op_finish(o, r);
}

/* Starts every op of g. Thread-safe; the GIL may or may not be held. */
static void group_submit(group_t *g)
{
    for (size_t i = 0; i < g->n; i++) {
        op_t *o = &g->ops[i];
        if (!o->issue)
            continue;
        o->issue = 0;
        int rc = op_issue(o);
        if (rc < 0)
            op_finish(o, rc);
    }
    if (atomic_fetch_sub(&g->pending, 1) == 1)
        group_done(g);
}

/* ---- groups, with the GIL ---- */

group_t *mcpy_group_new(StoreObject *self, size_t n, enum result_kind rk, int is_list)
{
    group_t *g = PyMem_Calloc(1, sizeof(*g) + n * sizeof(op_t));
    if (!g) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_INCREF(self);
    g->store = self;
    g->rk = rk;
    g->is_list = is_list;
    g->n = n;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    for (size_t i = 0; i < n; i++)
        g->ops[i].g = g;
    return g;
}

void mcpy_group_free(group_t *g)
{
    for (size_t i = 0; i < g->n; i++) {
        op_t *o = &g->ops[i];
        if (o->kind == K_GET) {
            free(o->buf);
            free(o->views);
            /* A closed store released the handle itself. */
            if (o->obj && g->store->s && !g->store->closing)
                mc_obj_close(o->obj);
        }
        if (o->kind == K_LIST) {
            Py_XDECREF(o->afterobj);
            if (o->list)
                mc_list_free(o->list);
        }
        Py_XDECREF(o->bytes);
        if (o->has_view)
            PyBuffer_Release(&o->view);
        if (o->region)
            mcpy_region_unuse(o->region);
        Py_XDECREF(o->keyobj);
    }
    for (int i = 0; i < g->nparts; i++)
        PyBuffer_Release(&g->parts[i]);
    PyMem_Free(g->parts);
    PyMem_Free(g->iov);
    PyMem_Free(g->pref);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    Py_XDECREF(g->fut);
    Py_XDECREF((PyObject *)g->comp);
    Py_DECREF(g->store);
    PyMem_Free(g);
}

/* Marks an op failed before submission. */
void mcpy_op_fail(op_t *o, int err)
{
    o->started = 0;
    o->result = -err;
}

void mcpy_op_prepare(op_t *o)
{
    switch (o->kind) {
    case K_GET:
        if (o->started) {
            o->cap = GET_FIRST_READ;
            o->buf = malloc(o->cap);
            if (!o->buf)
                mcpy_op_fail(o, ENOMEM);
        }
        break;
    case K_PUT:
        if (!o->iov) { /* not put_parts */
            o->one.iov_base = o->buf;
            o->one.iov_len = o->cap;
            o->iov = &o->one;
            o->iovcnt = 1;
        }
        break;
    case K_RANGE:
        if (o->started && o->cap > INT32_MAX)
            mcpy_op_fail(o, EINVAL);
        break;
    default:
        break;
    }
}

/* R_LIST: (list of bytes keys, more) from a successful K_LIST. */
static PyObject *list_result(const mc_list_t *l)
{
    PyObject *keys = PyList_New((Py_ssize_t)l->n);
    if (!keys)
        return NULL;
    for (size_t i = 0; i < l->n; i++) {
        PyObject *k = PyBytes_FromStringAndSize(l->entries[i].key, (Py_ssize_t)l->entries[i].klen);
        if (!k) {
            Py_DECREF(keys);
            return NULL;
        }
        PyList_SET_ITEM(keys, (Py_ssize_t)i, k);
    }
    return Py_BuildValue("(Ni)", keys, l->more);
}

/* The Python value of one op's result. */
static PyObject *build_one(op_t *o, enum result_kind rk)
{
    int r = o->result;
    switch (rk) {
    case R_BYTES:
        if (r < 0)
            return PyBytes_FromStringAndSize(NULL, 0);
        if (o->bytes) {
            PyObject *b = o->bytes;
            o->bytes = NULL;
            return b;
        }
        return PyBytes_FromStringAndSize(o->buf, (Py_ssize_t)o->len);
    case R_BUFFER: {
        if (r < 0)
            Py_RETURN_NONE;
        char *buf = o->buf;
        if (o->len < o->cap / 2) {
            char *nb = realloc(buf, o->len ? o->len : 1);
            if (nb)
                buf = nb;
        }
        PyObject *b = mcpy_buffer_new(buf, o->len);
        if (b)
            o->buf = NULL; /* the Buffer owns it now */
        return b;
    }
    case R_CODE:
        if (r >= 0 && o->kind == K_GET_INTO)
            return PyLong_FromUnsignedLongLong(o->len);
        return PyLong_FromLong(mcpy_to_code(r));
    case R_PUT:
        return PyLong_FromLong(r == -EEXIST ? 0 : mcpy_to_code(r));
    case R_EXIST:
        if (r >= 0)
            return PyLong_FromLong(1);
        return PyLong_FromLong(r == -ENOENT ? 0 : mcpy_to_code(r));
    case R_SIZE:
        if (r >= 0)
            return PyLong_FromUnsignedLongLong(o->st.size);
        return PyLong_FromLong(mcpy_to_code(r));
    case R_LIST:
        if (r >= 0)
            return list_result(o->list);
        return PyLong_FromLong(mcpy_to_code(r));
    case R_STATFS:
        if (r >= 0)
            return Py_BuildValue("(KKK)", (unsigned long long)o->sp.total,
                                 (unsigned long long)o->sp.used, (unsigned long long)o->sp.objects);
        return PyLong_FromLong(mcpy_to_code(r));
    }
    Py_RETURN_NONE;
}

PyObject *mcpy_group_result(group_t *g)
{
    if (!g->is_list)
        return build_one(&g->ops[0], g->rk);
    PyObject *list = PyList_New((Py_ssize_t)g->n);
    if (!list)
        return NULL;
    for (size_t i = 0; i < g->n; i++) {
        PyObject *v = build_one(&g->ops[i], g->rk);
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    return list;
}

/* The memory of a large get's result, at its final size: a bytes object's
 * (R_BYTES) or a malloc'ed buffer that becomes the Buffer's (R_BUFFER).
 * NULL when out of memory. With the GIL. */
static char *get_dest(op_t *o)
{
    if (o->g->rk == R_BYTES) {
        Py_CLEAR(o->bytes);
        o->bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)o->len);
        if (!o->bytes) {
            PyErr_Clear();
            return NULL;
        }
        return PyBytes_AS_STRING(o->bytes);
    }
    char *nb = realloc(o->buf, o->len ? o->len : 1);
    if (!nb)
        return NULL;
    o->buf = nb;
    o->cap = o->len;
    return nb;
}

/*
 * A large result is usually fresh memory: glibc gives freed heap back to
 * the kernel at once (and maps large blocks anew), so the copy into it
 * would take one page fault per 4 KiB page, which costs as much as the
 * copy itself. When the first whole page of dst[0..n) is not resident
 * (mincore()), its pages are faulted in with one call instead
 * (MADV_POPULATE_WRITE, Linux 5.14; where the kernel refuses, the copy
 * faults them as before). Memory that is already resident is left as it
 * is: populating it again only walks its page tables.
 */
static void prefault(char *dst, size_t n)
{
    uintptr_t a = ((uintptr_t)dst + PREFAULT_PAGE - 1) & ~(uintptr_t)(PREFAULT_PAGE - 1);
    uintptr_t e = ((uintptr_t)dst + n) & ~(uintptr_t)(PREFAULT_PAGE - 1);
    unsigned char in = 1;
    if (e <= a || e - a < PREFAULT_MIN || mincore((void *)a, PREFAULT_PAGE, &in) < 0 || (in & 1))
        return;
#ifdef MADV_POPULATE_WRITE
    (void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
#endif
}

/* Copies bytes [from, to) of an op's views into its result. Any thread; no
 * Python. */
static void copy_range(op_t *o, size_t from, size_t to)
{
    prefault(o->dst + from, to - from);
    size_t at = 0;
    for (int v = 0; v < o->nviews && at < to; v++) {
        size_t n = o->views[v].iov_len;
        if (at + n > from) {
            size_t a = from > at ? from - at : 0, b = to - at < n ? to - at : n;
            memcpy(o->dst + at + a, (const char *)o->views[v].iov_base + a, b - a);
        }
        at += n;
    }
}

/* After an op's copies from its views: a segment they came from that was
 * mounted again meanwhile (its master dropped it) may have held another
 * object's bytes by then (mc_obj_stale()): the get fails with ESTALE. */
static void got_views(op_t *o)
{
    if (o->result >= 0 && mc_obj_stale(o->obj))
        o->result = -ESTALE;
}

/* The loop thread's share of an async group's copies (see copy_views()). */
static void loop_copy(void *arg)
{
    group_t *g = arg;
    for (size_t i = 0; i < g->n; i++) {
        op_t *o = &g->ops[i];
        if (o->kind == K_GET && o->copied)
            copy_range(o, o->split, o->len);
    }
    if (atomic_fetch_sub(&g->pending, 1) == 1)
        group_done(g);
}

/*
 * Copies the views of g's ops that have their results (o->dst) into them.
 * An event loop's thread is one thread for every get of its loop, so an
 * async group of at least COPY_SHARE bytes shares the work with the store's
 * loop thread, which copies the second half of each (the group then runs
 * once more, as a unit counted by the caller: share is 1; the versions are
 * closed when it comes back). Otherwise the versions are closed here. The
 * group counts as in flight while the bytes are copied, so that a close()
 * on another thread waits before the store unmaps what they come from.
 * With the GIL (released around a large copy); the store is open.
 */
static void copy_views(group_t *g, size_t total, int share)
{
    StoreObject *self = g->store;
    for (size_t i = 0; i < g->n; i++) {
        op_t *o = &g->ops[i];
        if (o->kind == K_GET && o->views && o->dst) {
            o->copied = share;
            o->split = share ? (o->len / 2) & ~(size_t)4095 : o->len;
        }
    }
    if (share && mc_loop_post(mc_store_loop(self->s), loop_copy, g) < 0)
        loop_copy(g); /* cannot fail to reach 0: the submitter's unit is left */
    if (!share)
        atomic_fetch_add(&self->inflight, 1);
    PyThreadState *ts = total >= COPY_NOGIL ? PyEval_SaveThread() : NULL;
    for (size_t i = 0; i < g->n; i++) {
        op_t *o = &g->ops[i];
        if (o->kind == K_GET && o->views && o->dst)
            copy_range(o, 0, o->split);
    }
    if (ts)
        PyEval_RestoreThread(ts);
    if (share)
        return;
    for (size_t i = 0; i < g->n; i++) {
        op_t *o = &g->ops[i];
        if (o->kind == K_GET && o->views) {
            free(o->views);
            o->views = NULL;
            got_views(o);
            mc_obj_close(o->obj);
            o->obj = NULL;
        }
    }
    mcpy_store_leave(self);
}

int mcpy_group_feed(group_t *g)
{
    StoreObject *self = g->store;
    int again = 0;
    size_t total = 0;
    for (size_t i = 0; i < g->n; i++) {
        op_t *o = &g->ops[i];
        if (o->kind != K_GET || !o->obj)
            continue;
        if (!self->s || self->closing) {
            o->result = -E_CLOSED; /* its handle went with the store */
            o->obj = NULL;
            o->need = o->copied = 0;
            continue;
        }
        if (o->copied) { /* back from loop_copy(): the bytes are in */
            o->copied = 0;
            free(o->views);
            o->views = NULL;
            got_views(o);
            mc_obj_close(o->obj);
            o->obj = NULL;
            continue;
        }
        if (o->views) {
            if (!(o->dst = get_dest(o))) {
                o->result = -ENOMEM;
                free(o->views);
                o->views = NULL;
            }
            total += o->dst ? o->len : 0;
            continue;
        }
        if (!o->need)
            continue;
        o->need = 0;
        o->dst = get_dest(o);
        if (!o->dst) {
            o->result = -ENOMEM;
            continue;
        }
        o->off = 0;
        o->phase = GET_READ;
        o->issue = 1;
        again++;
    }
    int share = g->comp && total >= COPY_SHARE;
    if (again + share) {
        atomic_store(&g->pending, again + share + 1);
        atomic_fetch_add(&self->inflight, 1);
        g->done = 0;
    }
    if (total)
        copy_views(g, total, share);
    return again + share;
}

/* Starts g's marked ops and, for a sync caller, waits for the group. */
void mcpy_group_start(group_t *g)
{
    if (g->comp) {
        group_submit(g);
        return;
    }
    Py_BEGIN_ALLOW_THREADS;
    group_submit(g);
    pthread_mutex_lock(&g->mu);
    while (!g->done)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    Py_END_ALLOW_THREADS;
}

/* Runs a prepared group: sync (comp NULL) returns the result; async returns
 * a future that drain() resolves. Consumes g. */
PyObject *mcpy_group_run(group_t *g, CompleterObject *comp)
{
    StoreObject *self = g->store;
    if (!self->s || self->closing) {
        for (size_t i = 0; i < g->n; i++)
            mcpy_op_fail(&g->ops[i], E_CLOSED);
        PyObject *res = mcpy_group_result(g);
        mcpy_group_free(g);
        return comp ? mcpy_done_future(comp, res) : res;
    }
    int started = 0;
    for (size_t i = 0; i < g->n; i++) {
        op_t *o = &g->ops[i];
        o->issue = o->started;
        started += o->started;
        if (o->started && o->region)
            mcpy_region_busy(o->region);
    }
    atomic_store(&g->pending, started + 1);
    if (comp) {
        PyObject *fut = PyObject_CallNoArgs(comp->create_future);
        if (!fut) {
            mcpy_group_free(g);
            return NULL;
        }
        Py_INCREF(fut);
        g->fut = fut;
        Py_INCREF(comp);
        g->comp = comp;
        atomic_fetch_add(&self->inflight, 1);
        mcpy_group_start(g);
        return fut;
    }
    atomic_fetch_add(&self->inflight, 1);
    mcpy_group_start(g);
    while (mcpy_group_feed(g))
        mcpy_group_start(g);
    PyObject *res = mcpy_group_result(g);
    mcpy_group_free(g);
    return res;
}
