/*
 * _store_methods.c - the Store's methods as one table, and the one call path
 * they all take.
 *
 * Each operation is a line of MCPY_METHODS: its name, whether it also has an
 * async twin (name_async, which takes the Completer of the running event loop
 * first and returns an asyncio future), which library call each of its ops
 * makes, how an op's result becomes a Python value, and its arguments. The
 * shared code here checks the argument count, converts the arguments (keys,
 * caller memory with the buffer protocol, put options, flags), builds the
 * group of ops and hands it to mcpy_group_run(), which releases the GIL,
 * calls the library, maps the return codes and cleans up.
 *
 * Arguments are converted in two passes, which keeps the exceptions of the
 * hand-written methods this replaced: first the whole call, in argument order
 * (a sequence becomes a list, put options and flags are read, a single value
 * is checked), then each op in a fixed order of kinds (see op_fill()). Where
 * each kind of argument sits is found once, by mcpy_methods_init().
 */
#include "_store_i.h"

#include <errno.h>
#include <string.h>

/* What an argument is. For a batch method (M_BATCH) every per-op argument
 * (key, value, target, size, offset) is a sequence with one item per op. */
enum arg_kind {
    A_END = 0, /* the end of the list */
    A_KEY,     /* a key: str or bytes; the first argument */
    A_VALUE,   /* a bytes-like value to put; an int raises TypeError */
    A_PARTS,   /* a sequence of bytes-like parts, put as one value */
    A_TARGET,  /* an int address in a registered buffer, or a buffer object */
    A_SIZE,    /* the size of the A_TARGET before it (None: all of the object) */
    A_OFFSET,  /* where a ranged read starts in the object */
    A_OPTS,    /* put options: None or a tuple; the next argument is A_UPSERT */
    A_UPSERT,  /* true: replace an existing key */
    A_FORCE,   /* true: remove a key under a read lease (MC_REMOVE_FORCE) */
    A_PREFIX,  /* list: a read-only bytes-like prefix; A_AFTER and A_MAX follow */
    A_AFTER,   /* list: list after this key (bytes-like or str), or None */
    A_MAX,     /* list: at most this many keys (an int; <= 0: the default) */
    A_KINDS
};

#define MAX_ARGS 6

/* One op per key of a sequence; the result is a list. */
#define M_BATCH 1
/* Sequences of different lengths raise ValueError (else each op fails with
 * INVALID_PARAMS). */
#define M_SAME_LEN 2

typedef struct {
    enum arg_kind kind;
    const char *name; /* for error messages */
} arg_spec_t;

typedef struct method {
    const char *name;
    enum op_kind kind;   /* the library call of each op */
    enum result_kind rk; /* how each op's result becomes a Python value */
    unsigned flags;      /* M_* */
    Py_ssize_t nmin;     /* required arguments; the others default to None/False */
    arg_spec_t args[MAX_ARGS];
    /* Set by mcpy_methods_init() from args: */
    Py_ssize_t nargs;        /* the arguments, given or not */
    signed char at[A_KINDS]; /* the position of each kind of argument, or -1 */
} method_t;

#define NO_ARGS                                                                                    \
    {                                                                                              \
        A_END, NULL                                                                                \
    }
#define ASYNC_DOC "The same with a Completer first; returns an asyncio future."

/*
 * The table. X(name, SYNC or ASYNC, op kind, result kind, flags, required
 * arguments, docstring, the arguments...).
 */
