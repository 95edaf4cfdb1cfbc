/*
 * _store.c - mooncake._store, the CPython extension behind the direct backend
 * of mooncake.store and mooncake.async_store.
 *
 * It uses libmooncake's public API only (mooncake/mooncake.h). Every request
 * becomes a *group* of one or more *ops*; each op is one chain of async
 * library calls that runs on the store's loop thread (a whole-object get is
 * "read the first bytes and the size, then the rest", chained on the loop
 * thread, so a get costs one hand-off whatever its size). When the last op of
 * a group is done the group completes:
 *
 *  - sync callers wait for it with the GIL released;
 *  - async callers get an asyncio future at once; the group is pushed on the
 *    queue of a Completer (one per event loop) whose eventfd the loop watches
 *    with loop.add_reader(); Completer.drain() runs on the event loop,
 *    builds the Python results and resolves the futures. No thread per call.
 *
 * Ownership: a group holds strong references to the keys, the value and
 * target objects (and their Py_buffer exports), the future, the Completer and
 * the Store until it is freed, which happens with the GIL held after it
 * completed (after the wait, or in drain). Cancelling a future therefore never
 * frees memory that the loop thread still writes into.
 *
 * Results are Mooncake's integer ErrorCode values (see to_code()).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "mooncake/mooncake.h"

/* ---- Mooncake ErrorCode values ---- */

#define CODE_INTERNAL_ERROR (-1)
#define CODE_BUFFER_OVERFLOW (-10)
#define CODE_NO_AVAILABLE_HANDLE (-200)
#define CODE_INVALID_KEY (-400)
#define CODE_INVALID_PARAMS (-600)
#define CODE_OBJECT_NOT_FOUND (-704)
#define CODE_OBJECT_ALREADY_EXISTS (-705)
#define CODE_OBJECT_HAS_LEASE (-706)
#define CODE_RPC_FAIL (-900)
#define CODE_UNAVAILABLE_IN_CURRENT_STATUS (-1010)
#define CODE_UNAVAILABLE_IN_CURRENT_MODE (-1011)

/* Internal errnos for failures found before the library is called. */
#define E_BADKEY EKEYREJECTED /* the key is empty, has NUL or is too long */
#define E_NOTREG EFAULT       /* a raw pointer outside every registered buffer */
#define E_CLOSED ESHUTDOWN    /* the store is closed */
#define E_TOOSMALL EOVERFLOW  /* the object does not fit the caller's buffer */
#define E_OUTSIDE ERANGE      /* a range lies past the object's end */

/* First read of a whole-object get; larger objects are completed by a second
 * read chained on the loop thread. */
#define GET_FIRST_READ 8192
/* Largest single library read (mc_get takes at most INT32_MAX bytes). */
#define READ_CHUNK (1U << 30)
/* A get restarts when the key is replaced between its reads; give up after. */
#define GET_MAX_TRIES 16

/* to_code() turns a library result (>= 0, or -errno) into Mooncake's code. */
static long to_code(int r)
{
    if (r >= 0)
        return r;
    switch (-r) {
    case ENOENT:
        return CODE_OBJECT_NOT_FOUND;
    case EEXIST:
        return CODE_OBJECT_ALREADY_EXISTS;
    case EBUSY:
        return CODE_OBJECT_HAS_LEASE;
    case ENOSPC:
    case EFBIG:
    case EAGAIN: /* every segment on hold (mounted again moments ago) */
        return CODE_NO_AVAILABLE_HANDLE;
    case E_BADKEY:
    case ENAMETOOLONG:
        return CODE_INVALID_KEY;
    case EINVAL:
    case E_NOTREG:
    case E_OUTSIDE:
        return CODE_INVALID_PARAMS;
    case E_TOOSMALL:
        return CODE_BUFFER_OVERFLOW;
    case E_CLOSED:
    case ECANCELED:
        return CODE_UNAVAILABLE_IN_CURRENT_STATUS;
    case ENOTSUP:
        return CODE_UNAVAILABLE_IN_CURRENT_MODE;
    /* The network: the master or a node did not answer (within the
     * store's timeout), refused, or dropped the connection. */
    case ECONNREFUSED:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ENETUNREACH:
    case ENETDOWN:
    case ECONNRESET:
    case ECONNABORTED:
    case ENOTCONN:
    case EPIPE:
    case EPROTO:
    case ESTALE: /* the master no longer knows the write (it restarted) */
        return CODE_RPC_FAIL;
    default:
        return CODE_INTERNAL_ERROR;
    }
}

/* ---- types ---- */

/* A registered buffer. Freed when unregistered (or the store closed) and no
 * op uses it any more. Guarded by the GIL. */
typedef struct region {
    uintptr_t start;
    size_t len;
    int has_view; /* registered from an object: view keeps its memory alive */
    int writable;
    Py_buffer view;
    long users; /* groups using it, not yet freed */
    int dead;   /* unregistered; freed when users reaches 0 */
    int creg;   /* also registered with mc_register_buffer() (zero copy) */
    struct StoreObject *owner;
    struct region *next;
} region_t;

typedef struct group group_t;
typedef struct CompleterObject CompleterObject;

typedef struct StoreObject {
    PyObject ob_base;
    mc_store_t *s;        /* NULL once closed; see store_close() */
    int closing;          /* guarded by the GIL */
    atomic_long inflight; /* groups submitted and not completed on the C side */
    pthread_mutex_t mu;   /* with cv: close() waits for inflight == 0 */
    pthread_cond_t cv;
    region_t *regions; /* live registered buffers; guarded by the GIL */
} StoreObject;

struct CompleterObject {
    PyObject ob_base;
    int fd;                  /* eventfd, readable when the queue is not empty */
    pthread_mutex_t mu;      /* guards head and tail */
    group_t *head, *tail;    /* completed groups waiting for drain() */
    PyObject *create_future; /* loop.create_future */
};

typedef struct {
    PyObject ob_base;
    char *buf; /* malloc'ed, owned */
    Py_ssize_t len;
} BufferObject;

enum op_kind { K_GET, K_GET_INTO, K_RANGE, K_PUT, K_STAT, K_REMOVE };

/* How a group's result becomes a Python object. */
enum result_kind {
    R_BYTES,  /* bytes, b"" on any failure */
    R_BUFFER, /* Buffer, None on any failure */
    R_CODE,   /* int: the result or a code */
    R_PUT,    /* int: 0, a code; an existing key counts as success */
    R_EXIST,  /* int: 1, 0 or a code */
    R_SIZE,   /* int: the size or a code */
};

typedef struct op {
    group_t *g;
    enum op_kind kind;
    int started; /* 0: failed before submission with `result` */
    int issue;   /* group_submit() starts it */
    int need;    /* K_GET into bytes: finished phase 0, needs a bytes object of len */
    int result;  /* bytes, 0, or -errno */
    int phase;
    int tries;
    PyObject *keyobj; /* strong reference; key points into it */
    const char *key;
    size_t klen;
    char *buf;       /* K_GET: malloc'ed, owned; others: the caller's memory */
    char *dst;       /* K_GET: where reads after the first go (buf, or bytes' storage) */
    PyObject *bytes; /* K_GET for R_BYTES: the result, read into in place */
    size_t cap;      /* bytes the caller's buffer holds */
    size_t len;      /* bytes of the object being read */
    uint64_t off;    /* next read offset (K_RANGE: the source offset) */
    uint64_t version;
    mc_stat_t st;
    unsigned flags;   /* K_REMOVE: MC_REMOVE_* */
    region_t *region; /* registered buffer in use, or NULL */
    Py_buffer view;   /* value or target exported by an object */
    int has_view;
    struct iovec one;  /* K_PUT: a single part */
    struct iovec *iov; /* K_PUT: the parts (&one, or owned by the group) */
    int iovcnt;
} op_t;

