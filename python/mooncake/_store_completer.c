/*
 * _store_completer.c - async completion. A Completer belongs to one asyncio
 * event loop: groups completed on the loop thread are queued on it and its
 * eventfd is written; the event loop watches the eventfd
 * (loop.add_reader(fileno(), drain)) and drain() builds the Python results
 * and resolves the futures. No thread per call.
 */
#include "_store_i.h"

#include <sys/eventfd.h>
#include <unistd.h>

static PyObject *str_cancelled, *str_set_result, *str_set_exception;

int mcpy_completer_init(void)
{
    str_cancelled = PyUnicode_InternFromString("cancelled");
    str_set_result = PyUnicode_InternFromString("set_result");
    str_set_exception = PyUnicode_InternFromString("set_exception");
    return str_cancelled && str_set_result && str_set_exception ? 0 : -1;
}

/* Groups that completed on a Completer closed meanwhile (its event loop
 * ended first): nobody drains them, so they wait here, and the next
 * mcpy_orphans_free() (with the GIL) frees them and what they hold. */
static pthread_mutex_t orphans_mu = PTHREAD_MUTEX_INITIALIZER;
static group_t *orphans;
static int orphans_any; /* atomic: a drain looks at it without the lock */

void mcpy_completer_push(CompleterObject *c, group_t *g)
{
    pthread_mutex_lock(&c->mu);
    if (c->fd < 0) { /* closed: its loop is gone */
        pthread_mutex_unlock(&c->mu);
        pthread_mutex_lock(&orphans_mu);
        g->qnext = orphans;
        orphans = g;
        __atomic_store_n(&orphans_any, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&orphans_mu);
        return;
    }
    int was_empty = c->head == NULL;
    g->qnext = NULL;
    if (c->tail)
        c->tail->qnext = g;
    else
        c->head = g;
    c->tail = g;
    if (was_empty)
        mcpy_efd_wake(c->fd); /* under mu: close() takes the fd under it */
    pthread_mutex_unlock(&c->mu);
}

void mcpy_orphans_free(void)
{
    if (!__atomic_load_n(&orphans_any, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&orphans_mu);
    group_t *g = orphans;
    orphans = NULL;
    __atomic_store_n(&orphans_any, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&orphans_mu);
    for (group_t *next; g; g = next) {
        next = g->qnext;
        mcpy_group_free(g);
    }
}

void mcpy_efd_wake(int fd)
{
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof(one));
    (void)w; /* a non-blocking eventfd write cannot fail here */
}

void mcpy_efd_clear(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof(v));
    (void)r; /* EAGAIN when a previous drain already took everything */
}

/* A future that is already done with res (stolen). */
PyObject *mcpy_done_future(CompleterObject *c, PyObject *res)
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

/* Takes every queued group off c's queue. */
static group_t *completer_take(CompleterObject *c)
{
    if (c->fd >= 0)
        mcpy_efd_clear(c->fd);
    pthread_mutex_lock(&c->mu);
    group_t *g = c->head;
    c->head = c->tail = NULL;
    pthread_mutex_unlock(&c->mu);
    return g;
}

int mcpy_future_cancelled(PyObject *fut)
{
    PyObject *cancelled = PyObject_CallMethodNoArgs(fut, str_cancelled);
    int skip = cancelled ? PyObject_IsTrue(cancelled) : 1;
    Py_XDECREF(cancelled);
    PyErr_Clear();
    return skip != 0;
}

void mcpy_future_resolve(PyObject *fut, PyObject *res)
{
    PyObject *x;
    if (res) {
        x = PyObject_CallMethodOneArg(fut, str_set_result, res);
        Py_DECREF(res);
    } else {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        x = PyObject_CallMethodOneArg(fut, str_set_exception, ev ? ev : Py_None);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
    }
    Py_XDECREF(x);
    PyErr_Clear();
}

/* Takes every queued group off c and frees it, resolving its future first
 * when resolve is set (a large get() not finished yet is started again and
 * comes back through the queue). Returns how many were taken. */
static long completer_empty(CompleterObject *c, int resolve)
{
    group_t *g = completer_take(c);
    long n = 0;
    for (group_t *next; g; g = next) {
        next = g->qnext;
        n++;
        if (resolve && !mcpy_future_cancelled(g->fut)) {
            if (mcpy_group_feed(g)) {
                mcpy_group_start(g);
                continue;
            }
            mcpy_future_resolve(g->fut, mcpy_group_result(g));
        }
        mcpy_group_free(g);
    }
    return n;
}

/* drain(): resolves the futures of every completed group. Runs on the event
 * loop (it is the loop's reader callback for fileno()). */
static PyObject *Completer_drain(PyObject *op, PyObject *unused)
{
    (void)unused;
    CompleterObject *c = (CompleterObject *)op;
    mcpy_orphans_free(); /* another loop's, ended: freed on the way */
    if (c->fd < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(completer_empty(c, 1));
}

/* discard(): frees queued groups without resolving their futures (their loop
 * is gone). */
static PyObject *Completer_discard(PyObject *op, PyObject *unused)
{
    (void)unused;
    CompleterObject *c = (CompleterObject *)op;
    completer_empty(c, 0);
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
        /* Groups that complete from now on are orphans (push() looks at fd
         * under mu, and writes it under mu). */
        pthread_mutex_lock(&c->mu);
        int fd = c->fd;
        c->fd = -1;
        pthread_mutex_unlock(&c->mu);
        Completer_discard(op, NULL); /* those queued: their loop is gone */
        close(fd);
    }
    mcpy_orphans_free();
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

PyTypeObject mcpy_CompleterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._store.Completer",
    .tp_basicsize = sizeof(CompleterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Completer(loop): resolves the futures of one event loop from an eventfd.",
    .tp_new = Completer_new,
    .tp_init = Completer_init,
    .tp_dealloc = Completer_dealloc,
    .tp_methods = Completer_methods,
};