#define MCPY_METHODS(X)                                                                            \
    X(get, ASYNC, K_GET, R_BYTES, 0, 1, "get(key) -> bytes (b'' on a miss)", {A_KEY, "key"})       \
    X(get_buffer, ASYNC, K_GET, R_BUFFER, 0, 1, "get_buffer(key) -> Buffer or None",               \
      {A_KEY, "key"})                                                                              \
    X(get_batch, ASYNC, K_GET, R_BYTES, M_BATCH, 1, "get_batch(keys) -> list of bytes",            \
      {A_KEY, "keys"})                                                                             \
    X(get_buffer_batch, ASYNC, K_GET, R_BUFFER, M_BATCH, 1,                                        \
      "get_buffer_batch(keys) -> list of Buffer or None", {A_KEY, "keys"})                         \
    X(get_into, ASYNC, K_GET_INTO, R_CODE, 0, 2,                                                   \
      "get_into(key, target, size=None) -> bytes read or a code", {A_KEY, "key"},                  \
      {A_TARGET, "target"}, {A_SIZE, "size"})                                                      \
    X(get_into_batch, ASYNC, K_GET_INTO, R_CODE, M_BATCH, 3,                                       \
      "get_into_batch(keys, targets, sizes) -> list", {A_KEY, "keys"}, {A_TARGET, "buffer_ptrs"},  \
      {A_SIZE, "sizes"})                                                                           \
    X(read_ranges, ASYNC, K_RANGE, R_CODE, M_BATCH | M_SAME_LEN, 4,                                \
      "read_ranges(keys, addrs, src_offsets, sizes) -> list", {A_KEY, "argument"},                 \
      {A_TARGET, "argument"}, {A_OFFSET, "argument"}, {A_SIZE, "argument"})                        \
    X(put, ASYNC, K_PUT, R_PUT, 0, 4, "put(key, value, opts, upsert) -> code", {A_KEY, "key"},     \
      {A_VALUE, "value"}, {A_OPTS, "opts"}, {A_UPSERT, "upsert"})                                  \
    X(put_parts, ASYNC, K_PUT, R_PUT, 0, 4, "put_parts(key, parts, opts, upsert) -> code",         \
      {A_KEY, "key"}, {A_PARTS, "parts"}, {A_OPTS, "opts"}, {A_UPSERT, "upsert"})                  \
    X(put_batch, ASYNC, K_PUT, R_PUT, M_BATCH, 4,                                                  \
      "put_batch(keys, values, opts, upsert) -> list of codes", {A_KEY, "keys"},                   \
      {A_VALUE, "values"}, {A_OPTS, "opts"}, {A_UPSERT, "upsert"})                                 \
    X(put_from, ASYNC, K_PUT, R_PUT, 0, 5, "put_from(key, ptr, size, opts, upsert) -> code",       \
      {A_KEY, "key"}, {A_TARGET, "ptr"}, {A_SIZE, "size"}, {A_OPTS, "opts"}, {A_UPSERT, "upsert"}) \
    X(put_from_batch, ASYNC, K_PUT, R_PUT, M_BATCH, 5,                                             \
      "put_from_batch(keys, ptrs, sizes, opts, upsert) -> list of codes", {A_KEY, "keys"},         \
      {A_TARGET, "buffer_ptrs"}, {A_SIZE, "sizes"}, {A_OPTS, "opts"}, {A_UPSERT, "upsert"})        \
    X(exist, ASYNC, K_STAT, R_EXIST, 0, 1, "exist(key) -> 1, 0 or a code", {A_KEY, "key"})         \
    X(exist_batch, ASYNC, K_STAT, R_EXIST, M_BATCH, 1, "exist_batch(keys) -> list",                \
      {A_KEY, "keys"})                                                                             \
    X(size, ASYNC, K_STAT, R_SIZE, 0, 1, "size(key) -> size or a code", {A_KEY, "key"})            \
    X(remove, ASYNC, K_REMOVE, R_CODE, 0, 1, "remove(key, force=False) -> code", {A_KEY, "key"},   \
      {A_FORCE, "force"})                                                                          \
    X(remove_batch, ASYNC, K_REMOVE, R_CODE, M_BATCH, 1,                                           \
      "remove_batch(keys, force=False) -> list of codes", {A_KEY, "keys"}, {A_FORCE, "force"})     \
    X(list, SYNC, K_LIST, R_LIST, 0, 3, "list(prefix, after, max) -> (keys, more) or a code",      \
      {A_PREFIX, "prefix"}, {A_AFTER, "after"}, {A_MAX, "max"})                                    \
    X(statfs, SYNC, K_STATFS, R_STATFS, 0, 0, "statfs() -> (total, used, objects) or a code",      \
      NO_ARGS)

/* ---- argument conversions ---- */

int mcpy_check_nargs(const char *name, Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi)
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
 * None]). The preferred segment is copied into *pref (PyMem, the caller's). */
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
            mcpy_op_fail(o, E_BADKEY);
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
    if (mc_key_check(k, (size_t)n) < 0)
        mcpy_op_fail(o, E_BADKEY);
    return 0;
}