struct group {
    StoreObject *store;    /* strong reference */
    CompleterObject *comp; /* NULL for sync callers; strong reference */
    PyObject *fut;         /* async: the future to resolve */
    group_t *qnext;        /* on comp's queue */
    enum result_kind rk;
    int is_list;
    atomic_int pending; /* started ops not done, plus 1 for the submitter */
    mc_put_opts_t po;
    char *pref; /* po.preferred_segment's copy (PyMem), or NULL */
    /* sync callers wait on these */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    /* put_parts: exports of every part */
    Py_buffer *parts;
    int nparts;
    struct iovec *iov;
    size_t n;
    op_t ops[];
};

static PyTypeObject StoreType, CompleterType, BufferType;
static PyObject *str_cancelled, *str_set_result, *str_set_exception;

/* ---- the loop thread side: no Python here ---- */

static void completer_push(CompleterObject *c, group_t *g)
{
    pthread_mutex_lock(&c->mu);
    int was_empty = c->head == NULL;
    g->qnext = NULL;
    if (c->tail)
        c->tail->qnext = g;
    else
        c->head = g;
    c->tail = g;
    pthread_mutex_unlock(&c->mu);
    if (was_empty) {
        uint64_t one = 1;
        ssize_t w = write(c->fd, &one, sizeof(one));
        (void)w; /* a non-blocking eventfd write cannot fail here */
    }
}

