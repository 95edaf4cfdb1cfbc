/*
 * _store_buffers.c - caller memory: buffers registered with
 * Store.register() (int addresses are only accepted inside one), the memory
 * an op reads from or writes into (an int address or an object exporting a
 * buffer), and the Buffer type that get_buffer() returns (memory it owns,
 * exposed with the buffer protocol, no copy).
 *
 * Regions are guarded by the GIL. An op that uses one counts as a user, so
 * unregister() (or close()) frees it only when the last op using it is freed.
 */
#include "_store_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- registered buffers ---- */

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
    mcpy_store_leave(self);
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

void mcpy_region_busy(region_t *r)
{
    atomic_fetch_add(&r->busy, 1);
}

void mcpy_region_idle(region_t *r)
{
    StoreObject *self = r->owner;
    if (atomic_fetch_sub(&r->busy, 1) == 1) {
        pthread_mutex_lock(&self->mu);
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
    }
}

/* Waits, without the GIL, until the library is done with every op that
 * uses r's memory: the caller may free that memory once unregister()
 * returned, also after cancelling an async call that still runs. In a
 * child of fork() such ops are the parent's and never end here. */
static void region_wait_idle(StoreObject *self, region_t *r)
{
    if (atomic_load(&r->busy) == 0 || self->pid != getpid())
        return;
    Py_BEGIN_ALLOW_THREADS;
    pthread_mutex_lock(&self->mu);
    while (atomic_load(&r->busy) > 0)
        pthread_cond_wait(&self->cv, &self->mu);
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS;
}

void mcpy_region_unuse(region_t *r)
{
    if (--r->users == 0 && r->dead)
        region_release(r);
}

/* Marks r unregistered (off the store's list already); frees it unless an op
 * still uses it. */
static void region_kill(region_t *r)
{
    r->dead = 1;
    if (r->users == 0)
        region_release(r);
}

/* The TypeError for an argument that is neither an address nor a buffer. */
static int not_memory(PyObject *o)
{
    PyErr_Format(PyExc_TypeError, "expected an int address or a buffer, not %.100s",
                 Py_TYPE(o)->tp_name);
    return -1;
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

int mcpy_py_to_size(PyObject *o, size_t *out)
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
int mcpy_op_set_memory(op_t *o, PyObject *target, PyObject *size, int writable)
{
    StoreObject *self = o->g->store;
    if (PyLong_Check(target)) {
        uintptr_t p;
        size_t n;
        if (py_to_uintptr(target, &p) < 0 || mcpy_py_to_size(size, &n) < 0)
            return -1;
        region_t *r = region_find(self, p, n);
        if (!r || (writable && !r->writable)) {
            if (o->started)
                mcpy_op_fail(o, E_NOTREG);
            return 0;
        }
        r->users++;
        o->region = r;
        o->buf = (char *)p;
        o->cap = n;
        return 0;
    }
    if (!PyObject_CheckBuffer(target))
        return not_memory(target);
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(target, &o->view, flags) < 0) {
        PyErr_Clear();
        if (o->started)
            mcpy_op_fail(o, EINVAL);
        return 0;
    }
    o->has_view = 1;
    o->buf = o->view.buf;
    o->cap = (size_t)o->view.len;
    if (size != Py_None) {
        size_t n;
        if (mcpy_py_to_size(size, &n) < 0)
            return -1;
        if (n > o->cap) {
            if (o->started)
                mcpy_op_fail(o, EINVAL);
            return 0;
        }
        o->cap = n;
    }
    return 0;
}

/* register(target, size): target is an int address (size bytes) or an
 * object exporting a buffer (size None: all of it), which then stays alive
 * until unregistered. Returns 0 or INVALID_PARAMS. */
PyObject *mcpy_store_register(PyObject *op, PyObject *const *a, Py_ssize_t n)
{
    StoreObject *self = (StoreObject *)op;
    if (mcpy_check_nargs("register", n, 1, 2) < 0)
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
        if (py_to_uintptr(a[0], &r->start) < 0 || mcpy_py_to_size(size, &r->len) < 0) {
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
            if (mcpy_py_to_size(size, &want) < 0) {
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
        not_memory(a[0]);
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
 * Returns once the library is done with the ops using the buffer (the
 * region itself is freed when the last of them is freed). */
PyObject *mcpy_store_unregister(PyObject *op, PyObject *arg)
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
        not_memory(arg);
        return NULL;
    }
    for (region_t **pp = &self->regions; *pp; pp = &(*pp)->next) {
        region_t *r = *pp;
        if (r->start != p)
            continue;
        *pp = r->next; /* off the list first: no new op finds it */
        region_wait_idle(self, r);
        region_kill(r);
        return PyLong_FromLong(0);
    }
    return PyLong_FromLong(CODE_INVALID_PARAMS);
}

void mcpy_store_drop_regions(StoreObject *self)
{
    while (self->regions) {
        region_t *r = self->regions;
        self->regions = r->next;
        region_kill(r);
    }
}

/* ---- Buffer ---- */

PyObject *mcpy_buffer_new(char *buf, size_t len)
{
    BufferObject *b = PyObject_New(BufferObject, &mcpy_BufferType);
    if (!b)
        return NULL;
    b->buf = buf;
    b->len = (Py_ssize_t)len;
    return (PyObject *)b;
}

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

PyTypeObject mcpy_BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._store.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An object's bytes, exposed with the buffer protocol (no copy).",
    .tp_dealloc = Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_as_sequence = &Buffer_as_sequence,
    .tp_methods = Buffer_methods,
};
