/*
 * _store.c - mooncake._store, the CPython extension behind the direct backend
 * of mooncake.store and mooncake.async_store: the module, its constants, and
 * the Store object's lifecycle (open, close, waiting for what is in flight).
 *
 * It uses libmooncake's public API only (mooncake/mooncake.h). Every request
 * becomes a group of ops run on the store's loop thread (_store_group.c),
 * made by one call path from a table of methods (_store_methods.c); sync
 * callers wait with the GIL released, async callers get an asyncio future
 * that a Completer resolves from an eventfd (_store_completer.c). Caller
 * memory and registered buffers are in _store_buffers.c.
 *
 * Results are Mooncake's integer ErrorCode values (see mcpy_to_code()).
 */
#include "_store_i.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

long mcpy_to_code(int r)
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
    case ECHILD: /* a store inherited through fork() */
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

void mcpy_store_leave(StoreObject *self)
{
    if (atomic_fetch_sub(&self->inflight, 1) == 1) {
        pthread_mutex_lock(&self->mu);
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
    }
}

/* Waits until nothing is in flight on the C side. Without the GIL. In a
 * child of fork() it returns at once: what is in flight is the parent's,
 * whose threads are not here to end it (and a lock one of them held at the
 * fork stays locked here). */
static void store_wait_idle(StoreObject *self)
{
    if (self->pid != getpid())
        return;
    pthread_mutex_lock(&self->mu);
    while (atomic_load(&self->inflight) > 0)
        pthread_cond_wait(&self->cv, &self->mu);
    pthread_mutex_unlock(&self->mu);
}

/* ---- the Store ---- */

/* Waits for the ops in flight on the C side, then closes the library store.
 * Futures of async ops are resolved by their Completer's next drain(). */
static void store_close(StoreObject *self)
{
    if (!self->s || self->closing)
        return; /* closed, or closing on another thread */
    if (self->pid != getpid()) {
        /* Inherited through fork(): the parent's threads (the store's, the
         * metrics server's) are not here to wait for. Forget it; the
         * parent's store goes on. */
        mc_store_close(self->s); /* returns at once in a forked child */
        self->s = NULL;
        self->metrics = NULL;
        return;
    }
    self->closing = 1;
    mc_store_t *s = self->s;
    mc_metrics_server_t *metrics = self->metrics;
    self->metrics = NULL;
    Py_BEGIN_ALLOW_THREADS;
    mc_metrics_stop(metrics); /* before the store its scrapes read */
    store_wait_idle(self);
    mc_store_close(s);
    Py_END_ALLOW_THREADS;
    self->s = NULL;
    mcpy_orphans_free(); /* ended while their loop was gone: they hold buffers */
    mcpy_store_drop_regions(self);
    mcpy_store_drop_pins(self);
}

/* wait_idle(): waits until no operation is in flight on the C side (results
 * may still wait in a Completer's queue). */
PyObject *mcpy_store_m_wait_idle(PyObject *op, PyObject *unused)
{
    (void)unused;
    StoreObject *self = (StoreObject *)op;
    Py_BEGIN_ALLOW_THREADS;
    store_wait_idle(self);
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

PyObject *mcpy_store_m_close(PyObject *op, PyObject *unused)
{
    (void)unused;
    store_close((StoreObject *)op);
    return PyLong_FromLong(0);
}

PyObject *mcpy_store_m_is_open(PyObject *op, PyObject *unused)
{
    (void)unused;
    StoreObject *self = (StoreObject *)op;
    return PyBool_FromLong(self->s != NULL && !self->closing);
}

PyObject *mcpy_store_m_inflight(PyObject *op, PyObject *unused)
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
 * (None or "": the first present). secret_file: the cluster's shared secret
 * (mc_store_opts_t.secret_file; None: no authentication). segment_file,
 * segment_offset: the segment is that file's bytes from that offset
 * (mc_store_opts_t.segment_file). Raises
 * OSError(errno) on failure, e.g. ENODEV for protocol "rdma" without a
 * usable device, EACCES when the master wants another secret. */
static int Store_init(PyObject *op, PyObject *args, PyObject *kw)
{
    StoreObject *self = (StoreObject *)op;
    static char *kwlist[] = {"segment_size",    "lease_ms",
                             "master",          "evict_high_pct",
                             "evict_ratio_pct", "listen",
                             "timeout_ms",      "protocol",
                             "rdma_devices",    "replica_cache",
                             "secret_file",     "segment_file",
                             "segment_offset",  NULL};
    unsigned long long seg = 0, lease = 0, timeout = 0;
    const char *master = NULL, *listen = NULL, *protocol = NULL, *rdma_devices = NULL;
    const char *secret_file = NULL, *segment_file = NULL;
    unsigned long long segment_offset = 0;
    unsigned int high = 0, ratio = 0;
    /* No replica-list cache: get() sees other clients' removes and
     * replacements at once, as this API promises. */
    int replica_cache = 0;
    if (self->s) {
        PyErr_SetString(PyExc_RuntimeError, "Store is already open");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|KKzIIzKzzpzzK", kwlist, &seg, &lease, &master,
                                     &high, &ratio, &listen, &timeout, &protocol, &rdma_devices,
                                     &replica_cache, &secret_file, &segment_file, &segment_offset))
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
    o.secret_file = secret_file && secret_file[0] ? secret_file : NULL;
    o.segment_file = segment_file;
    o.segment_offset = segment_offset;
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
    self->pid = getpid();
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
    mcpy_store_drop_regions(self);
    if (self->pid == getpid()) {
        /* Not in a child of fork(): there, a parent's thread that waited
         * on cv at the fork never wakes, and destroying cv would wait for
         * it forever. */
        pthread_mutex_destroy(&self->mu);
        pthread_cond_destroy(&self->cv);
    }
    Py_TYPE(op)->tp_free(op);
}

PyTypeObject mcpy_StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._store.Store",
    .tp_basicsize = sizeof(StoreObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An open libmooncake store (embedded unless master is given).",
    .tp_new = Store_new,
    .tp_init = Store_init,
    .tp_dealloc = Store_dealloc,
    .tp_methods = mcpy_store_methods,
};

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
    return PyLong_FromLong(mcpy_to_code((int)r));
}

static PyMethodDef module_methods[] = {
    {"parse_size", mod_parse_size, METH_O, "parse_size('16 MB') -> bytes; ValueError if not"},
    {"to_code", mod_to_code, METH_O, "to_code(-errno) -> Mooncake error code"},
    {"read_file", mcpy_read_file, METH_VARARGS,
     "read_file(path, flags) -> bytes of a regular file, or -errno"},
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
    if (PyType_Ready(&mcpy_StoreType) < 0 || PyType_Ready(&mcpy_CompleterType) < 0 ||
        PyType_Ready(&mcpy_BufferType) < 0 || PyType_Ready(&mcpy_FileReaderType) < 0 ||
        mcpy_completer_init() < 0)
        return NULL;
    mcpy_methods_init();
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Store", (PyObject *)&mcpy_StoreType) < 0 ||
        PyModule_AddObjectRef(m, "Completer", (PyObject *)&mcpy_CompleterType) < 0 ||
        PyModule_AddObjectRef(m, "Buffer", (PyObject *)&mcpy_BufferType) < 0 ||
        PyModule_AddObjectRef(m, "FileReader", (PyObject *)&mcpy_FileReaderType) < 0)
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
