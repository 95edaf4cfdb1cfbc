/*
 * _store_pins.c - pinned versions for the batch get sessions: pin(key)
 * opens the key's current version (a libmooncake handle, which keeps that
 * version readable however the key changes), pin_read() reads ranges of it
 * into registered memory, unpin() closes it. close() of the store drops
 * the pins left (mc_store_close() releases their handles).
 *
 * A pin is used by reads with the GIL released; unpin() of a pin in use
 * closes it when its last read returns. The list is guarded by the GIL.
 */
#include "_store_i.h"

#include <errno.h>
#include <stdlib.h>

struct pin {
    uint64_t id;
    mc_obj_t *ob;
    uint64_t size;
    int users; /* reads in progress */
    int dead;  /* unpinned: closed when users reaches 0 */
    struct pin *next;
};

static struct pin *pin_find(StoreObject *self, uint64_t id)
{
    for (struct pin *p = self->pins; p; p = p->next)
        if (p->id == id && !p->dead)
            return p;
    return NULL;
}

/* Unlinks and frees p, closing its handle unless the store already
 * released it. With the GIL. */
static void pin_free(StoreObject *self, struct pin *p, int close_handle)
{
    for (struct pin **q = &self->pins; *q; q = &(*q)->next)
        if (*q == p) {
            *q = p->next;
            break;
        }
    if (close_handle)
        mc_obj_close(p->ob);
    free(p);
}

/* pin(key) -> (pin id, size) of key's current version, or -errno. */
PyObject *mcpy_store_pin(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    const char *key;
    Py_ssize_t klen;
    if (!PyArg_ParseTuple(args, "y#:pin", &key, &klen))
        return NULL;
    if (!self->s || self->closing)
        return PyLong_FromLong(-E_CLOSED);
    struct pin *p = calloc(1, sizeof(*p));
    if (!p)
        return PyErr_NoMemory();
    int rc;
    atomic_fetch_add(&self->inflight, 1);
    Py_BEGIN_ALLOW_THREADS;
    rc = mc_obj_open(self->s, key, (size_t)klen, &p->ob);
    Py_END_ALLOW_THREADS;
    mcpy_store_leave(self);
    if (rc < 0) {
        free(p);
        return PyLong_FromLong(rc);
    }
    p->size = mc_obj_stat(p->ob)->size;
    p->id = ++self->next_pin;
    p->next = self->pins;
    self->pins = p;
    return Py_BuildValue("(KK)", (unsigned long long)p->id, (unsigned long long)p->size);
}

/* pin_read(id, offset, ptr, size) -> bytes read, or -errno: -ENOENT (no
 * such pin), -ERANGE (past the version's end), -EFAULT ([ptr, ptr+size)
 * is not inside one writable registered buffer). */
PyObject *mcpy_store_pin_read(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    unsigned long long id, off, ptr, len;
    if (!PyArg_ParseTuple(args, "KKKK:pin_read", &id, &off, &ptr, &len))
        return NULL;
    if (!self->s || self->closing)
        return PyLong_FromLong(-E_CLOSED);
    struct pin *p = pin_find(self, id);
    if (!p)
        return PyLong_FromLong(-ENOENT);
    if (off > p->size || len > p->size - off)
        return PyLong_FromLong(-E_OUTSIDE);
    region_t *r = self->regions;
    while (r && (r->dead || !r->writable || ptr < r->start || ptr - r->start > r->len ||
                 len > r->len - (ptr - r->start)))
        r = r->next;
    if (!r)
        return PyLong_FromLong(-E_NOTREG);
    if (len == 0)
        return PyLong_FromLong(0);
    int rc;
    p->users++;
    r->users++; /* an unregister meanwhile keeps the memory until we are done */
    mcpy_region_busy(r);
    atomic_fetch_add(&self->inflight, 1);
    Py_BEGIN_ALLOW_THREADS;
    rc = mc_obj_read(p->ob, off, (void *)(uintptr_t)ptr, (size_t)len);
    mcpy_region_idle(r);
    Py_END_ALLOW_THREADS;
    mcpy_store_leave(self);
    mcpy_region_unuse(r);
    if (--p->users == 0 && p->dead)
        pin_free(self, p, self->s && !self->closing);
    return PyLong_FromLong(rc);
}

/* unpin(id) -> 0, or -ENOENT. */
PyObject *mcpy_store_unpin(PyObject *op, PyObject *args)
{
    StoreObject *self = (StoreObject *)op;
    unsigned long long id;
    if (!PyArg_ParseTuple(args, "K:unpin", &id))
        return NULL;
    struct pin *p = pin_find(self, id);
    if (!p)
        return PyLong_FromLong(-ENOENT);
    p->dead = 1;
    if (p->users == 0)
        pin_free(self, p, self->s && !self->closing);
    return PyLong_FromLong(0);
}

void mcpy_store_drop_pins(StoreObject *self)
{
    while (self->pins)
        pin_free(self, self->pins, 0); /* mc_store_close() released the handles */
}
