/*
 * _store_files.c - whole files read for the mount backend (mooncake/_mount.py):
 *
 *   read_file(path, flags)  one file on the caller's thread, the GIL released
 *                           once or twice (the backend's get());
 *   FileReader(loop)        its async_get(): files read on C threads of the
 *                           reader's own, which never take the GIL, and the
 *                           futures of one asyncio event loop resolved from
 *                           an eventfd that loop watches, as Completer does
 *                           for the direct backend. A Python thread per call
 *                           would hand the GIL back and forth with the loop
 *                           for every get; at 1 KiB that, not the mount, was
 *                           most of a get's time.
 *
 * Both read a file in the same two rounds (fjob_run()): the first opens and
 * measures it, and reads one of up to 64 KiB into a scratch buffer (a bytes
 * object needs the GIL to be made); a larger one is given a bytes object of
 * its size (with the GIL: by the caller, or by the loop) and the second
 * round reads it straight into that.
 */
#include "_store_i.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

/* Files up to this size are read into a scratch buffer, then copied. */
#define READ_FILE_SMALL (64 * 1024)
/* A FileReader's threads: calls of one loop in flight at once. */
#define READER_THREADS 4

/* Reads the rest of fd into buf[0..cap): bytes read, or -errno. */
static ssize_t read_all(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n < cap) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        n += (size_t)r;
    }
    return (ssize_t)n;
}

/* ---- FileReader ---- */

/* One get: on the reader's queue for its threads (todo), then on its queue
 * for the loop (done); a large file goes round twice. */
typedef struct fjob {
    struct fjob *next;
    PyObject *fut;   /* strong; touched on the loop thread only */
    PyObject *bytes; /* a large file's result, being read into (strong; loop thread) */
    char *path;      /* malloc'ed */
    int flags;
    int fd;       /* a large file, open between its two rounds; else -1 */
    size_t size;  /* its size as fstat said */
    char *buf;    /* a small file's bytes, or what a large one held past size + 1 */
    size_t cap;   /* buf's size */
    ssize_t n;    /* bytes in buf (or in bytes), or -errno */
    ssize_t more; /* a large file: bytes in buf past bytes' (it grew meanwhile) */
} fjob_t;

typedef struct {
    PyObject ob_base;
    int efd; /* readable when done is not empty */
    pid_t pid;
    pthread_mutex_t mu; /* guards the queues and stopping */
    pthread_cond_t cv;  /* todo not empty, or stopping */
    fjob_t *todo, *todo_tail, *done, *done_tail;
    int stopping, nthreads;
    pthread_t threads[READER_THREADS];
    PyObject *create_future; /* the loop's create_future */
} FileReaderObject;

static void fjob_free(fjob_t *j)
{
    if (j->fd >= 0)
        close(j->fd);
    Py_XDECREF(j->fut);
    Py_XDECREF(j->bytes);
    free(j->path);
    free(j->buf);
    free(j);
}

/* Appends j to the queue head..tail (its lock held). */
static void fjob_append(fjob_t **head, fjob_t **tail, fjob_t *j)
{
    j->next = NULL;
    if (*tail)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
}

/* Reads on from fd into j->buf (from j->buf[have], growing it) to the end:
 * the bytes it holds, or -errno. */
static ssize_t read_rest(fjob_t *j, int fd, size_t have)
{
    for (;;) {
        if (have == j->cap) {
            size_t cap = j->cap ? j->cap * 2 : 65536;
            char *nb = realloc(j->buf, cap);
            if (!nb)
                return -ENOMEM;
            j->buf = nb;
            j->cap = cap;
        }
        ssize_t r = read_all(fd, j->buf + have, j->cap - have);
        if (r < 0)
            return r;
        have += (size_t)r;
        if (have < j->cap)
            return (ssize_t)have;
    }
}

/* What a worker does for j, without the GIL. */
static void fjob_run(fjob_t *j)
{
    if (j->bytes) { /* a large file's second round: into the bytes object */
        j->n = read_all(j->fd, PyBytes_AS_STRING(j->bytes), j->size + 1);
        if (j->n > (ssize_t)j->size) /* it grew: the rest into buf */
            j->more = read_rest(j, j->fd, 0);
        close(j->fd);
        j->fd = -1;
        return;
    }
    struct stat st;
    int fd = open(j->path, j->flags);
    if (fd < 0 || fstat(fd, &st) < 0) {
        j->n = -errno;
        if (fd >= 0)
            close(fd);
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        j->n = -EISDIR;
        close(fd);
        return;
    }
    j->size = (size_t)st.st_size;
    if (st.st_size >= READ_FILE_SMALL) {
        j->fd = fd; /* the loop gives it a bytes object */
        return;
    }
    j->cap = j->size + 1;
    j->buf = malloc(j->cap);
    j->n = j->buf ? read_rest(j, fd, 0) : -ENOMEM;
    close(fd);
}

