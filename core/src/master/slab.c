/*
 * slab.c - the master's small objects in blocks of one size each (slab.h).
 *
 * A block is BLOCK bytes mapped at an address that is a multiple of BLOCK:
 * its header first, then objects of its size, handed out in address order
 * (so memory is touched only as objects are made) and, once freed, reused
 * from the block's free list. The blocks of one size that have room are
 * on that size's list, the first of them serving allocations; a block that
 * fills leaves the list and comes back when an object in it is freed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "master/slab.h"

#define BLOCK ((size_t)1 << 20)
#define NCLASS (MC__SLAB_MAX / 8 + 1) /* class c: objects of 8 * c bytes */

struct block {
    struct block *prev, *next;   /* on its class's list of blocks with room */
    struct block *aprev, *anext; /* on the slab's list of every block */
    void *free;                  /* freed objects, linked through their first word */
    uint32_t size;               /* of its objects */
    uint32_t live;               /* objects handed out and not freed */
    uint32_t bump;               /* offset of the first never-used byte */
    uint32_t listed;             /* on its class's list */
};

#define FIRST (((sizeof(struct block) + 63) / 64) * 64) /* the first object's offset */

struct mc__slab {
    struct block *room[NCLASS]; /* blocks with room, by class */
    struct block *all;
    size_t nblocks;
};

/* BLOCK bytes at a multiple of BLOCK: twice that mapped, the rest
 * unmapped again. */
static struct block *block_map(void)
{
    char *p = mmap(NULL, 2 * BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)p + BLOCK - 1) & ~(uintptr_t)(BLOCK - 1);
    size_t head = a - (uintptr_t)p;

    if (head)
        munmap(p, head);
    munmap((char *)a + BLOCK, BLOCK - head);
    return (struct block *)a;
}

static void list_add(struct block **head, struct block *b)
{
    b->prev = NULL;
    b->next = *head;
    if (*head)
        (*head)->prev = b;
    *head = b;
    b->listed = 1;
}

static void list_del(struct block **head, struct block *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        *head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    b->prev = b->next = NULL;
    b->listed = 0;
}

mc__slab_t *mc__slab_new(void)
{
    return calloc(1, sizeof(mc__slab_t));
}

void mc__slab_free_all(mc__slab_t *s)
{
    if (!s)
        return;
    while (s->all) {
        struct block *b = s->all;

        s->all = b->anext;
        munmap(b, BLOCK);
    }
    free(s);
}

void *mc__slab_alloc(mc__slab_t *s, size_t size)
{
    if (size == 0 || size > MC__SLAB_MAX)
        return NULL;
    size_t c = (size + 7) / 8;
    struct block *b = s->room[c];

    if (!b) {
        if (!(b = block_map()))
            return NULL;
        memset(b, 0, sizeof(*b));
        b->size = (uint32_t)(c * 8);
        b->bump = FIRST;
        b->anext = s->all;
        if (s->all)
            s->all->aprev = b;
        s->all = b;
        s->nblocks++;
        list_add(&s->room[c], b);
    }
    void *p;

    if (b->free) {
        p = b->free;
        memcpy(&b->free, p, sizeof(void *));
    } else {
        p = (char *)b + b->bump;
        b->bump += b->size;
    }
    b->live++;
    if (!b->free && b->bump + b->size > BLOCK)
        list_del(&s->room[c], b); /* full */
    memset(p, 0, b->size);
    return p;
}

void mc__slab_free(mc__slab_t *s, void *p)
{
    struct block *b = (struct block *)((uintptr_t)p & ~(uintptr_t)(BLOCK - 1));
    size_t c = b->size / 8;

    memcpy(p, &b->free, sizeof(void *));
    b->free = p;
    b->live--;
    if (!b->listed)
        list_add(&s->room[c], b);
    if (b->live == 0 && (s->room[c] != b || b->next)) {
        /* Empty, and not the only block of its size with room: it goes. */
        list_del(&s->room[c], b);
        if (b->aprev)
            b->aprev->anext = b->anext;
        else
            s->all = b->anext;
        if (b->anext)
            b->anext->aprev = b->aprev;
        s->nblocks--;
        munmap(b, BLOCK);
    }
}

size_t mc__slab_blocks(const mc__slab_t *s)
{
    return s->nblocks;
}
