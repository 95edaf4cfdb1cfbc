/*
 * _store_i.h - what the files of the mooncake._store extension share: the
 * Python objects (Store, Completer, Buffer), a request in flight (a group of
 * ops), and the functions one file offers the others.
 *
 * The extension's files:
 *   _store.c           the module and the Store object's lifecycle
 *   _store_methods.c   the method table and the generic call path
 *   _store_group.c     groups and ops: the library calls, their chaining on the
 *                      loop thread, and how results become Python values
 *   _store_buffers.c   registered buffers, caller memory, the Buffer type
 *   _store_completer.c async completion: the Completer and its eventfd
 *   _store_meta.c      extended attributes, rename, the master's counters
 *   _store_pins.c      pinned versions (the get sessions)
 *   _store_files.c     the mount backend's whole-file reads: read_file() and
 *                      the FileReader (its async get on threads of its own)
 *
 * Non-static names carry the prefix mcpy_: the extension links libmooncake.a
 * statically, whose internal names use mc__.
 */
#ifndef MOONCAKE_PY_STORE_I_H
#define MOONCAKE_PY_STORE_I_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/uio.h>

#include "mooncake/metrics.h"
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

/* First read of a whole-object get; a larger object is then opened (on the
 * loop thread, chained) and copied by the caller's thread straight from
 * where its bytes lie in this process (views), or read into the result. */
#define GET_FIRST_READ 8192
/* Pieces of views one get collects at most; more are read instead. */
#define GET_MAX_VIEWS 4096
/* Copies at least this large release the GIL. */
#define COPY_NOGIL 65536
/* An async group copying at least this much shares it with the loop thread. */
#define COPY_SHARE (256 * 1024)
/* Largest single library read (mc_get takes at most INT32_MAX bytes). */
#define READ_CHUNK (1U << 30)
/* A get restarts when the key is replaced between its reads; give up after. */
#define GET_MAX_TRIES 16

/* ---- objects ---- */

typedef struct group group_t;
typedef struct CompleterObject CompleterObject;

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
    /* Ops the library runs with this memory now (started, not finished on
     * the C side): unregister() waits for them. Any thread. */
    atomic_long busy;
    struct StoreObject *owner;
    struct region *next;
} region_t;