/* Points the op at put_parts()'s parts (a list), exported into the group. */
static int op_set_parts(op_t *o, PyObject *parts)
{
    group_t *g = o->g;
    Py_ssize_t np = PyList_GET_SIZE(parts);
    g->parts = PyMem_Calloc((size_t)np + 1, sizeof(Py_buffer));
    g->iov = PyMem_Calloc((size_t)np + 1, sizeof(struct iovec));
    if (!g->parts || !g->iov) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < np; i++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(parts, i), &g->parts[i], PyBUF_C_CONTIGUOUS) < 0)
            return -1;
        g->nparts++;
        g->iov[i].iov_base = g->parts[i].buf;
        g->iov[i].iov_len = (size_t)g->parts[i].len;
    }
    o->iov = g->iov;
    o->iovcnt = (int)np;
    return 0;
}

/* Reads arg with the PyArg unit fmt ("y#": bytes-like, "z#": also str or
 * None) into *p and *len; *ref keeps arg alive as long as *p is used. */
static int get_bytes(PyObject *arg, const char *fmt, const char **p, size_t *len, PyObject **ref)
{
    Py_ssize_t n;
    if (!PyArg_Parse(arg, fmt, p, &n))
        return -1;
    *len = (size_t)n;
    *ref = Py_NewRef(arg);
    return 0;
}

/* ---- the call path ---- */

/* One call being converted. po is only initialized when has_po: no struct
 * wide clearing on the get/put path. */
typedef struct call {
    const method_t *m;
    PyObject *const *a;
    Py_ssize_t n;
    Py_ssize_t nargs;          /* the method's arguments, given or not */
    int batch;                 /* M_BATCH */
    PyObject *lists[MAX_ARGS]; /* batch: per-op arguments as lists (owned), else NULL */
    PyObject *parts;           /* A_PARTS as a list (owned), or NULL */
    size_t count;              /* ops */
    int mismatch;              /* the sequences differ in length */
    int has_po;                /* po was read (A_OPTS) */
    mc_put_opts_t po;
    char *pref;     /* po's preferred segment (PyMem), until the group takes it */
    unsigned flags; /* op flags (MC_REMOVE_FORCE) */
} call_t;

static int is_per_op(enum arg_kind k)
{
    return k == A_KEY || k == A_VALUE || k == A_TARGET || k == A_SIZE || k == A_OFFSET;
}

/* Argument i, or NULL when an optional one was not given. */
static PyObject *call_arg(const call_t *c, int i)
{
    return i < c->n ? c->a[i] : NULL;
}

/* Argument i for op j: the item of a converted sequence, or the argument. */
static PyObject *op_arg(const call_t *c, int i, size_t j)
{
    if (c->lists[i])
        return PyList_GET_ITEM(c->lists[i], (Py_ssize_t)j);
    return call_arg(c, i);
}

/* The whole-call pass: sequences to lists, options, flags, the op count. */
static int call_convert(call_t *c)
{
    const method_t *m = c->m;
    int batch = c->batch;
    for (int i = 0; i < c->nargs; i++) {
        const arg_spec_t *s = &m->args[i];
        PyObject *arg = call_arg(c, i);
        if (batch && is_per_op(s->kind)) {
            if (!(c->lists[i] = as_list(arg, s->name)))
                return -1;
        } else if (s->kind == A_PARTS) {
            if (!(c->parts = as_list(arg, s->name)))
                return -1;
        } else if (s->kind == A_VALUE && PyLong_Check(arg)) {
            PyErr_SetString(PyExc_TypeError, "value must be a bytes-like object");
            return -1;
        } else if (s->kind == A_OPTS) {
            c->has_po = 1;
            if (parse_put_opts(arg, call_arg(c, i + 1), &c->po, &c->pref) < 0)
                return -1;
        } else if (s->kind == A_FORCE && arg) {
            int force = PyObject_IsTrue(arg);
            if (force < 0)
                return -1;
            c->flags = force ? MC_REMOVE_FORCE : 0;
        }
    }
    c->count = batch ? (size_t)PyList_GET_SIZE(c->lists[0]) : 1;
    for (int i = 1; batch && i < c->nargs; i++)
        if (c->lists[i] && (size_t)PyList_GET_SIZE(c->lists[i]) != c->count)
            c->mismatch = 1;
    if (c->mismatch && (m->flags & M_SAME_LEN)) {
        PyErr_Format(PyExc_ValueError, "%s: lists differ in length", m->name);
        return -1;
    }
    return 0;
}

/* Fills op j from its arguments, in this order whatever their positions:
 * key (or list's prefix, after, max), value or parts, offset, memory (target
 * and size). Returns -1 with an exception for a wrong type; a bad key,
 * address or size only fails the op. */