/* Called once per group, on whichever thread finished its last op. */
static void group_done(group_t *g)
{
    StoreObject *self = g->store;
    if (atomic_fetch_sub(&self->inflight, 1) == 1) {
        pthread_mutex_lock(&self->mu);
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
    }
    if (g->comp) {
        completer_push(g->comp, g);
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
             * it (group_feed()): one copy, no transient buffer. */
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
            *r = -EAGAIN;
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
            *r = -EAGAIN;
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

/* mc_register_buffer() (reg) or mc_unregister_buffer() without the GIL,
 * counted in flight so that close() waits for it. */
static int store_call_buffer(StoreObject *self, int reg, uintptr_t p, size_t len)
{
    mc_store_t *s = self->s;
    int rc;
    atomic_fetch_add(&self->inflight, 1);
    Py_BEGIN_ALLOW_THREADS;
    rc = reg ? mc_register_buffer(s, (void *)p, len) : mc_unregister_buffer(s, (void *)p);
    Py_END_ALLOW_THREADS;
    if (atomic_fetch_sub(&self->inflight, 1) == 1) {
        pthread_mutex_lock(&self->mu);
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
    }
    return rc;
}

static void region_release(region_t *r)
{
    /* The library's registration goes first: the memory may go with the
     * view. A closed store (owner->s NULL) dropped its registrations. */
    if (r->creg && r->owner->s && !r->owner->closing)
        store_call_buffer(r->owner, 0, r->start, 0);
    if (r->has_view)
        PyBuffer_Release(&r->view);
    PyMem_Free(r);
}

static void region_unuse(region_t *r)
{
    if (--r->users == 0 && r->dead)
        region_release(r);
}

static group_t *group_new(StoreObject *self, size_t n, enum result_kind rk, int is_list)
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

static void group_free(group_t *g)
{
    for (size_t i = 0; i < g->n; i++) {
        op_t *o = &g->ops[i];
        if (o->kind == K_GET)
            free(o->buf);
        Py_XDECREF(o->bytes);
        if (o->has_view)
            PyBuffer_Release(&o->view);
        if (o->region)
            region_unuse(o->region);
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
static void op_fail(op_t *o, int err)
{
    o->started = 0;
    o->result = -err;
}

/* Sets the op's key from a str or bytes object. Returns 0, or -1 with a
 * TypeError set. An invalid key fails the op (INVALID_KEY), not the call. */
static int op_set_key(op_t *o, PyObject *key)
{
    const char *k;
    Py_ssize_t n;
    if (PyUnicode_Check(key)) {
        k = PyUnicode_AsUTF8AndSize(key, &n);
        if (!k) {
            PyErr_Clear(); /* lone surrogates: not a valid key */
            op_fail(o, E_BADKEY);
            return 0;
        }
    } else if (PyBytes_Check(key)) {
        k = PyBytes_AS_STRING(key);
        n = PyBytes_GET_SIZE(key);
    } else {
        PyErr_Format(PyExc_TypeError, "key must be str or bytes, not %.100s",
                     Py_TYPE(key)->tp_name);
        return -1;
    }
    Py_INCREF(key);
    o->keyobj = key;
    o->key = k;
    o->klen = (size_t)n;
    o->started = 1;
    if (mc_key_check(k, (size_t)n) < 0)
        op_fail(o, E_BADKEY);
    return 0;
}

/* Finds the live registered buffer holding [p, p+len). */
static region_t *region_find(StoreObject *self, uintptr_t p, size_t len)
{
    for (region_t *r = self->regions; r; r = r->next)
        if (p >= r->start && p - r->start <= r->len && len <= r->len - (p - r->start))
            return r;
    return NULL;
}

static int py_to_uintptr(PyObject *o, uintptr_t *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (uintptr_t)v;
    return 0;
}

static int py_to_size(PyObject *o, size_t *out)
{
    Py_ssize_t v = PyLong_AsSsize_t(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0) {
        PyErr_SetString(PyExc_ValueError, "size must not be negative");
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

/*
 * Points the op at caller memory: `target` is an int address inside a
 * registered buffer (size bytes from it), or an object exporting a buffer
 * (size: None for all of it). writable: the op writes there. Returns -1 with
 * an exception for a wrong type; an unregistered address or an unusable
 * buffer fails the op only.
 */
static int op_set_memory(op_t *o, PyObject *target, PyObject *size, int writable)
{
    StoreObject *self = o->g->store;
    if (PyLong_Check(target)) {
        uintptr_t p;
        size_t n;
        if (py_to_uintptr(target, &p) < 0 || py_to_size(size, &n) < 0)
            return -1;
        region_t *r = region_find(self, p, n);
        if (!r || (writable && !r->writable)) {
            if (o->started)
                op_fail(o, E_NOTREG);
            return 0;
        }
        r->users++;
        o->region = r;
        o->buf = (char *)p;
        o->cap = n;
        return 0;
    }
    if (!PyObject_CheckBuffer(target)) {
        PyErr_Format(PyExc_TypeError, "expected an int address or a buffer, not %.100s",
                     Py_TYPE(target)->tp_name);
        return -1;
    }
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(target, &o->view, flags) < 0) {
        PyErr_Clear();
        if (o->started)
            op_fail(o, EINVAL);
        return 0;
    }
    o->has_view = 1;
    o->buf = o->view.buf;
    o->cap = (size_t)o->view.len;
    if (size != Py_None) {
        size_t n;
        if (py_to_size(size, &n) < 0)
            return -1;
        if (n > o->cap) {
            if (o->started)
                op_fail(o, EINVAL);
            return 0;
        }
        o->cap = n;
    }
    return 0;
}

static PyObject *buffer_from(char *buf, size_t len)
{
    BufferObject *b = PyObject_New(BufferObject, &BufferType);
    if (!b)
        return NULL;
    b->buf = buf;
    b->len = (Py_ssize_t)len;
    return (PyObject *)b;
}

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
        PyObject *b = buffer_from(buf, o->len);
        if (b)
            o->buf = NULL; /* the Buffer owns it now */
        return b;
    }
    case R_CODE:
        if (r >= 0 && o->kind == K_GET_INTO)
            return PyLong_FromUnsignedLongLong(o->len);
        return PyLong_FromLong(to_code(r));
    case R_PUT:
        return PyLong_FromLong(r == -EEXIST ? 0 : to_code(r));
    case R_EXIST:
        if (r >= 0)
            return PyLong_FromLong(1);
        return PyLong_FromLong(r == -ENOENT ? 0 : to_code(r));
    case R_SIZE:
        if (r >= 0)
            return PyLong_FromUnsignedLongLong(o->st.size);
        return PyLong_FromLong(to_code(r));
    }
    Py_RETURN_NONE;
}

static PyObject *group_result(group_t *g)
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

/* A future that is already done with res (stolen). */
static PyObject *done_future(CompleterObject *c, PyObject *res)
{
    if (!res)
        return NULL;
    PyObject *fut = PyObject_CallNoArgs(c->create_future);
    if (fut) {
        PyObject *x = PyObject_CallMethodOneArg(fut, str_set_result, res);
        if (!x)
            Py_CLEAR(fut);
        Py_XDECREF(x);
    }
    Py_DECREF(res);
    return fut;
}

/*
 * Prepares the ops of a completed group that wait for a bytes object (large
 * get() values): allocates each, copies the part already read, and marks the
 * op to read the rest into it. Returns how many to start again (the group's
 * accounting is then set for them), 0 when the group is finished.
 */
static int group_feed(group_t *g)
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
static void group_start(group_t *g)
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
static PyObject *group_run(group_t *g, CompleterObject *comp)
{
    StoreObject *self = g->store;
    if (!self->s || self->closing) {
        for (size_t i = 0; i < g->n; i++)
            op_fail(&g->ops[i], E_CLOSED);
        PyObject *res = group_result(g);
        group_free(g);
        return comp ? done_future(comp, res) : res;
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
            group_free(g);
            return NULL;
        }
        Py_INCREF(fut);
        g->fut = fut;
        Py_INCREF(comp);
        g->comp = comp;
        atomic_fetch_add(&self->inflight, 1);
        group_start(g);
        return fut;
    }
    atomic_fetch_add(&self->inflight, 1);
    group_start(g);
    while (group_feed(g))
        group_start(g);
    PyObject *res = group_result(g);
    group_free(g);
    return res;
}

/* ---- argument helpers ---- */

static int check_nargs(const char *name, Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi)
{
    if (n >= lo && n <= hi)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd to %zd arguments (%zd given)", name, lo, hi, n);
    return -1;
}

/* Returns a new list from any sequence, or NULL. */
static PyObject *as_list(PyObject *seq, const char *what)
{
    PyObject *l = PySequence_List(seq);
    if (!l && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a sequence", what);
    }
    return l;
}

/* opts: None or (replica_num, pin, soft_pin_ttl_ms[, preferred segment or
 * None]). The preferred segment is copied into *pref (freed with the group). */
static int parse_put_opts(PyObject *opts, PyObject *upsert, mc_put_opts_t *po, char **pref)
{
    memset(po, 0, sizeof(*po));
    int up = PyObject_IsTrue(upsert);
    if (up < 0)
        return -1;
    po->flags = up ? 0 : MC_PUT_NOREPLACE;
    if (opts == Py_None)
        return 0;
    unsigned int replicas, pin;
    unsigned long long ttl;
    const char *p = NULL;
    if (!PyArg_ParseTuple(opts, "IIK|z", &replicas, &pin, &ttl, &p))
        return -1;
    po->replica_num = replicas;
    po->pin = pin;
    po->soft_pin_ttl_ms = ttl;
    if (p && *p) {
        size_t len = strlen(p) + 1;
        char *c = PyMem_Realloc(*pref, len);
        if (!c) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(c, p, len);
        *pref = c;
        po->preferred_segment = c;
    }
    return 0;
}

/* ---- Store methods ---- */

typedef PyObject *(*do_fn)(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                           CompleterObject *comp);

/* get(key) / get_buffer(key) */
static PyObject *do_get_common(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                               CompleterObject *comp, enum result_kind rk)
{
    if (check_nargs("get", n, 1, 1) < 0)
        return NULL;
    group_t *g = group_new(self, 1, rk, 0);
    if (!g)
        return NULL;
    op_t *o = &g->ops[0];
    o->kind = K_GET;
    if (op_set_key(o, a[0]) < 0) {
        group_free(g);
        return NULL;
    }
    if (o->started) {
        o->cap = GET_FIRST_READ;
        o->buf = malloc(o->cap);
        if (!o->buf)
            op_fail(o, ENOMEM);
    }
    return group_run(g, comp);
}

static PyObject *do_get(StoreObject *self, PyObject *const *a, Py_ssize_t n, CompleterObject *comp)
{
    return do_get_common(self, a, n, comp, R_BYTES);
}

static PyObject *do_get_buffer(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                               CompleterObject *comp)
{
    return do_get_common(self, a, n, comp, R_BUFFER);
}

/* get_batch(keys) / get_buffer_batch(keys) */
static PyObject *do_get_batch_common(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                                     CompleterObject *comp, enum result_kind rk)
{
    if (check_nargs("get_batch", n, 1, 1) < 0)
        return NULL;
    PyObject *keys = as_list(a[0], "keys");
    if (!keys)
        return NULL;
    size_t cnt = (size_t)PyList_GET_SIZE(keys);
    group_t *g = group_new(self, cnt, rk, 1);
    if (!g)
        goto fail;
    for (size_t i = 0; i < cnt; i++) {
        op_t *o = &g->ops[i];
        o->kind = K_GET;
        if (op_set_key(o, PyList_GET_ITEM(keys, (Py_ssize_t)i)) < 0)
            goto fail;
        if (o->started) {
            o->cap = GET_FIRST_READ;
            o->buf = malloc(o->cap);
            if (!o->buf)
                op_fail(o, ENOMEM);
        }
    }
    Py_DECREF(keys);
    return group_run(g, comp);
fail:
    if (g)
        group_free(g);
    Py_DECREF(keys);
    return NULL;
}

static PyObject *do_get_batch(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                              CompleterObject *comp)
{
    return do_get_batch_common(self, a, n, comp, R_BYTES);
}

static PyObject *do_get_buffer_batch(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                                     CompleterObject *comp)
{
    return do_get_batch_common(self, a, n, comp, R_BUFFER);
}

/* get_into(key, target, size=None) */
static PyObject *do_get_into(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                             CompleterObject *comp)
{
    if (check_nargs("get_into", n, 2, 3) < 0)
        return NULL;
    group_t *g = group_new(self, 1, R_CODE, 0);
    if (!g)
        return NULL;
    op_t *o = &g->ops[0];
    o->kind = K_GET_INTO;
    if (op_set_key(o, a[0]) < 0 || op_set_memory(o, a[1], n > 2 ? a[2] : Py_None, 1) < 0) {
        group_free(g);
        return NULL;
    }
    return group_run(g, comp);
}

/* get_into_batch(keys, targets, sizes) */
static PyObject *do_get_into_batch(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                                   CompleterObject *comp)
{
    if (check_nargs("get_into_batch", n, 3, 3) < 0)
        return NULL;
    PyObject *keys = as_list(a[0], "keys"), *targets = NULL, *sizes = NULL;
    group_t *g = NULL;
    if (!keys || !(targets = as_list(a[1], "buffer_ptrs")) || !(sizes = as_list(a[2], "sizes")))
        goto fail;
    size_t cnt = (size_t)PyList_GET_SIZE(keys);
    int mismatch = (size_t)PyList_GET_SIZE(targets) != cnt || (size_t)PyList_GET_SIZE(sizes) != cnt;
    g = group_new(self, cnt, R_CODE, 1);
    if (!g)
        goto fail;
    for (size_t i = 0; i < cnt; i++) {
        op_t *o = &g->ops[i];
        o->kind = K_GET_INTO;
        if (op_set_key(o, PyList_GET_ITEM(keys, (Py_ssize_t)i)) < 0)
            goto fail;
        if (mismatch) {
            op_fail(o, EINVAL);
            continue;
        }
        if (op_set_memory(o, PyList_GET_ITEM(targets, (Py_ssize_t)i),
                          PyList_GET_ITEM(sizes, (Py_ssize_t)i), 1) < 0)
            goto fail;
    }
    Py_DECREF(keys);
    Py_DECREF(targets);
    Py_DECREF(sizes);
    return group_run(g, comp);
fail:
    if (g)
        group_free(g);
    Py_XDECREF(keys);
    Py_XDECREF(targets);
    Py_XDECREF(sizes);
    return NULL;
}

/* read_ranges(keys, addrs, src_offsets, sizes): fragment i copies
 * sizes[i] bytes at src_offsets[i] of keys[i] to addrs[i] (inside a
 * registered buffer). Returns bytes copied or a code, per fragment. */
static PyObject *do_read_ranges(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                                CompleterObject *comp)
{
    if (check_nargs("read_ranges", n, 4, 4) < 0)
        return NULL;
    PyObject *l[4] = {NULL, NULL, NULL, NULL};
    group_t *g = NULL;
    for (int i = 0; i < 4; i++)
        if (!(l[i] = as_list(a[i], "argument")))
            goto fail;
    size_t cnt = (size_t)PyList_GET_SIZE(l[0]);
    for (int i = 1; i < 4; i++)
        if ((size_t)PyList_GET_SIZE(l[i]) != cnt) {
            PyErr_SetString(PyExc_ValueError, "read_ranges: lists differ in length");
            goto fail;
        }
    g = group_new(self, cnt, R_CODE, 1);
    if (!g)
        goto fail;
    for (size_t i = 0; i < cnt; i++) {
        op_t *o = &g->ops[i];
        o->kind = K_RANGE;
        if (op_set_key(o, PyList_GET_ITEM(l[0], (Py_ssize_t)i)) < 0)
            goto fail;
        size_t off;
        if (py_to_size(PyList_GET_ITEM(l[2], (Py_ssize_t)i), &off) < 0 ||
            op_set_memory(o, PyList_GET_ITEM(l[1], (Py_ssize_t)i),
                          PyList_GET_ITEM(l[3], (Py_ssize_t)i), 1) < 0)
            goto fail;
        o->off = off;
        if (o->started && o->cap > INT32_MAX)
            op_fail(o, EINVAL);
    }
    for (int i = 0; i < 4; i++)
        Py_DECREF(l[i]);
    return group_run(g, comp);
fail:
    if (g)
        group_free(g);
    for (int i = 0; i < 4; i++)
        Py_XDECREF(l[i]);
    return NULL;
}

/* put(key, value, opts, upsert) */
static PyObject *do_put(StoreObject *self, PyObject *const *a, Py_ssize_t n, CompleterObject *comp)
{
    if (check_nargs("put", n, 4, 4) < 0)
        return NULL;
    group_t *g = group_new(self, 1, R_PUT, 0);
    if (!g)
        return NULL;
    op_t *o = &g->ops[0];
    o->kind = K_PUT;
    if (PyLong_Check(a[1])) {
        group_free(g);
        PyErr_SetString(PyExc_TypeError, "value must be a bytes-like object");
        return NULL;
    }
    if (parse_put_opts(a[2], a[3], &g->po, &g->pref) < 0 || op_set_key(o, a[0]) < 0 ||
        op_set_memory(o, a[1], Py_None, 0) < 0) {
        group_free(g);
        return NULL;
    }
    o->one.iov_base = o->buf;
    o->one.iov_len = o->cap;
    o->iov = &o->one;
    o->iovcnt = 1;
    return group_run(g, comp);
}

/* put_parts(key, parts, opts, upsert) */
static PyObject *do_put_parts(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                              CompleterObject *comp)
{
    if (check_nargs("put_parts", n, 4, 4) < 0)
        return NULL;
    PyObject *parts = as_list(a[1], "parts");
    if (!parts)
        return NULL;
    group_t *g = group_new(self, 1, R_PUT, 0);
    if (!g)
        goto fail;
    op_t *o = &g->ops[0];
    o->kind = K_PUT;
    if (parse_put_opts(a[2], a[3], &g->po, &g->pref) < 0 || op_set_key(o, a[0]) < 0)
        goto fail;
    Py_ssize_t np = PyList_GET_SIZE(parts);
    g->parts = PyMem_Calloc((size_t)np + 1, sizeof(Py_buffer));
    g->iov = PyMem_Calloc((size_t)np + 1, sizeof(struct iovec));
    if (!g->parts || !g->iov) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < np; i++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(parts, i), &g->parts[i], PyBUF_C_CONTIGUOUS) < 0)
            goto fail;
        g->nparts++;
        g->iov[i].iov_base = g->parts[i].buf;
        g->iov[i].iov_len = (size_t)g->parts[i].len;
    }
    o->iov = g->iov;
    o->iovcnt = (int)np;
    Py_DECREF(parts);
    return group_run(g, comp);
