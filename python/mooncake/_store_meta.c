/*
 * _store_meta.c - the Store's calls about objects rather than their bytes:
 * extended attributes (an object's metadata), rename, the master's counters,
 * where a version's replicas are, copy and move tasks, whether caller memory
 * is registered, and the metrics server. Each is one blocking library call made with the GIL
 * released and counted in flight, so that close() waits for it.
 *
 * Unlike the table-driven operations these return the library's result as
 * it is (0, a length, or -errno): mooncake.store needs to tell ENODATA or
 * EEXIST apart, and turns the rest into Mooncake's codes with to_code().
 */
#include "_store_i.h"

#include <errno.h>

/* Counts a blocking call in flight; -1 (the store is closed) if it cannot
 * start. With the GIL. */
static int enter(StoreObject *self)
{
    if (!self->s || self->closing)
        return -1;
    atomic_fetch_add(&self->inflight, 1);
    return 0;
}

#define CLOSED() PyLong_FromLong(-E_CLOSED)

/* xattr_get(key, name) -> bytes, or -errno (ENODATA: no such attribute,
 * ENOENT: no such key). key and name are bytes. */
PyObject *mcpy_store_xattr_get(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *key, *name;
    Py_ssize_t klen;
    if (!PyArg_ParseTuple(args, "y#y:xattr_get", &key, &klen, &name))
        return NULL;
    if (enter(self) < 0)
        return CLOSED();
    char *buf = PyMem_Malloc(MC_XATTR_SIZE_MAX);
    if (!buf) {
        mcpy_store_leave(self);
        return PyErr_NoMemory();
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = mc_xattr_get(self->s, key, (size_t)klen, name, buf, MC_XATTR_SIZE_MAX);
    Py_END_ALLOW_THREADS;
    mcpy_store_leave(self);
    PyObject *res = rc < 0 ? PyLong_FromLong(rc) : PyBytes_FromStringAndSize(buf, rc);
    PyMem_Free(buf);
    return res;
}

/* xattr_set(key, name, value, flags) -> 0 or -errno (MC_XATTR_* flags). */
PyObject *mcpy_store_xattr_set(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *key, *name;
    Py_buffer val;
    Py_ssize_t klen;
    unsigned flags;
    if (!PyArg_ParseTuple(args, "y#yy*I:xattr_set", &key, &klen, &name, &val, &flags))
        return NULL;
    int rc = -E_CLOSED;
    if (enter(self) == 0) {
        Py_BEGIN_ALLOW_THREADS;
        rc = mc_xattr_set(self->s, key, (size_t)klen, name, val.buf, (size_t)val.len, flags);
        Py_END_ALLOW_THREADS;
        mcpy_store_leave(self);
    }
    PyBuffer_Release(&val);
    return PyLong_FromLong(rc);
}

/* rename(src, dst, flags) -> 0 or -errno (MC_RENAME_* flags). */
PyObject *mcpy_store_rename(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *src, *dst;
    Py_ssize_t slen, dlen;
    unsigned flags;
    if (!PyArg_ParseTuple(args, "y#y#I:rename", &src, &slen, &dst, &dlen, &flags))
        return NULL;
    if (enter(self) < 0)
        return CLOSED();
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = mc_rename(self->s, src, (size_t)slen, dst, (size_t)dlen, flags);
    Py_END_ALLOW_THREADS;
    mcpy_store_leave(self);
    return PyLong_FromLong(rc);
}

/* master_stats() -> {name: value} of the master's counters, or -errno. */
PyObject *mcpy_store_master_stats(PyObject *op, PyObject *unused)
{
    (void)unused;
    StoreObject *self = (StoreObject *)op;
    mc_counter_t c[64];
    if (enter(self) < 0)
        return CLOSED();
    int n;
    Py_BEGIN_ALLOW_THREADS;
    n = mc_master_stats(self->s, c, sizeof(c) / sizeof(c[0]));
    Py_END_ALLOW_THREADS;
    mcpy_store_leave(self);
    if (n < 0)
        return PyLong_FromLong(n);
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(c[i].value);
        if (!v || PyDict_SetItemString(d, c[i].name, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

/* registered(ptr, size) -> True when [ptr, ptr + size) lies inside one
 * registered buffer. */
PyObject *mcpy_store_registered(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    unsigned long long p, n;
    if (!PyArg_ParseTuple(args, "KK:registered", &p, &n))
        return NULL;
    for (region_t *r = self->regions; r; r = r->next)
        if (!r->dead && p >= r->start && p - r->start <= r->len && n <= r->len - (p - r->start))
            Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

#define MAX_REPLICAS 16

/* Opens key's current version, copies its stat and replicas, closes it.
 * Without the GIL. Returns the replica count or -errno. */
static int read_replicas(mc_store_t *s, const char *key, size_t klen, mc_stat_t *st,
                         mc_replica_t *out)
{
    mc_obj_t *ob = NULL;
    int rc = mc_obj_open(s, key, klen, &ob);
    if (rc < 0)
        return rc;
    *st = *mc_obj_stat(ob);
    rc = mc_obj_replicas(ob, out, MAX_REPLICAS);
    mc_obj_close(ob);
    return rc < MAX_REPLICAS ? rc : MAX_REPLICAS;
}

/* replicas(key) -> (size, version, [(segment, addr, offset, bytes,
 * extents)]) of key's current version, or -errno. It opens the version
 * (which pins it, grants no read lease) and closes it again. */
PyObject *mcpy_store_replicas(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *key;
    Py_ssize_t klen;
    if (!PyArg_ParseTuple(args, "y#:replicas", &key, &klen))
        return NULL;
    if (enter(self) < 0)
        return CLOSED();
    mc_replica_t reps[MAX_REPLICAS];
    mc_stat_t st;
    int n;
    Py_BEGIN_ALLOW_THREADS;
    n = read_replicas(self->s, key, (size_t)klen, &st, reps);
    Py_END_ALLOW_THREADS;
    mcpy_store_leave(self);
    if (n < 0)
        return PyLong_FromLong(n);
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        PyObject *t = Py_BuildValue("(IsKKI)", reps[i].segment, reps[i].addr,
                                    (unsigned long long)reps[i].offset,
                                    (unsigned long long)reps[i].bytes, reps[i].extents);
        if (!t)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, t);
    }
    return list ? Py_BuildValue("(KKN)", (unsigned long long)st.size,
                                (unsigned long long)st.version, list)
                : NULL;
}

static int collect(void *arg, mc_metrics_t *m)
{
    return mc_metrics_store(m, arg);
}

/* serve_metrics(addr) -> the TCP port, or -errno: serves the store's
 * Prometheus metrics (/metrics) and /health over HTTP on addr ("PORT",
 * "HOST:PORT") until the store closes. -EEXIST when it already serves. */
PyObject *mcpy_store_serve_metrics(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *addr;
    if (!PyArg_ParseTuple(args, "s:serve_metrics", &addr))
        return NULL;
    if (self->metrics)
        return PyLong_FromLong(-EEXIST);
    if (enter(self) < 0)
        return CLOSED();
    mc_metrics_server_t *srv = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = mc_metrics_serve(&srv, addr, mc_store_loop(self->s), collect, self->s);
    Py_END_ALLOW_THREADS;
    mcpy_store_leave(self);
    if (rc < 0)
        return PyLong_FromLong(rc);
    self->metrics = srv;
    return PyLong_FromLong(mc_metrics_server_port(srv));
}

/* served_addr() -> the address this store serves on ("" when none). */
PyObject *mcpy_store_served_addr(PyObject *op, PyObject *unused)
{
    (void)unused;
    StoreObject *self = (StoreObject *)op;
    if (!self->s || self->closing)
        return PyUnicode_FromString("");
    return PyUnicode_FromString(mc_store_served_addr(self->s));
}

/* task_copy(key, [targets]) or task_move(key, source, target) -> the
 * master's task id (an int), or -errno. Addresses are str. */
PyObject *mcpy_store_task_create(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *key, *src = NULL, *one = NULL;
    Py_ssize_t klen;
    PyObject *targets = NULL;
    if (!PyArg_ParseTuple(args, "y#O|s:task_create", &key, &klen, &targets, &src))
        return NULL;
    const char *t[MC_TASK_TARGETS_MAX];
    Py_ssize_t n = 0;
    if (src) { /* a move: targets is the one target */
        if (!(one = PyUnicode_AsUTF8(targets)))
            return NULL;
        t[n++] = one;
    } else {
        if (!PyList_Check(targets))
            return PyErr_Format(PyExc_TypeError, "targets must be a list");
        if (PyList_GET_SIZE(targets) > MC_TASK_TARGETS_MAX || !PyList_GET_SIZE(targets))
            return PyLong_FromLong(-EINVAL);
        for (; n < PyList_GET_SIZE(targets); n++)
            if (!(t[n] = PyUnicode_AsUTF8(PyList_GET_ITEM(targets, n))))
                return NULL;
    }
    if (enter(self) < 0)
        return CLOSED();
    uint64_t id = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = src ? mc_task_move(self->s, key, (size_t)klen, src, one, &id)
             : mc_task_copy(self->s, key, (size_t)klen, t, (size_t)n, &id);
    Py_END_ALLOW_THREADS;
    mcpy_store_leave(self);
    return rc < 0 ? PyLong_FromLong(rc) : PyLong_FromUnsignedLongLong(id);
}

/* task_query(id) -> (type, status, error, created ms, updated ms, node,
 * message), or -errno (ENOENT: no such task). */
PyObject *mcpy_store_task_query(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    unsigned long long id;
    if (!PyArg_ParseTuple(args, "K:task_query", &id))
        return NULL;
    if (enter(self) < 0)
        return CLOSED();
    mc_task_info_t ti;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = mc_task_query(self->s, id, &ti);
    Py_END_ALLOW_THREADS;
    mcpy_store_leave(self);
    if (rc < 0)
        return PyLong_FromLong(rc);
    return Py_BuildValue("(IIiLLKs)", ti.type, ti.status, ti.error, (long long)ti.created_ms,
                         (long long)ti.updated_ms, (unsigned long long)ti.node, ti.message);
}

/* replica_drop(key, addr) -> 0 or -errno: the replica on the segment at
 * data address addr (str) off key's object (mc_replica_drop()). */
PyObject *mcpy_store_replica_drop(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *key, *addr;
    Py_ssize_t klen;
    if (!PyArg_ParseTuple(args, "y#s:replica_drop", &key, &klen, &addr))
        return NULL;
    if (enter(self) < 0)
        return CLOSED();
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = mc_replica_drop(self->s, key, (size_t)klen, addr);
    Py_END_ALLOW_THREADS;
    mcpy_store_leave(self);
    return PyLong_FromLong(rc);
}