static int op_fill(const call_t *c, op_t *o, size_t j)
{
    const method_t *m = c->m;
    const signed char *at = m->at;
    o->kind = m->kind;
    o->flags = c->flags;
    o->started = 1;
    if (at[A_KEY] >= 0) {
        if (op_set_key(o, op_arg(c, at[A_KEY], j)) < 0)
            return -1;
        if (c->mismatch) {
            mcpy_op_fail(o, EINVAL);
            return 0;
        }
    }
    if (at[A_PREFIX] >= 0) {
        if (get_bytes(op_arg(c, at[A_PREFIX], j), "y#", &o->key, &o->klen, &o->keyobj) < 0 ||
            get_bytes(op_arg(c, at[A_AFTER], j), "z#", &o->after, &o->alen, &o->afterobj) < 0 ||
            !PyArg_Parse(op_arg(c, at[A_MAX], j), "n", &o->max))
            return -1;
    }
    if (at[A_VALUE] >= 0) {
        PyObject *v = op_arg(c, at[A_VALUE], j);
        if (PyLong_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "values must be bytes-like objects");
            return -1;
        }
        if (mcpy_op_set_memory(o, v, Py_None, 0) < 0)
            return -1;
    }
    if (at[A_PARTS] >= 0 && op_set_parts(o, c->parts) < 0)
        return -1;
    if (at[A_OFFSET] >= 0) {
        size_t off;
        if (mcpy_py_to_size(op_arg(c, at[A_OFFSET], j), &off) < 0)
            return -1;
        o->off = off;
    }
    if (at[A_TARGET] >= 0) {
        PyObject *size = op_arg(c, at[A_SIZE], j);
        if (mcpy_op_set_memory(o, op_arg(c, at[A_TARGET], j), size ? size : Py_None,
                               m->kind != K_PUT) < 0)
            return -1;
    }
    mcpy_op_prepare(o);
    return 0;
}

/* Runs method m with arguments a[0..n): sync when comp is NULL, else
 * async with comp's event loop. */
static PyObject *method_call(const method_t *m, PyObject *self, PyObject *const *a, Py_ssize_t n,
                             CompleterObject *comp)
{
    call_t c;
    c.m = m;
    c.a = a;
    c.n = n;
    c.nargs = m->nargs;
    if (mcpy_check_nargs(m->name, n, m->nmin, c.nargs) < 0)
        return NULL;
    c.batch = (m->flags & M_BATCH) != 0;
    for (int i = 0; i < MAX_ARGS; i++)
        c.lists[i] = NULL;
    c.parts = NULL;
    c.mismatch = c.has_po = 0;
    c.pref = NULL;
    c.flags = 0;
    group_t *g = NULL;
    PyObject *res = NULL;
    if (call_convert(&c) < 0)
        goto out;
    g = mcpy_group_new((StoreObject *)self, c.count, m->rk, c.batch);
    if (!g)
        goto out;
    if (c.has_po)
        g->po = c.po;
    g->pref = c.pref;
    c.pref = NULL;
    for (size_t j = 0; j < c.count; j++)
        if (op_fill(&c, &g->ops[j], j) < 0)
            goto out;
    res = mcpy_group_run(g, comp);
    g = NULL;
out:
    if (g)
        mcpy_group_free(g);
    PyMem_Free(c.pref);
    for (int i = 0; c.batch && i < c.nargs; i++)
        Py_XDECREF(c.lists[i]); /* lists are only made for a batch */
    Py_XDECREF(c.parts);
    return res;
}

/* The async twin's entry: the Completer of the running loop comes first. */
static PyObject *method_call_async(const method_t *m, PyObject *self, PyObject *const *a,
                                   Py_ssize_t n)
{
    if (n < 1 || !PyObject_TypeCheck(a[0], &mcpy_CompleterType)) {
        PyErr_Format(PyExc_TypeError, "%s_async() needs a Completer first", m->name);
        return NULL;
    }
    return method_call(m, self, a + 1, n - 1, (CompleterObject *)a[0]);
}

/* ---- the table made into methods ---- */

/* Each line of the table: its descriptor and entry points (ASYNC: also
 * name_async). */