typedef struct StoreObject {
    PyObject ob_base;
    mc_store_t *s;        /* NULL once closed; see mcpy_store_close() */
    int closing;          /* guarded by the GIL */
    atomic_long inflight; /* groups (and blocking calls) not completed on the C side */
    pthread_mutex_t mu;   /* with cv: close() waits for inflight == 0 */
    pthread_cond_t cv;
    region_t *regions; /* live registered buffers; guarded by the GIL */
    mc_metrics_server_t *metrics; /* serve_metrics()'s server, or NULL; GIL */
    struct pin *pins;             /* pinned versions (_store_pins.c); GIL */
    uint64_t next_pin;            /* the last pin id given; GIL */
    pid_t pid;                    /* the process that opened s (a forked child's copy is dead) */
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

extern PyTypeObject mcpy_StoreType, mcpy_CompleterType, mcpy_BufferType, mcpy_FileReaderType;

/* ---- requests: groups of ops ---- */

/* Which library call an op makes. */
enum op_kind {
    K_GET,      /* mc_get_async: the whole object, in one or more reads */
    K_GET_INTO, /* mc_stat_async, then mc_get_async into the caller's memory */
    K_RANGE,    /* mc_get_async of one range into the caller's memory */
    K_PUT,      /* mc_putv_async */
    K_STAT,     /* mc_stat_async */
    K_REMOVE,   /* mc_remove_async */
    K_LIST,     /* mc_list_async */
    K_STATFS,   /* mc_statfs_async */
};

/* How an op's result becomes a Python object. */
enum result_kind {
    R_BYTES,  /* bytes, b"" on any failure */
    R_BUFFER, /* Buffer, None on any failure */
    R_CODE,   /* int: the result or a code */
    R_PUT,    /* int: 0, a code; an existing key counts as success */
    R_EXIST,  /* int: 1, 0 or a code */
    R_SIZE,   /* int: the size or a code */
    R_LIST,   /* (list of bytes keys, more) or a code */
    R_STATFS, /* (total, used, objects) or a code */
};

typedef struct op {
    group_t *g;
    enum op_kind kind;
    int started; /* 0: failed before submission with `result` */
    int issue;   /* group_submit() starts it */
    int need;    /* K_GET: the version is open, its len bytes need a destination
                    (then phase GET_READ reads them into it) */
    int result;  /* bytes, 0, or -errno */
    int phase;
    int tries;
    PyObject *keyobj; /* strong reference; key points into it (K_LIST: the prefix) */
    const char *key;
    size_t klen;
    char *buf;       /* K_GET: malloc'ed, owned; others: the caller's memory */
    char *dst;       /* K_GET: where reads after the first go (buf, or bytes' storage) */
    PyObject *bytes; /* K_GET for R_BYTES: the result, read into in place */
    mc_obj_t *obj;   /* K_GET past the first read: the open version, or NULL;
                        closed with the GIL by the caller's thread */
    struct iovec *views; /* K_GET: obj's bytes in this process's memory, in order
                            (malloc'ed, owned), or NULL */
    int nviews;
    int copied;   /* K_GET: views copied but for [split, len), which the loop
                     thread copies (async) */
    size_t split; /* K_GET: the caller's thread copies [0, split) */
    size_t cap;      /* bytes the caller's buffer holds */
    size_t len;      /* bytes of the object being read */
    uint64_t off;    /* next read offset (K_RANGE: the source offset) */
    uint64_t version;
    mc_stat_t st;
    unsigned flags;   /* K_REMOVE: MC_REMOVE_* */
    region_t *region; /* registered buffer in use, or NULL */
    Py_buffer view;   /* value or target exported by an object */
    int has_view;
    union {
        struct {               /* K_PUT */
            struct iovec one;  /* a single part */
            struct iovec *iov; /* the parts (&one, or owned by the group) */
            int iovcnt;
        };
        struct {                /* K_LIST */
            PyObject *afterobj; /* strong reference; after points into it */
            const char *after;  /* list keys after this one (NULL: from the start) */
            size_t alen;
            Py_ssize_t max;  /* at most this many (<= 0: the library's default) */
            mc_list_t *list; /* the result, owned */
        };
        mc_space_t sp; /* K_STATFS */
    };
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

/* ---- _store.c ---- */

/* mcpy_to_code() turns a library result (>= 0, or -errno) into Mooncake's
 * code (a result >= 0 is returned as it is). */
long mcpy_to_code(int r);

/* mcpy_store_leave() ends what atomic_fetch_add(&self->inflight, 1) began
 * and wakes close() and wait_idle() when nothing is left in flight. Any
 * thread; the GIL need not be held. */
void mcpy_store_leave(StoreObject *self);

/* ---- _store_group.c ---- */

/* mcpy_group_new() allocates a group of n ops for store self with result
 * kind rk (a list of results when is_list). Returns NULL with MemoryError
 * set. The group holds a reference to self; free it with mcpy_group_free()
 * or hand it to mcpy_group_run(). */
group_t *mcpy_group_new(StoreObject *self, size_t n, enum result_kind rk, int is_list);

/* mcpy_group_free() releases everything g holds (keys, buffers, regions,
 * the future). With the GIL, after g completed or before it was run. */
void mcpy_group_free(group_t *g);

/* mcpy_op_fail() marks an op failed with -err before submission. */
void mcpy_op_fail(op_t *o, int err);

/* mcpy_op_prepare() does what an op's kind needs once its arguments are
 * set: the first read buffer of a get, the single part of a put, the range
 * bound of a ranged read. */
void mcpy_op_prepare(op_t *o);

/* mcpy_group_run() runs a prepared group and consumes it. Sync (comp NULL):
 * waits with the GIL released and returns the result. Async: returns an
 * asyncio future of comp's loop that mcpy_completer's drain() resolves.
 * NULL with an exception set on failure. */
PyObject *mcpy_group_run(group_t *g, CompleterObject *comp);

/* mcpy_group_feed() finishes the large gets of a completed group on the
 * caller's thread: each gets its result's memory at its final size (a bytes
 * object, or a Buffer's), filled by one copy from its views here (the GIL
 * released for large copies), or by a read that the loop thread runs when
 * the bytes are elsewhere. Returns how many must run again (then call
 * mcpy_group_start()), 0 when the group is finished. With the GIL. */
int mcpy_group_feed(group_t *g);

/* mcpy_group_start() starts g's marked ops; a sync caller waits for them. */
void mcpy_group_start(group_t *g);

/* mcpy_group_result() builds the Python result of a completed group: one
 * value, or a list when g->is_list. NULL with an exception set. */
PyObject *mcpy_group_result(group_t *g);

/* ---- _store_buffers.c ---- */

/* mcpy_py_to_size() reads a non-negative size; -1 with an exception set. */
int mcpy_py_to_size(PyObject *o, size_t *out);

/* mcpy_op_set_memory() points the op at caller memory: `target` is an int
 * address inside a registered buffer (size bytes from it), or an object
 * exporting a buffer (size: None for all of it). writable: the op writes
 * there. Returns -1 with an exception for a wrong type; an unregistered
 * address or an unusable buffer fails the op only. The op keeps the region
 * or the export until mcpy_group_free(). */
int mcpy_op_set_memory(op_t *o, PyObject *target, PyObject *size, int writable);

/* mcpy_region_busy() counts an op the library starts with r's memory;
 * mcpy_region_idle() ends that, on any thread without the GIL, and wakes
 * an unregister() waiting for it. */
void mcpy_region_busy(region_t *r);
void mcpy_region_idle(region_t *r);

/* mcpy_region_unuse() drops an op's use of r; frees r when it was
 * unregistered and this was the last use. With the GIL. */
void mcpy_region_unuse(region_t *r);

/* mcpy_store_drop_regions() unregisters every buffer of self (they are freed
 * when no op uses them any more). With the GIL. */
void mcpy_store_drop_regions(StoreObject *self);

/* mcpy_buffer_new() returns a Buffer that owns buf (malloc'ed) of len
 * bytes, or NULL with an exception set (buf is then still the caller's). */
PyObject *mcpy_buffer_new(char *buf, size_t len);

/* Store.register() and Store.unregister(). */
PyObject *mcpy_store_register(PyObject *self, PyObject *const *a, Py_ssize_t n);
PyObject *mcpy_store_unregister(PyObject *self, PyObject *arg);

/* ---- _store_meta.c: one blocking call each, the library's result as it is ---- */

PyObject *mcpy_store_xattr_get(PyObject *self, PyObject *args);
PyObject *mcpy_store_xattr_set(PyObject *self, PyObject *args);
PyObject *mcpy_store_rename(PyObject *self, PyObject *args);
PyObject *mcpy_store_master_stats(PyObject *self, PyObject *unused);
PyObject *mcpy_store_registered(PyObject *self, PyObject *args);
PyObject *mcpy_store_replicas(PyObject *self, PyObject *args);
PyObject *mcpy_store_task_create(PyObject *self, PyObject *args);
PyObject *mcpy_store_task_query(PyObject *self, PyObject *args);
PyObject *mcpy_store_replica_drop(PyObject *self, PyObject *args);
PyObject *mcpy_store_serve_metrics(PyObject *self, PyObject *args);
PyObject *mcpy_store_served_addr(PyObject *self, PyObject *unused);

/* ---- _store_pins.c: pinned versions of the get sessions ---- */

PyObject *mcpy_store_pin(PyObject *self, PyObject *args);
PyObject *mcpy_store_pin_read(PyObject *self, PyObject *args);
PyObject *mcpy_store_unpin(PyObject *self, PyObject *args);
/* mcpy_store_drop_pins() frees the pins left once the store is closed
 * (their handles went with it). With the GIL. */
void mcpy_store_drop_pins(StoreObject *self);

/* ---- _store_completer.c ---- */

/* mcpy_completer_push() queues a completed group on c and wakes c's event
 * loop. Any thread, without the GIL. */
void mcpy_completer_push(CompleterObject *c, group_t *g);
/* mcpy_orphans_free() frees the groups that completed on a closed Completer
 * (their loop ended first) and what they hold. With the GIL. */
void mcpy_orphans_free(void);

/* mcpy_future_cancelled() says whether asyncio future fut was cancelled
 * (also when asking fails: nobody waits then). mcpy_future_resolve() sets
 * fut's result to res (stolen), or, res NULL, to the exception pending;
 * what setting raises is dropped (a future of a closed loop). GIL held. */
int mcpy_future_cancelled(PyObject *fut);
void mcpy_future_resolve(PyObject *fut, PyObject *res);

/* The eventfd of a per-loop queue (a Completer's, a FileReader's):
 * mcpy_efd_wake() makes it readable (when the queue was empty and no
 * longer is), mcpy_efd_clear() takes that back before the queue is
 * emptied. Both non-blocking; neither can fail in a way that matters. */
void mcpy_efd_wake(int fd);
void mcpy_efd_clear(int fd);

/* mcpy_done_future() returns a future of c's loop already done with res
 * (a reference stolen; NULL passes an error through). */
PyObject *mcpy_done_future(CompleterObject *c, PyObject *res);

/* mcpy_completer_init() interns the method names the Completer calls.
 * Returns 0, or -1 with an exception set. */
int mcpy_completer_init(void);

/* ---- _store_methods.c ---- */

/* mcpy_check_nargs() returns 0 if lo <= n <= hi, else -1 with a TypeError
 * naming the method. */
int mcpy_check_nargs(const char *name, Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi);

/* mcpy_methods_init() completes the method table; once, before any call. */
void mcpy_methods_init(void);

/* The Store's methods: the table-driven operations and the hand-written
 * ones (register, close, ...). */
extern PyMethodDef mcpy_store_methods[];

/* Store.close(), .wait_idle(), .is_open(), .inflight() (in _store.c). */
PyObject *mcpy_store_m_close(PyObject *self, PyObject *unused);
PyObject *mcpy_store_m_wait_idle(PyObject *self, PyObject *unused);
PyObject *mcpy_store_m_is_open(PyObject *self, PyObject *unused);
PyObject *mcpy_store_m_inflight(PyObject *self, PyObject *unused);

/* ---- the mount backend's file reads (_store_files.c) ---- */

/* read_file(path, flags) -> bytes or -errno (the module function). */
PyObject *mcpy_read_file(PyObject *m, PyObject *args);

#endif