static void *reader_thread(void *arg)
{
    FileReaderObject *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->todo && !r->stopping)
            pthread_cond_wait(&r->cv, &r->mu);
        fjob_t *j = r->todo;
        if (!j)
            break; /* stopping, and every queued get done */
        r->todo = j->next;
        if (!r->todo)
            r->todo_tail = NULL;
        pthread_mutex_unlock(&r->mu);
        fjob_run(j);
        pthread_mutex_lock(&r->mu);
        if (!r->done)
            mcpy_efd_wake(r->efd);
        fjob_append(&r->done, &r->done_tail, j);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Queues j for the threads (r->mu not held). */
static void todo_push(FileReaderObject *r, fjob_t *j)
{
    pthread_mutex_lock(&r->mu);
    fjob_append(&r->todo, &r->todo_tail, j);
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* j's result: the file's bytes, or -errno (an int) when it could not be
 * read; NULL with an exception (no memory). */
static PyObject *fjob_value(fjob_t *j)
{
    if (j->n < 0 || (j->bytes && j->more < 0))
        return PyLong_FromLong(j->n < 0 ? (long)j->n : (long)j->more);
    if (!j->bytes)
        return PyBytes_FromStringAndSize(j->buf, j->n);
    PyObject *b = j->bytes;
    j->bytes = NULL;
    if (j->n <= (ssize_t)j->size) {
        if (_PyBytes_Resize(&b, j->n) < 0)
            return NULL;
        return b;
    }
    PyObject *tail = PyBytes_FromStringAndSize(j->buf, j->more);
    if (tail)
        PyBytes_ConcatAndDel(&b, tail);
    else
        Py_CLEAR(b);
    return b;
}

/* After the first round (with the GIL): gives a measured large file its
 * bytes object; 0, or -1 with an exception (no memory). */
static int fjob_give_bytes(fjob_t *j)
{
    j->bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)j->size + 1);
    return j->bytes ? 0 : -1;
}

/* A measured large file, waiting for its bytes object. */
static int fjob_measured(const fjob_t *j)
{
    return j->fd >= 0 && !j->bytes;
}

/*
 * read_file(path, flags) -> bytes, or -errno: the whole of a regular file,
 * opened with flags (the mount backend's get()), in a FileReader's two
 * rounds on the caller's thread: the GIL is released once for a file of up
 * to 64 KiB, twice for a larger one, where each os call of Python would
 * release and take it again (futex hand-offs between threads). -EISDIR for
 * anything but a regular file.
 */
PyObject *mcpy_read_file(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *path;
    int flags;
    if (!PyArg_ParseTuple(args, "O&i", PyUnicode_FSConverter, &path, &flags))
        return NULL;
    fjob_t j = {.path = PyBytes_AS_STRING(path), .flags = flags, .fd = -1};
    Py_BEGIN_ALLOW_THREADS;
    fjob_run(&j);
    Py_END_ALLOW_THREADS;
    PyObject *v = NULL;
    if (!fjob_measured(&j) || fjob_give_bytes(&j) == 0) {
        if (j.bytes) {
            Py_BEGIN_ALLOW_THREADS;
            fjob_run(&j);
            Py_END_ALLOW_THREADS;
        }
        v = fjob_value(&j);
    }
    if (j.fd >= 0)
        close(j.fd);
    Py_XDECREF(j.bytes);
    free(j.buf);
    Py_DECREF(path);
    return v;
}

/* Takes every finished get off r; resolves its future when resolve is set
 * (a large file measured is given its bytes object and queued again, or
 * read into it here once the threads are stopped). Returns how many were
 * taken. */
static long reader_empty(FileReaderObject *r, int resolve_them)
{
    mcpy_efd_clear(r->efd);
    pthread_mutex_lock(&r->mu);
    fjob_t *j = r->done;
    r->done = r->done_tail = NULL;
    pthread_mutex_unlock(&r->mu);
    long n = 0;
    for (fjob_t *next; j; j = next) {
        next = j->next;
        n++;
        if (!resolve_them || mcpy_future_cancelled(j->fut)) {
            fjob_free(j);
            continue;
        }
        if (fjob_measured(j) && fjob_give_bytes(j) == 0) { /* then read on */
            if (!r->stopping) {
                todo_push(r, j);
                continue;
            }
            Py_BEGIN_ALLOW_THREADS;
            fjob_run(j);
            Py_END_ALLOW_THREADS;
        }
        /* its bytes, b"" when it could not be read (as get()), or MemoryError */
        PyObject *v = fjob_measured(j) ? NULL : fjob_value(j);
        if (v && PyLong_Check(v))
            Py_SETREF(v, PyBytes_FromStringAndSize("", 0));
        mcpy_future_resolve(j->fut, v);
        fjob_free(j);
    }
    return n;
}

/* get(path, flags) -> a future of the whole file's bytes (b"" when it
 * cannot be read, as the mount backend's get()), read by the threads. */