fail:
    if (g)
        group_free(g);
    Py_DECREF(parts);
    return NULL;
}

/* put_batch(keys, values, opts, upsert) -> list */
static PyObject *do_put_batch(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                              CompleterObject *comp)
{
    if (check_nargs("put_batch", n, 4, 4) < 0)
        return NULL;
    PyObject *keys = as_list(a[0], "keys"), *values = NULL;
    group_t *g = NULL;
    if (!keys || !(values = as_list(a[1], "values")))
        goto fail;
    size_t cnt = (size_t)PyList_GET_SIZE(keys);
    int mismatch = (size_t)PyList_GET_SIZE(values) != cnt;
    g = group_new(self, cnt, R_PUT, 1);
    if (!g || parse_put_opts(a[2], a[3], &g->po, &g->pref) < 0)
        goto fail;
    for (size_t i = 0; i < cnt; i++) {
        op_t *o = &g->ops[i];
        o->kind = K_PUT;
        if (op_set_key(o, PyList_GET_ITEM(keys, (Py_ssize_t)i)) < 0)
            goto fail;
        if (mismatch) {
            op_fail(o, EINVAL);
            continue;
        }
        PyObject *v = PyList_GET_ITEM(values, (Py_ssize_t)i);
        if (PyLong_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "values must be bytes-like objects");
            goto fail;
        }
        if (op_set_memory(o, v, Py_None, 0) < 0)
            goto fail;
        o->one.iov_base = o->buf;
        o->one.iov_len = o->cap;
        o->iov = &o->one;
        o->iovcnt = 1;
    }
    Py_DECREF(keys);
    Py_DECREF(values);
    return group_run(g, comp);
fail:
    if (g)
        group_free(g);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    return NULL;
}

/* put_from(key, ptr, size, opts, upsert) */
static PyObject *do_put_from(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                             CompleterObject *comp)
{
    if (check_nargs("put_from", n, 5, 5) < 0)
        return NULL;
    group_t *g = group_new(self, 1, R_PUT, 0);
    if (!g)
        return NULL;
    op_t *o = &g->ops[0];
    o->kind = K_PUT;
    if (parse_put_opts(a[3], a[4], &g->po, &g->pref) < 0 || op_set_key(o, a[0]) < 0 ||
        op_set_memory(o, a[1], a[2], 0) < 0) {
        group_free(g);
        return NULL;
    }
    o->one.iov_base = o->buf;
    o->one.iov_len = o->cap;
    o->iov = &o->one;
    o->iovcnt = 1;
    return group_run(g, comp);
}