#define DEFINE_METHOD(name, mode, kind, rk, flags, nmin, doc, ...)                                 \
    static method_t desc_##name = {#name, kind, rk, flags, nmin, {__VA_ARGS__}, 0, {0}};           \
    static PyObject *m_##name(PyObject *self, PyObject *const *a, Py_ssize_t n)                    \
    {                                                                                              \
        return method_call(&desc_##name, self, a, n, NULL);                                        \
    }                                                                                              \
    DEFINE_ASYNC_##mode(name)
#define DEFINE_ASYNC_SYNC(name)
#define DEFINE_ASYNC_ASYNC(name)                                                                   \
    static PyObject *m_##name##_async(PyObject *self, PyObject *const *a, Py_ssize_t n)            \
    {                                                                                              \
        return method_call_async(&desc_##name, self, a, n);                                        \
    }
MCPY_METHODS(DEFINE_METHOD)

#define FASTCALL(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL
#define METHOD_DEF_SYNC(name, doc) {#name, FASTCALL(m_##name), doc},
#define METHOD_DEF_ASYNC(name, doc)                                                                \
    METHOD_DEF_SYNC(name, doc){#name "_async", FASTCALL(m_##name##_async), ASYNC_DOC},
#define METHOD_DEF(name, mode, kind, rk, flags, nmin, doc, ...) METHOD_DEF_##mode(name, doc)

#define METHOD_PTR(name, mode, kind, rk, flags, nmin, doc, ...) &desc_##name,
static method_t *const methods[] = {MCPY_METHODS(METHOD_PTR)};

void mcpy_methods_init(void)
{
    for (size_t k = 0; k < sizeof(methods) / sizeof(methods[0]); k++) {
        method_t *m = methods[k];
        memset(m->at, -1, sizeof(m->at));
        for (m->nargs = 0; m->nargs < MAX_ARGS && m->args[m->nargs].kind != A_END; m->nargs++)
            m->at[m->args[m->nargs].kind] = (signed char)m->nargs;
    }
}

/* MCPY_METHODS() expands to entries, which clang-format cannot see. */
// clang-format off
PyMethodDef mcpy_store_methods[] = {
    MCPY_METHODS(METHOD_DEF)
    {"register", FASTCALL(mcpy_store_register), "register(target, size=None) -> code"},
    {"unregister", mcpy_store_unregister, METH_O, "unregister(ptr) -> code"},
    {"close", mcpy_store_m_close, METH_NOARGS, "close() -> 0; waits for ops in flight"},
    {"wait_idle", mcpy_store_m_wait_idle, METH_NOARGS, "wait_idle(): wait for ops in flight"},
    {"is_open", mcpy_store_m_is_open, METH_NOARGS, "is_open() -> bool"},
    {"inflight", mcpy_store_m_inflight, METH_NOARGS, "inflight() -> groups in flight on the C side"},
    {"xattr_get", mcpy_store_xattr_get, METH_VARARGS, "xattr_get(key, name) -> bytes or -errno"},
    {"xattr_set", mcpy_store_xattr_set, METH_VARARGS, "xattr_set(key, name, value, flags) -> 0 or -errno"},
    {"rename", mcpy_store_rename, METH_VARARGS, "rename(src, dst, flags) -> 0 or -errno"},
    {"master_stats", mcpy_store_master_stats, METH_NOARGS, "master_stats() -> dict or -errno"},
    {"registered", mcpy_store_registered, METH_VARARGS, "registered(ptr, size) -> bool"},
    {"replicas", mcpy_store_replicas, METH_VARARGS, "replicas(key) -> (size, version, list) or -errno"},
    {"task_create", mcpy_store_task_create, METH_VARARGS,
     "task_create(key, [targets]) or (key, target, source) -> task id or -errno"},
    {"task_query", mcpy_store_task_query, METH_VARARGS, "task_query(id) -> tuple or -errno"},
    {"replica_drop", mcpy_store_replica_drop, METH_VARARGS,
     "replica_drop(key, data address) -> 0 or -errno"},
    {"serve_metrics", mcpy_store_serve_metrics, METH_VARARGS, "serve_metrics(addr) -> port or -errno"},
    {"served_addr", mcpy_store_served_addr, METH_NOARGS, "served_addr() -> address or ''"},
    {"pin", mcpy_store_pin, METH_VARARGS, "pin(key) -> (id, size) or -errno"},
    {"pin_read", mcpy_store_pin_read, METH_VARARGS, "pin_read(id, off, ptr, size) -> n or -errno"},
    {"unpin", mcpy_store_unpin, METH_VARARGS, "unpin(id) -> 0 or -errno"},
    {NULL, NULL, 0, NULL},
};
// clang-format on
