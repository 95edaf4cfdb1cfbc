/*
 * _store_group.c - requests in flight. A request is a group of one or more
 * ops; each op is one chain of async library calls that runs on the store's
 * loop thread (a whole-object get is "read the first bytes and the size, then
 * the rest", chained on the loop thread, so a get costs one hand-off whatever
 * its size). When the last op of a group is done the group completes: a sync
 * caller waiting with the GIL released wakes up, or the group is queued on
 * its Completer (_store_completer.c) for the event loop.
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

/* ---- the loop thread side: no Python here ---- */

/* Called once per group, on whichever thread finished its last op. */
static void group_done(group_t *g)
{
    mcpy_store_leave(g->store);
    if (g->comp) {
        mcpy_completer_push(g->comp, g);
    } else {
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
    if (atomic_fetch_sub(&g->pending, 1) == 1)
        group_done(g);
}

static void op_cb(void *arg, int r);

/* Starts the library call for the op's current phase. Returns 0 (op_cb will
 * run) or -errno (it will not). */
static int op_issue(op_t *o)
{
    mc_store_t *s = o->g->store->s;
    size_t n;
    switch (o->kind) {
    case K_GET:
        if (o->phase == 0)
            return mc_get_async(s, o->key, o->klen, 0, o->buf, o->cap, &o->st, op_cb, o);
        n = o->len - o->off < READ_CHUNK ? o->len - o->off : READ_CHUNK;
        return mc_get_async(s, o->key, o->klen, o->off, o->dst + o->off, n, &o->st, op_cb, o);
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

/* K_GET: decides what follows a read. Returns 1 to issue the next read, 0
 * when the op is finished with *r set. */
static int get_step(op_t *o, int *r)
{
    if (o->phase == 0) {
        if (o->st.size <= o->cap) {
            o->len = o->st.size;
            *r = 0;
            return 0;
        }
        if (o->st.size > SIZE_MAX || o->st.size > PY_SSIZE_T_MAX) {
            *r = -EFBIG;
            return 0;
        }
        o->len = o->st.size;
        o->version = o->st.version;
        if (o->g->rk == R_BYTES) {
            /* Python allocates the bytes object, then the rest is read into
             * it (mcpy_group_feed()): one copy, no transient buffer. */
            o->need = 1;
            *r = 0;
            return 0;
        }
        char *nb = realloc(o->buf, o->st.size);
        if (!nb) {
            *r = -ENOMEM;
            return 0;
        }
        o->buf = o->dst = nb;
        o->cap = o->st.size;
        o->off = (uint64_t)*r;
        o->phase = 1;
        return 1;
    }
    if (o->st.version != o->version) {
        /* Replaced between reads: start again with the new size. */
        if (++o->tries >= GET_MAX_TRIES) {
            *r = -EIO; /* replaced too often: INTERNAL_ERROR */
            return 0;
        }
        o->phase = 0;
        o->off = 0;
        return 1;
    }
    if (*r == 0) {
        *r = -EIO; /* the same version cannot shrink */
        return 0;
    }
    o->off += (uint64_t)*r;
    if (o->off < o->len)
        return 1;
    *r = 0;
    return 0;
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
        if (o->kind == K_GET)
            free(o->buf);
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

/*
 * Prepares the ops of a completed group that wait for a bytes object (large
 * get() values): allocates each, copies the part already read, and marks the
 * op to read the rest into it. Returns how many to start again (the group's
 * accounting is then set for them), 0 when the group is finished.
 */
int mcpy_group_feed(group_t *g)
{
    StoreObject *self = g->store;
    int again = 0;
    for (size_t i = 0; i < g->n; i++) {
        op_t *o = &g->ops[i];
        if (!o->need)
            continue;
        o->need = 0;
        if (!self->s || self->closing) {
            o->result = -E_CLOSED;
            continue;
        }
        Py_CLEAR(o->bytes);
        o->bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)o->len);
        if (!o->bytes) {
            PyErr_Clear();
            o->result = -ENOMEM;
            continue;
        }
        o->dst = PyBytes_AS_STRING(o->bytes);
        memcpy(o->dst, o->buf, o->cap); /* phase 0 read cap bytes of this version */
        o->off = o->cap;
        o->phase = 1;
        o->issue = 1;
        again++;
    }
    if (again) {
        atomic_store(&g->pending, again + 1);
        atomic_fetch_add(&self->inflight, 1);
        g->done = 0;
    }
    return again;
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
        g->ops[i].issue = g->ops[i].started;
        started += g->ops[i].started;
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