/* put_from_batch(keys, ptrs, sizes, opts, upsert) -> list */
static PyObject *do_put_from_batch(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                                   CompleterObject *comp)
{
    if (check_nargs("put_from_batch", n, 5, 5) < 0)
        return NULL;
    PyObject *keys = as_list(a[0], "keys"), *ptrs = NULL, *sizes = NULL;
    group_t *g = NULL;
    if (!keys || !(ptrs = as_list(a[1], "buffer_ptrs")) || !(sizes = as_list(a[2], "sizes")))
        goto fail;
    size_t cnt = (size_t)PyList_GET_SIZE(keys);
    int mismatch = (size_t)PyList_GET_SIZE(ptrs) != cnt || (size_t)PyList_GET_SIZE(sizes) != cnt;
    g = group_new(self, cnt, R_PUT, 1);
    if (!g || parse_put_opts(a[3], a[4], &g->po, &g->pref) < 0)
        goto fail;
    for (size_t i = 0; i < cnt; i++) {
        op_t *o = &g->ops[i];
        o->kind = K_PUT;
        if (op_set_key(o, PyList_GET_ITEM(keys, (Py_ssize_t)i)) < 0)
            goto fail;
        if (mismatch) {
            op_fail(o, EINVAL);
            continue;
        }
        if (op_set_memory(o, PyList_GET_ITEM(ptrs, (Py_ssize_t)i),
                          PyList_GET_ITEM(sizes, (Py_ssize_t)i), 0) < 0)
            goto fail;
        o->one.iov_base = o->buf;
        o->one.iov_len = o->cap;
        o->iov = &o->one;
        o->iovcnt = 1;
    }
    Py_DECREF(keys);
    Py_DECREF(ptrs);
    Py_DECREF(sizes);
    return group_run(g, comp);
fail:
    if (g)
        group_free(g);
    Py_XDECREF(keys);
    Py_XDECREF(ptrs);
    Py_XDECREF(sizes);
    return NULL;
}

/* One op per key of `keysarg` (a key, or a sequence when is_list). */
static PyObject *do_keys(StoreObject *self, PyObject *keysarg, int is_list, enum op_kind kind,
                         enum result_kind rk, unsigned flags, CompleterObject *comp)
{
    PyObject *keys = NULL;
    size_t cnt = 1;
    if (is_list) {
        if (!(keys = as_list(keysarg, "keys")))
            return NULL;
        cnt = (size_t)PyList_GET_SIZE(keys);
    }
    group_t *g = group_new(self, cnt, rk, is_list);
    if (!g) {
        Py_XDECREF(keys);
        return NULL;
    }
    for (size_t i = 0; i < cnt; i++) {
        op_t *o = &g->ops[i];
        o->kind = kind;
        o->flags = flags;
        if (op_set_key(o, is_list ? PyList_GET_ITEM(keys, (Py_ssize_t)i) : keysarg) < 0) {
            group_free(g);
            Py_XDECREF(keys);
            return NULL;
        }
    }
    Py_XDECREF(keys);
    return group_run(g, comp);
}

static PyObject *do_exist(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                          CompleterObject *comp)
{
    if (check_nargs("exist", n, 1, 1) < 0)
        return NULL;
    return do_keys(self, a[0], 0, K_STAT, R_EXIST, 0, comp);
}

static PyObject *do_exist_batch(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                                CompleterObject *comp)
{
    if (check_nargs("exist_batch", n, 1, 1) < 0)
        return NULL;
    return do_keys(self, a[0], 1, K_STAT, R_EXIST, 0, comp);
}

static PyObject *do_size(StoreObject *self, PyObject *const *a, Py_ssize_t n, CompleterObject *comp)
{
    if (check_nargs("size", n, 1, 1) < 0)
        return NULL;
    return do_keys(self, a[0], 0, K_STAT, R_SIZE, 0, comp);
}

/* remove(key, force) / remove_batch(keys, force) */
static PyObject *do_remove_common(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                                  CompleterObject *comp, int is_list)
{
    if (check_nargs("remove", n, 1, 2) < 0)
        return NULL;
    int force = n > 1 ? PyObject_IsTrue(a[1]) : 0;
    if (force < 0)
        return NULL;
    return do_keys(self, a[0], is_list, K_REMOVE, R_CODE, force ? MC_REMOVE_FORCE : 0, comp);
}

static PyObject *do_remove(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                           CompleterObject *comp)
{
    return do_remove_common(self, a, n, comp, 0);
}

static PyObject *do_remove_batch(StoreObject *self, PyObject *const *a, Py_ssize_t n,
                                 CompleterObject *comp)
{
    return do_remove_common(self, a, n, comp, 1);
}

/* Sync and async entry points share the do_ functions: the async form takes
 * the Completer of the running loop first. */