static PyObject *FileReader_get(PyObject *op, PyObject *args)
{
    FileReaderObject *r = (FileReaderObject *)op;
    PyObject *path;
    int flags;
    if (!PyArg_ParseTuple(args, "O&i", PyUnicode_FSConverter, &path, &flags))
        return NULL;
    if (r->efd < 0 || r->stopping || r->pid != getpid()) {
        Py_DECREF(path);
        PyErr_SetString(PyExc_RuntimeError, "the FileReader is closed (or its process's parent's)");
        return NULL;
    }
    fjob_t *j = calloc(1, sizeof(*j));
    char *p = j ? strdup(PyBytes_AS_STRING(path)) : NULL;
    Py_DECREF(path);
    if (!p) {
        free(j);
        return PyErr_NoMemory();
    }
    PyObject *fut = PyObject_CallNoArgs(r->create_future);
    if (!fut) {
        free(p);
        free(j);
        return NULL;
    }
    j->path = p;
    j->flags = flags;
    j->fd = -1;
    j->fut = Py_NewRef(fut);
    todo_push(r, j);
    return fut;
}

/* drain(): resolves the futures of every finished get. The loop's reader
 * callback for fileno(). */
static PyObject *FileReader_drain(PyObject *op, PyObject *unused)
{
    (void)unused;
    FileReaderObject *r = (FileReaderObject *)op;
    if (r->efd < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(reader_empty(r, 1));
}

static PyObject *FileReader_fileno(PyObject *op, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(((FileReaderObject *)op)->efd);
}

/* Stops the threads once the gets queued have run, and resolves their
 * futures (resolve set) or drops them. */
static void reader_stop(FileReaderObject *r, int resolve_them)
{
    if (r->pid != getpid()) { /* a forked child's copy: the threads are not here */
        r->nthreads = 0;
        return;
    }
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    Py_BEGIN_ALLOW_THREADS;
    for (int i = 0; i < r->nthreads; i++)
        pthread_join(r->threads[i], NULL);
    Py_END_ALLOW_THREADS;
    r->nthreads = 0;
    if (r->efd >= 0)
        reader_empty(r, resolve_them);
}

/* close(resolve=True): stops the threads once the gets queued have run,
 * resolves their futures (on the loop's thread; resolve False drops them:
 * their loop is gone) and closes the eventfd; remove it from the loop
 * first. */
static PyObject *FileReader_close(PyObject *op, PyObject *args)
{
    FileReaderObject *r = (FileReaderObject *)op;
    int resolve_them = 1;
    if (!PyArg_ParseTuple(args, "|p", &resolve_them))
        return NULL;
    reader_stop(r, resolve_them);
    if (r->efd >= 0) {
        close(r->efd);
        r->efd = -1;
    }
    Py_RETURN_NONE;
}

static int FileReader_init(PyObject *op, PyObject *args, PyObject *kw)
{
    FileReaderObject *r = (FileReaderObject *)op;
    static char *kwlist[] = {"loop", NULL};
    PyObject *loop;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O", kwlist, &loop))
        return -1;
    if (r->efd >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "FileReader.__init__ called twice");
        return -1;
    }
    PyObject *cf = PyObject_GetAttrString(loop, "create_future");
    if (!cf)
        return -1;
    Py_XSETREF(r->create_future, cf);
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    r->pid = getpid();
    for (; r->nthreads < READER_THREADS; r->nthreads++) {
        int rc = pthread_create(&r->threads[r->nthreads], NULL, reader_thread, r);
        if (rc) {
            reader_stop(r, 0);
            close(r->efd);
            r->efd = -1;
            errno = rc;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
    }
    return 0;
}

static PyObject *FileReader_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    FileReaderObject *r = (FileReaderObject *)type->tp_alloc(type, 0);
    if (!r)
        return NULL;
    r->efd = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    return (PyObject *)r;
}

static void FileReader_dealloc(PyObject *op)
{
    FileReaderObject *r = (FileReaderObject *)op;
    /* Queued gets hold a future, not the reader: they may still be queued
     * here if close() was never called. */
    reader_stop(r, 0);
    if (r->efd >= 0)
        close(r->efd);
    Py_XDECREF(r->create_future);
    if (r->pid == getpid()) {
        /* Not in a child of fork(): there, the parent's threads that waited
         * on cv at the fork never wake, and destroying cv would wait for
         * them forever. */
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
    Py_TYPE(op)->tp_free(op);
}

static PyMethodDef FileReader_methods[] = {
    {"get", FileReader_get, METH_VARARGS, "get(path, flags) -> future of the file's bytes"},
    {"drain", FileReader_drain, METH_NOARGS, "drain() -> gets resolved"},
    {"fileno", FileReader_fileno, METH_NOARGS, "fileno() -> the eventfd"},
    {"close", FileReader_close, METH_VARARGS,
     "close(resolve=True): finish the gets queued, stop the threads, close the eventfd"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject mcpy_FileReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._store.FileReader",
    .tp_basicsize = sizeof(FileReaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "FileReader(loop): whole files read on threads of its own, the futures "
              "of one event loop resolved from an eventfd.",
    .tp_new = FileReader_new,
    .tp_init = FileReader_init,
    .tp_dealloc = FileReader_dealloc,
    .tp_methods = FileReader_methods,
};