#define SYNC_ASYNC(name)                                                                           \
    static PyObject *m_##name(PyObject *self, PyObject *const *a, Py_ssize_t n)                    \
    {                                                                                              \
        return do_##name((StoreObject *)self, a, n, NULL);                                         \
    }                                                                                              \
    static PyObject *m_##name##_async(PyObject *self, PyObject *const *a, Py_ssize_t n)            \
    {                                                                                              \
        if (n < 1 || !PyObject_TypeCheck(a[0], &CompleterType)) {                                  \
            PyErr_SetString(PyExc_TypeError, #name "_async() needs a Completer first");            \
            return NULL;                                                                           \
        }                                                                                          \
        return do_##name((StoreObject *)self, a + 1, n - 1, (CompleterObject *)a[0]);              \
    }

SYNC_ASYNC(get)
SYNC_ASYNC(get_buffer)
SYNC_ASYNC(get_batch)
SYNC_ASYNC(get_buffer_batch)
SYNC_ASYNC(get_into)
SYNC_ASYNC(get_into_batch)
SYNC_ASYNC(read_ranges)
SYNC_ASYNC(put)
SYNC_ASYNC(put_parts)
SYNC_ASYNC(put_batch)
SYNC_ASYNC(put_from)
SYNC_ASYNC(put_from_batch)
SYNC_ASYNC(exist)
SYNC_ASYNC(exist_batch)
SYNC_ASYNC(size)
SYNC_ASYNC(remove)
SYNC_ASYNC(remove_batch)

/* list(prefix, after, max) -> (list of bytes keys, more) or an int code. */
static PyObject *m_list(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *prefix, *after;
    Py_ssize_t plen, alen;
    Py_ssize_t max;
    if (!PyArg_ParseTuple(args, "y#z#n", &prefix, &plen, &after, &alen, &max))
        return NULL;
    if (!self->s || self->closing)
        return PyLong_FromLong(CODE_UNAVAILABLE_IN_CURRENT_STATUS);
    mc_list_t *l = NULL;
    int rc;
    atomic_fetch_add(&self->inflight, 1);
    Py_BEGIN_ALLOW_THREADS;
    rc = mc_list(self->s, prefix, (size_t)plen, after, after ? (size_t)alen : 0, 0,
                 max > 0 ? (size_t)max : 0, &l);
    Py_END_ALLOW_THREADS;
    if (atomic_fetch_sub(&self->inflight, 1) == 1) {
        pthread_mutex_lock(&self->mu);
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
    }
    if (rc < 0)
        return PyLong_FromLong(to_code(rc));
    PyObject *keys = PyList_New((Py_ssize_t)l->n);
    if (!keys) {
        mc_list_free(l);
        return NULL;
    }
    for (size_t i = 0; i < l->n; i++) {
        PyObject *k = PyBytes_FromStringAndSize(l->entries[i].key, (Py_ssize_t)l->entries[i].klen);
        if (!k) {
            Py_DECREF(keys);
            mc_list_free(l);
            return NULL;
        }
        PyList_SET_ITEM(keys, (Py_ssize_t)i, k);
    }
    PyObject *res = Py_BuildValue("(Ni)", keys, l->more);
    mc_list_free(l);
    return res;
}

/* statfs() -> (total, used, objects) or an int code. */
static PyObject *m_statfs(PyObject *op, PyObject *unused)
{
    (void)unused;
    StoreObject *self = (StoreObject *)op;
    if (!self->s || self->closing)
        return PyLong_FromLong(CODE_UNAVAILABLE_IN_CURRENT_STATUS);
    mc_space_t sp;
    int rc;
    atomic_fetch_add(&self->inflight, 1);
    Py_BEGIN_ALLOW_THREADS;
    rc = mc_statfs(self->s, &sp);
    Py_END_ALLOW_THREADS;
    if (atomic_fetch_sub(&self->inflight, 1) == 1) {
        pthread_mutex_lock(&self->mu);
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
    }
    if (rc < 0)
        return PyLong_FromLong(to_code(rc));
    return Py_BuildValue("(KKK)", (unsigned long long)sp.total, (unsigned long long)sp.used,
                         (unsigned long long)sp.objects);
}

/* register(target, size): target is an int address (size bytes) or an
 * object exporting a buffer (size None: all of it), which then stays alive
 * until unregistered. Returns 0 or INVALID_PARAMS. */
static PyObject *m_register(PyObject *op, PyObject *const *a, Py_ssize_t n)
{
    StoreObject *self = (StoreObject *)op;
    if (check_nargs("register", n, 1, 2) < 0)
        return NULL;
    PyObject *size = n > 1 ? a[1] : Py_None;
    if (!self->s || self->closing)
        return PyLong_FromLong(CODE_UNAVAILABLE_IN_CURRENT_STATUS);
    region_t *r = PyMem_Calloc(1, sizeof(*r));
    if (!r)
        return PyErr_NoMemory();
    if (PyLong_Check(a[0])) {
        if (size == Py_None) {
            PyMem_Free(r);
            PyErr_SetString(PyExc_TypeError, "register_buffer(ptr, size) needs a size");
            return NULL;
        }
        if (py_to_uintptr(a[0], &r->start) < 0 || py_to_size(size, &r->len) < 0) {
            PyMem_Free(r);
            return NULL;
        }
        r->writable = 1;
    } else if (PyObject_CheckBuffer(a[0])) {
        if (PyObject_GetBuffer(a[0], &r->view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) == 0) {
            r->writable = 1;
        } else {
            PyErr_Clear();
            if (PyObject_GetBuffer(a[0], &r->view, PyBUF_C_CONTIGUOUS) < 0) {
                PyMem_Free(r);
                return NULL;
            }
        }
        r->has_view = 1;
        r->start = (uintptr_t)r->view.buf;
        r->len = (size_t)r->view.len;
        if (size != Py_None) {
            size_t want;
            if (py_to_size(size, &want) < 0) {
                region_release(r);
                return NULL;
            }
            if (want > r->len) {
                region_release(r);
                return PyLong_FromLong(CODE_INVALID_PARAMS);
            }
            r->len = want;
        }
    } else {
        PyMem_Free(r);
        PyErr_Format(PyExc_TypeError, "expected an int address or a buffer, not %.100s",
                     Py_TYPE(a[0])->tp_name);
        return NULL;
    }
    int bad = r->start == 0 || r->len == 0 || r->start + r->len < r->start;
    for (region_t *q = self->regions; q && !bad; q = q->next)
        bad = q->start == r->start;
    if (bad) {
        region_release(r);
        return PyLong_FromLong(CODE_INVALID_PARAMS);
    }
    /* Zero copy where the library can (an RDMA store registers it with the
     * device): best effort, the buffer works without it (through staging),
     * e.g. when it overlaps another one or is read-only. */
    r->creg = store_call_buffer(self, 1, r->start, r->len) == 0;
    r->owner = self;
    r->next = self->regions;
    self->regions = r;
    return PyLong_FromLong(0);
}

/* unregister(ptr): 0, or INVALID_PARAMS when ptr starts no registered buffer.
 * Ops still using the buffer keep it until they are done. */
static PyObject *m_unregister(PyObject *op, PyObject *arg)
{
    StoreObject *self = (StoreObject *)op;
    uintptr_t p;
    if (PyLong_Check(arg)) {
        if (py_to_uintptr(arg, &p) < 0)
            return NULL;
    } else if (PyObject_CheckBuffer(arg)) {
        Py_buffer v;
        if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0)
            return NULL;
        p = (uintptr_t)v.buf;
        PyBuffer_Release(&v);
    } else {
        PyErr_Format(PyExc_TypeError, "expected an int address or a buffer, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    for (region_t **pp = &self->regions; *pp; pp = &(*pp)->next) {
        region_t *r = *pp;
        if (r->start != p)
            continue;
        *pp = r->next;
        r->dead = 1;
        if (r->users == 0)
            region_release(r);
        return PyLong_FromLong(0);
    }
    return PyLong_FromLong(CODE_INVALID_PARAMS);
}

static void store_drop_regions(StoreObject *self)
{
    while (self->regions) {
        region_t *r = self->regions;
        self->regions = r->next;
        r->dead = 1;
        if (r->users == 0)
            region_release(r);
    }
}

/* Waits for the ops in flight on the C side, then closes the library store.
 * Futures of async ops are resolved by their Completer's next drain(). */
static void store_close(StoreObject *self)
{
    if (!self->s)
        return;
    self->closing = 1;
    mc_store_t *s = self->s;
    Py_BEGIN_ALLOW_THREADS;
    pthread_mutex_lock(&self->mu);
    while (atomic_load(&self->inflight) > 0)
        pthread_cond_wait(&self->cv, &self->mu);
    pthread_mutex_unlock(&self->mu);
    mc_store_close(s);
    Py_END_ALLOW_THREADS;
    self->s = NULL;
    store_drop_regions(self);
}

/* wait_idle(): waits until no operation is in flight on the C side (results
 * may still wait in a Completer's queue). */
static PyObject *m_wait_idle(PyObject *op, PyObject *unused)
{
    (void)unused;
    StoreObject *self = (StoreObject *)op;
    Py_BEGIN_ALLOW_THREADS;
    pthread_mutex_lock(&self->mu);
    while (atomic_load(&self->inflight) > 0)
        pthread_cond_wait(&self->cv, &self->mu);
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

static PyObject *m_close(PyObject *op, PyObject *unused)
{
    (void)unused;
    store_close((StoreObject *)op);
    return PyLong_FromLong(0);
}

static PyObject *m_is_open(PyObject *op, PyObject *unused)
{
    (void)unused;
    StoreObject *self = (StoreObject *)op;
    return PyBool_FromLong(self->s != NULL && !self->closing);
}

static PyObject *m_inflight(PyObject *op, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(atomic_load(&((StoreObject *)op)->inflight));
}

/* Store(segment_size=0, lease_ms=0, master=None, evict_high_pct=0,
 *       evict_ratio_pct=0, listen=None, timeout_ms=0): opens a store.
 * Embedded when master is None or empty (segment_size 0: the library's
 * default; listen: also serve the master protocol there); otherwise a client
 * of the master at `master` ("host:port"), a node contributing segment_size
 * bytes when that is > 0 (its data served on listen, default 127.0.0.1:0),
 * a pure client when it is 0. timeout_ms bounds every network wait (0: the
 * library's default). protocol is "tcp" (None: the default), "rdma" or
 * "auto"; rdma_devices names the verbs devices to try, comma-separated
 * (None or "": the first present). Raises OSError(errno) on failure, e.g.
 * ENODEV for protocol "rdma" without a usable device. */
static int Store_init(PyObject *op, PyObject *args, PyObject *kw)
{
    StoreObject *self = (StoreObject *)op;
    static char *kwlist[] = {"segment_size",    "lease_ms",      "master",     "evict_high_pct",
                             "evict_ratio_pct", "listen",        "timeout_ms", "protocol",
                             "rdma_devices",    "replica_cache", NULL};
    unsigned long long seg = 0, lease = 0, timeout = 0;
    const char *master = NULL, *listen = NULL, *protocol = NULL, *rdma_devices = NULL;
    unsigned int high = 0, ratio = 0;
    /* No replica-list cache: get() sees other clients' removes and
     * replacements at once, as this API promises. */
    int replica_cache = 0;
    if (self->s) {
        PyErr_SetString(PyExc_RuntimeError, "Store is already open");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|KKzIIzKzzp", kwlist, &seg, &lease, &master, &high,
                                     &ratio, &listen, &timeout, &protocol, &rdma_devices,
                                     &replica_cache))
        return -1;
    mc_store_opts_t o;
    mc_store_opts_init(&o);
    if (master && master[0])
        o.segment_size = seg; /* 0: a pure client, no segment */
    else if (seg)
        o.segment_size = seg;
    if (lease)
        o.lease_ms = lease;
    o.master = master;
    o.evict_high_pct = high;
    o.evict_ratio_pct = ratio;
    o.listen = listen && listen[0] ? listen : NULL;
    o.timeout_ms = timeout;
    o.protocol = protocol;
    o.rdma_devices = rdma_devices && rdma_devices[0] ? rdma_devices : NULL;
    o.no_replica_cache = !replica_cache;
    mc_store_t *s = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = mc_store_open(&s, &o);
    Py_END_ALLOW_THREADS;
    if (rc < 0) {
        PyObject *e = Py_BuildValue("(is)", -rc, mc_strerror(rc));
        if (e) {
            PyErr_SetObject(PyExc_OSError, e);
            Py_DECREF(e);
        }
        return -1;
    }
    self->s = s;
    self->closing = 0;
    return 0;
}

static PyObject *Store_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    StoreObject *self = (StoreObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    atomic_init(&self->inflight, 0);
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    return (PyObject *)self;
}

static void Store_dealloc(PyObject *op)
{
    StoreObject *self = (StoreObject *)op;
    /* Groups hold a reference, so nothing is in flight here. */
    store_close(self);
    store_drop_regions(self);
    pthread_mutex_destroy(&self->mu);
    pthread_cond_destroy(&self->cv);
    Py_TYPE(op)->tp_free(op);
}

/* A sync method and its async twin. */
#define NAME_OF(x) #x
#define SYNC_METHOD(name, doc)                                                                     \
    {                                                                                              \
        NAME_OF(name), (PyCFunction)(void (*)(void))m_##name, METH_FASTCALL, doc                   \
    }
#define ASYNC_METHOD(name)                                                                         \
    {                                                                                              \
        NAME_OF(name)                                                                              \
        "_async", (PyCFunction)(void (*)(void))m_##name##_async, METH_FASTCALL,                    \
            "The same with a Completer first; returns an asyncio future."                          \
    }
#define FAST(name, doc) SYNC_METHOD(name, doc), ASYNC_METHOD(name)

static PyMethodDef Store_methods[] = {
    FAST(get, "get(key) -> bytes (b'' on a miss)"),
    FAST(get_buffer, "get_buffer(key) -> Buffer or None"),
    FAST(get_batch, "get_batch(keys) -> list of bytes"),
    FAST(get_buffer_batch, "get_buffer_batch(keys) -> list of Buffer or None"),
    FAST(get_into, "get_into(key, target, size=None) -> bytes read or a code"),
    FAST(get_into_batch, "get_into_batch(keys, targets, sizes) -> list"),
    FAST(read_ranges, "read_ranges(keys, addrs, src_offsets, sizes) -> list"),
    FAST(put, "put(key, value, opts, upsert) -> code"),
    FAST(put_parts, "put_parts(key, parts, opts, upsert) -> code"),
    FAST(put_batch, "put_batch(keys, values, opts, upsert) -> list of codes"),
    FAST(put_from, "put_from(key, ptr, size, opts, upsert) -> code"),
    FAST(put_from_batch, "put_from_batch(keys, ptrs, sizes, opts, upsert) -> list of codes"),
    FAST(exist, "exist(key) -> 1, 0 or a code"),
    FAST(exist_batch, "exist_batch(keys) -> list"),
    FAST(size, "size(key) -> size or a code"),
    FAST(remove, "remove(key, force=False) -> code"),
    FAST(remove_batch, "remove_batch(keys, force=False) -> list of codes"),
    {"list", m_list, METH_VARARGS, "list(prefix, after, max) -> (keys, more) or a code"},
    {"statfs", m_statfs, METH_NOARGS, "statfs() -> (total, used, objects) or a code"},
    {"register", (PyCFunction)(void (*)(void))m_register, METH_FASTCALL,
     "register(target, size=None) -> code"},
    {"unregister", m_unregister, METH_O, "unregister(ptr) -> code"},
    {"close", m_close, METH_NOARGS, "close() -> 0; waits for ops in flight"},
    {"wait_idle", m_wait_idle, METH_NOARGS, "wait_idle(): wait for ops in flight"},
    {"is_open", m_is_open, METH_NOARGS, "is_open() -> bool"},
    {"inflight", m_inflight, METH_NOARGS, "inflight() -> groups in flight on the C side"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._store.Store",
    .tp_basicsize = sizeof(StoreObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An open libmooncake store (embedded unless master is given).",
    .tp_new = Store_new,
    .tp_init = Store_init,
    .tp_dealloc = Store_dealloc,
    .tp_methods = Store_methods,
};

/* ---- Completer ---- */

/* Takes every queued group off c's queue. */
static group_t *completer_take(CompleterObject *c)
{
    uint64_t v;
    ssize_t r = read(c->fd, &v, sizeof(v));
    (void)r; /* EAGAIN when a previous drain already took everything */
    pthread_mutex_lock(&c->mu);
    group_t *g = c->head;
    c->head = c->tail = NULL;
    pthread_mutex_unlock(&c->mu);
    return g;
}

/* drain(): resolves the futures of every completed group. Runs on the event
 * loop (it is the loop's reader callback for fileno()). */
static PyObject *Completer_drain(PyObject *op, PyObject *unused)
{
    (void)unused;
    CompleterObject *c = (CompleterObject *)op;
    if (c->fd < 0)
        Py_RETURN_NONE;
    group_t *g = completer_take(c);
    long n = 0;
    while (g) {
        group_t *next = g->qnext;
        PyObject *cancelled = PyObject_CallMethodNoArgs(g->fut, str_cancelled);
        int skip = cancelled ? PyObject_IsTrue(cancelled) : 1;
        Py_XDECREF(cancelled);
        PyErr_Clear();
        n++;
        if (!skip && group_feed(g)) {
            group_start(g); /* not finished: it comes back through the queue */
            g = next;
            continue;
        }
        if (!skip) {
            PyObject *res = group_result(g);
            PyObject *x;
            if (res) {
                x = PyObject_CallMethodOneArg(g->fut, str_set_result, res);
                Py_DECREF(res);
            } else {
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                PyErr_NormalizeException(&et, &ev, &tb);
                x = PyObject_CallMethodOneArg(g->fut, str_set_exception, ev ? ev : Py_None);
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
            }
            Py_XDECREF(x);
            PyErr_Clear();
        }
        group_free(g);
        g = next;
    }
    return PyLong_FromLong(n);
}

/* discard(): frees queued groups without resolving their futures (their loop
 * is gone). */
static PyObject *Completer_discard(PyObject *op, PyObject *unused)
{
    (void)unused;
    CompleterObject *c = (CompleterObject *)op;
    if (c->fd < 0)
        Py_RETURN_NONE;
    group_t *g = completer_take(c);
    while (g) {
        group_t *next = g->qnext;
        group_free(g);
        g = next;
    }
    Py_RETURN_NONE;
}

static PyObject *Completer_fileno(PyObject *op, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(((CompleterObject *)op)->fd);
}

/* close(): closes the eventfd; remove it from the loop first. */
static PyObject *Completer_close(PyObject *op, PyObject *unused)
{
    (void)unused;
    CompleterObject *c = (CompleterObject *)op;
    if (c->fd >= 0) {
        Completer_discard(op, NULL);
        close(c->fd);
        c->fd = -1;
    }
    Py_RETURN_NONE;
}

static int Completer_init(PyObject *op, PyObject *args, PyObject *kw)
{
    CompleterObject *c = (CompleterObject *)op;
    static char *kwlist[] = {"loop", NULL};
    PyObject *loop;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O", kwlist, &loop))
        return -1;
    PyObject *cf = PyObject_GetAttrString(loop, "create_future");
    if (!cf)
        return -1;
    Py_XSETREF(c->create_future, cf);
    if (c->fd < 0) {
        c->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (c->fd < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
    }
    return 0;
}

static PyObject *Completer_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    CompleterObject *c = (CompleterObject *)type->tp_alloc(type, 0);
    if (!c)
        return NULL;
    c->fd = -1;
    pthread_mutex_init(&c->mu, NULL);
    return (PyObject *)c;
}

static void Completer_dealloc(PyObject *op)
{
    CompleterObject *c = (CompleterObject *)op;
    /* Queued groups hold a reference, so the queue is empty here. */
    if (c->fd >= 0)
        close(c->fd);
    Py_XDECREF(c->create_future);
    pthread_mutex_destroy(&c->mu);
    Py_TYPE(op)->tp_free(op);
}

static PyMethodDef Completer_methods[] = {
    {"drain", Completer_drain, METH_NOARGS, "drain() -> groups resolved"},
    {"discard", Completer_discard, METH_NOARGS, "discard(): drop queued results"},
    {"fileno", Completer_fileno, METH_NOARGS, "fileno() -> the eventfd"},
    {"close", Completer_close, METH_NOARGS, "close(): close the eventfd"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CompleterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._store.Completer",
    .tp_basicsize = sizeof(CompleterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Completer(loop): resolves the futures of one event loop from an eventfd.",
    .tp_new = Completer_new,
    .tp_init = Completer_init,
    .tp_dealloc = Completer_dealloc,
    .tp_methods = Completer_methods,
};

/* ---- Buffer ---- */

static char empty_buf[1];

static int Buffer_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    BufferObject *b = (BufferObject *)op;
    return PyBuffer_FillInfo(view, op, b->buf ? b->buf : empty_buf, b->len, 0, flags);
}

static PyBufferProcs Buffer_as_buffer = {
    .bf_getbuffer = Buffer_getbuffer,
    .bf_releasebuffer = NULL,
};

static Py_ssize_t Buffer_len(PyObject *op)
{
    return ((BufferObject *)op)->len;
}

static PySequenceMethods Buffer_as_sequence = {
    .sq_length = Buffer_len,
};

static PyObject *Buffer_ptr(PyObject *op, PyObject *unused)
{
    (void)unused;
    BufferObject *b = (BufferObject *)op;
    return PyLong_FromVoidPtr(b->buf ? b->buf : empty_buf);
}

static PyObject *Buffer_size(PyObject *op, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(((BufferObject *)op)->len);
}

static void Buffer_dealloc(PyObject *op)
{
    free(((BufferObject *)op)->buf);
    PyObject_Free(op);
}

static PyMethodDef Buffer_methods[] = {
    {"ptr", Buffer_ptr, METH_NOARGS, "ptr() -> address of the bytes"},
    {"size", Buffer_size, METH_NOARGS, "size() -> length in bytes"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._store.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An object's bytes, exposed with the buffer protocol (no copy).",
    .tp_dealloc = Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_as_sequence = &Buffer_as_sequence,
    .tp_methods = Buffer_methods,
};

/* ---- module ---- */

static PyObject *mod_parse_size(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *s = PyUnicode_AsUTF8(arg);
    if (!s)
        return NULL;
    uint64_t v;
    int rc = mc_parse_size(s, &v);
    if (rc < 0) {
        PyErr_Format(PyExc_ValueError, "not a size: %R (%s)", arg, mc_strerror(rc));
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *mod_to_code(PyObject *m, PyObject *arg)
{
    (void)m;
    long r = PyLong_AsLong(arg);
    if (r == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLong(to_code((int)r));
}

static PyMethodDef module_methods[] = {
    {"parse_size", mod_parse_size, METH_O, "parse_size('16 MB') -> bytes; ValueError if not"},
    {"to_code", mod_to_code, METH_O, "to_code(-errno) -> Mooncake error code"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mooncake._store",
    .m_doc = "libmooncake for Python (used by mooncake.store).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__store(void)
{
    if (PyType_Ready(&StoreType) < 0 || PyType_Ready(&CompleterType) < 0 ||
        PyType_Ready(&BufferType) < 0)
        return NULL;
    str_cancelled = PyUnicode_InternFromString("cancelled");
    str_set_result = PyUnicode_InternFromString("set_result");
    str_set_exception = PyUnicode_InternFromString("set_exception");
    if (!str_cancelled || !str_set_result || !str_set_exception)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Store", (PyObject *)&StoreType) < 0 ||
        PyModule_AddObjectRef(m, "Completer", (PyObject *)&CompleterType) < 0 ||
        PyModule_AddObjectRef(m, "Buffer", (PyObject *)&BufferType) < 0)
        goto fail;
    static const struct {
        const char *name;
        long value;
    } consts[] = {
        {"INTERNAL_ERROR", CODE_INTERNAL_ERROR},
        {"BUFFER_OVERFLOW", CODE_BUFFER_OVERFLOW},
        {"NO_AVAILABLE_HANDLE", CODE_NO_AVAILABLE_HANDLE},
        {"INVALID_KEY", CODE_INVALID_KEY},
        {"INVALID_PARAMS", CODE_INVALID_PARAMS},
        {"OBJECT_NOT_FOUND", CODE_OBJECT_NOT_FOUND},
        {"OBJECT_ALREADY_EXISTS", CODE_OBJECT_ALREADY_EXISTS},
        {"OBJECT_HAS_LEASE", CODE_OBJECT_HAS_LEASE},
        {"RPC_FAIL", CODE_RPC_FAIL},
        {"UNAVAILABLE_IN_CURRENT_STATUS", CODE_UNAVAILABLE_IN_CURRENT_STATUS},
        {"UNAVAILABLE_IN_CURRENT_MODE", CODE_UNAVAILABLE_IN_CURRENT_MODE},
        {"KEY_MAX", MC_KEY_MAX},
        {"DEFAULT_LEASE_MS", MC_DEFAULT_LEASE_MS},
        {"PIN_NONE", MC_PIN_NONE},
        {"PIN_SOFT", MC_PIN_SOFT},
        {"PIN_HARD", MC_PIN_HARD},
    };
    for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value) < 0)
            goto fail;
    if (PyModule_AddStringConstant(m, "LIB_VERSION", MC_VERSION_STRING) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
