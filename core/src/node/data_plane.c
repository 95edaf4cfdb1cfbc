/*
 * data_plane.c - the data plane: READ, WRITE and SHM_MAP on this process's
 * segments (see data_plane.h).
 *
 * Every request completes at once: the segment is memory here, so a copy
 * (WRITE) or a reply that gathers straight from it (READ) is all there is.
 * Over TCP a large WRITE's bytes need not even be copied: the connection
 * receives them straight into the segment (mc__data_plane_place()).
 *
 * A WRITE carries its segment's epoch as its writer was granted it; one
 * below the segment's epoch now is refused (-ESTALE): its write ended and
 * its space may be someone else's (wire/proto.h, "Segment epochs"). The
 * check is made when the WRITE's head arrives; a body still being received
 * in place when the epoch rises keeps the rise from counting as enforced
 * until it ends (mc__data_plane_enforced()). Clients that mapped a segment
 * (SHM_MAP) copy into it themselves, through a slot of its fence (shm.h),
 * which the plane raises and reads in the same place.
 *
 * A READ carries its replica's epoch too; one below the epoch the segment
 * was last mounted with at its master (mc__data_plane_mounted()) is
 * refused (-ESTALE): its replica set is from before the master dropped the
 * segment, and the space it names may hold another object now.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "node/data_plane.h"
#include "runtime/log.h"
#include "runtime/rpc.h"

#define WRITE_HEAD 20 /* a WRITE's body: "uqq" (segment, epoch, offset), then the bytes */

/* Finds [off, off + n) of segment seg, for a write of epoch (0: refused
 * later), or with read, a read of epoch. Returns 0 and sets *at, or the
 * status to answer the request with. */
static int find_range(mc__data_plane_t *p, uint32_t seg, uint64_t epoch, int read, uint64_t off,
                      uint32_t n, char **at)
{
    mc__seg_t s;
    uint64_t now;
    if (n > MC__PROTO_CHUNK)
        return -EMSGSIZE;
    if (p->lookup(p->arg, seg, &s, &now) < 0)
        return -ENOENT;
    if (off > s.size || n > s.size - off)
        return -EINVAL;
    /* A read's floor is the segment's mount's as recorded here, not as its
     * fence says (clients that map the segment can write there). */
    if (read ? epoch < mc__data_plane_mount_epoch(p, seg) : epoch && epoch < now)
        return -ESTALE;
    *at = s.base + off;
    return 0;
}

uint64_t mc__data_plane_mount_epoch(const mc__data_plane_t *p, uint32_t seg)
{
    for (uint32_t i = 0; i < p->nmounts; i++)
        if (p->mounts[i].seg == seg)
            return p->mounts[i].epoch;
    return 0;
}

static void reading_unlink(mc__data_plane_t *p, mc__reading_t *rd)
{
    if (rd->prev)
        rd->prev->next = rd->next;
    else
        p->reading = rd->next;
    if (rd->next)
        rd->next->prev = rd->prev;
}

/* A READ's answer is sent, or its conn closed (and the kernel let go). */
static void read_sent(void *arg, int status)
{
    mc__reading_t *rd = arg;
    (void)status;
    if (rd->p)
        reading_unlink(rd->p, rd);
    free(rd);
}

/* Ends the conns still sending READ answers of seg taken before its mount
 * now: the rest of their bytes would be whatever the segment holds from now
 * on, another object's once new data goes there. Their readers read again
 * and are refused (-ESTALE). Until the conns let go, the mount's epoch is
 * not enforced (mc__data_plane_enforced()). */
static void reading_fence(mc__data_plane_t *p, uint32_t seg)
{
    uint64_t mount = mc__data_plane_mount_epoch(p, seg);
    for (mc__reading_t *rd = p->reading; rd; rd = rd->next)
        if (rd->seg == seg && rd->mount < mount && !mc__conn_is_closing(rd->c)) {
            mc__log(MC__LOG_INFO,
                    "closing %s: a READ answer of segment %u from before its mount (epoch %llu) "
                    "is still being sent",
                    mc__conn_peer(rd->c), seg, (unsigned long long)mount);
            mc__conn_abort(rd->c, -ESTALE);
        }
}

void mc__data_plane_mounted(mc__data_plane_t *p, uint32_t seg, uint64_t epoch)
{
    mc__seg_t s;
    uint64_t now;
    /* Forget segments that are ours no more (mounted again under another
     * number): a READ of theirs finds no segment. */
    for (uint32_t i = 0; i < p->nmounts;) {
        if (p->mounts[i].seg != seg && p->lookup(p->arg, p->mounts[i].seg, &s, &now) < 0)
            p->mounts[i] = p->mounts[--p->nmounts];
        else
            i++;
    }
    uint32_t i = 0;
    while (i < p->nmounts && p->mounts[i].seg != seg)
        i++;
    if (i == p->nmounts) {
        mc__mount_t *nm = realloc(p->mounts, sizeof(*nm) * (p->nmounts + 1));
        if (nm) {
            p->mounts = nm;
            p->mounts[p->nmounts++] = (mc__mount_t){.seg = seg};
        } else {
            i = UINT32_MAX; /* out of memory: the fence still says it */
            mc__log(MC__LOG_WARN,
                    "segment %u: no memory to record its mount (epoch %llu): READs of before "
                    "its mount are not refused over TCP",
                    seg, (unsigned long long)epoch);
        }
    }
    if (i != UINT32_MAX && p->mounts[i].epoch < epoch) {
        p->mounts[i].epoch = epoch;
        reading_fence(p, seg);
    }
    if (p->lookup(p->arg, seg, &s, &now) == 0 && s.fence && atomic_load(&s.fence->mount) < epoch)
        atomic_store(&s.fence->mount, epoch);
}

static int do_read(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h, const char *body,
                   size_t len)
{
    uint32_t seg, n;
    uint64_t epoch, off;
    char *at;
    if (mc__unpack(body, len, "uqqu", &seg, &epoch, &off, &n) < 0)
        return -EBADMSG;
    /* A replica set of before the segment's last mount names space that
     * new objects may hold (wire/proto.h, "Reads"). */
    int rc = find_range(p, seg, epoch, 1, off, n, &at);
    if (rc == -ESTALE)
        p->reads_fenced++;
    if (rc < 0)
        return mc__rpc_reply(c, h, rc, NULL, 0);
    mc__reading_t *rd = malloc(sizeof(*rd));
    if (!rd)
        return -ENOMEM;
    *rd = (mc__reading_t){.next = p->reading,
                          .p = p,
                          .c = c,
                          .seg = seg,
                          .mount = mc__data_plane_mount_epoch(p, seg)};
    if (p->reading)
        p->reading->prev = rd;
    p->reading = rd;
    struct iovec iov = {at, n};
    if ((rc = mc__rpc_replyv(c, h, 0, &iov, 1, read_sent, rd)) < 0) {
        reading_unlink(p, rd);
        free(rd);
        return rc;
    }
    p->bytes_read += n;
    return 0;
}

static int do_write(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h, const char *body,
                    size_t len)
{
    uint32_t seg, n;
    uint64_t epoch, off;
    const char *data;
    char *at;
    if (mc__unpack(body, len, "uqq*", &seg, &epoch, &off, &data, &n) < 0)
        return -EBADMSG;
    int rc = epoch ? find_range(p, seg, epoch, 0, off, n, &at) : -ESTALE;
    if (rc == -ESTALE)
        p->writes_fenced++;
    if (rc < 0)
        return mc__rpc_reply(c, h, rc, NULL, 0);
    memcpy(at, data, n);
    p->bytes_written += n;
    return mc__rpc_reply(c, h, 0, NULL, 0);
}

/* Room for one more of the n elements of size bytes at arr (room for
 * *cap), doubling it: the array (arr, or where it moved), or NULL without
 * memory (arr and *cap as they were). */
static void *grow(void *arr, uint32_t n, uint32_t *cap, size_t size)
{
    if (n < *cap)
        return arr;
    uint32_t c = *cap ? *cap * 2 : 4;
    void *a = realloc(arr, size * c);
    if (a)
        *cap = c;
    return a;
}

/* The count of WRITEs being received into seg at epoch (a new one with
 * add), or NULL. */
static mc__placing_t *placing_find(mc__data_plane_t *p, uint32_t seg, uint64_t epoch, int add)
{
    for (uint32_t i = 0; i < p->nplacing; i++)
        if (p->placing[i].seg == seg && p->placing[i].epoch == epoch)
            return &p->placing[i];
    mc__placing_t *np = add ? grow(p->placing, p->nplacing, &p->cplacing, sizeof(*np)) : NULL;
    if (!np)
        return NULL;
    p->placing = np;
    mc__placing_t *pl = &p->placing[p->nplacing++];
    *pl = (mc__placing_t){.seg = seg, .epoch = epoch};
    return pl;
}

char *mc__data_plane_place(mc__data_plane_t *p, const mc__hdr_t *h, const char *head, size_t *skip,
                           mc__placing_t *out)
{
    uint32_t seg;
    uint64_t epoch, off;
    char *at;
    if (h->op != MC__OP_WRITE || h->len < WRITE_HEAD ||
        mc__unpack(head, WRITE_HEAD, "uqq", &seg, &epoch, &off) < 0 || !epoch ||
        find_range(p, seg, epoch, 0, off, h->len - WRITE_HEAD, &at) < 0)
        return NULL; /* do_write() answers it, or refuses it */
    mc__placing_t *pl = placing_find(p, seg, epoch, 1);
    if (!pl)
        return NULL; /* out of memory: received whole, then copied */
    pl->n++;
    *out = (mc__placing_t){.seg = seg, .epoch = epoch, .n = 1};
    *skip = WRITE_HEAD;
    return at;
}

void mc__data_plane_unplace(mc__data_plane_t *p, const mc__placing_t *done)
{
    mc__placing_t *pl = placing_find(p, done->seg, done->epoch, 0);
    if (pl && !--pl->n)
        *pl = p->placing[--p->nplacing];
}

int mc__data_plane_placed(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h,
                          const mc__placing_t *pl)
{
    mc__data_plane_unplace(p, pl);
    p->bytes_written += h->len - WRITE_HEAD;
    p->bytes_placed += h->len - WRITE_HEAD;
    return mc__rpc_reply(c, h, 0, NULL, 0);
}

static mc__shm_seg_t *shm_seg_find(const mc__data_plane_t *p, const mc__shm_fence_t *f)
{
    for (uint32_t i = 0; i < p->nshm_segs; i++)
        if (p->shm_segs[i].f == f)
            return &p->shm_segs[i];
    return NULL;
}

/* The fence of our segment seg, or NULL (none: not ours, or no fence). */
static mc__shm_fence_t *seg_fence(const mc__data_plane_t *p, uint32_t seg, uint64_t *epoch)
{
    mc__seg_t s;
    uint64_t now;
    if (p->lookup(p->arg, seg, &s, &now) < 0)
        return NULL;
    if (epoch)
        *epoch = now;
    return s.fence;
}

/* The holder of slot of ss's fence, or NULL. */
static mc__shm_user_t *slot_user(const mc__data_plane_t *p, const mc__shm_seg_t *ss, uint32_t slot)
{
    for (uint32_t i = 0; i < p->nusers; i++)
        if (p->users[i].f == ss->f && p->users[i].slot == slot)
            return &p->users[i];
    return NULL;
}

/* A copy of epoch in slot holds back ss's rise to want: logged once when
 * the same copy has held it p->held_ms, and then revoked if its holder
 * can be (which frees the slot). */
static void fence_held(mc__data_plane_t *p, mc__shm_seg_t *ss, uint32_t slot, uint64_t epoch,
                       uint64_t want)
{
    uint64_t now = mc_loop_now_ms();
    if (!ss->held_since_ms || ss->held_slot != slot || ss->held_epoch != epoch) {
        ss->held_slot = slot;
        ss->held_epoch = epoch;
        ss->held_since_ms = now;
        ss->held_said = 0;
        return;
    }
    if (ss->held_said ||
        now - ss->held_since_ms < (p->held_ms ? p->held_ms : MC__FENCE_HELD_WARN_MS))
        return;
    ss->held_said = 1;
    mc__shm_user_t *u = slot_user(p, ss, slot);
    if (u && u->revoke) {
        mc__log(MC__LOG_WARN,
                "segment %u: RDMA peer %s (fence slot %u) has held a write of epoch %llu open "
                "for %llu s; its connection is torn down, so that nothing of it lands any more "
                "and the writes that ended there give their space back (epoch %llu)",
                ss->seg, u->peer, slot, (unsigned long long)epoch,
                (unsigned long long)((now - ss->held_since_ms) / 1000), (unsigned long long)want);
        u->revoke(u->owner); /* calls mc__data_plane_closed(): u is gone */
        return;
    }
    mc__log(MC__LOG_WARN,
            "segment %u: process %d (fence slot %u) has been copying a write of epoch %llu into "
            "it for %llu s; the space of writes that ended there waits until that copy ends "
            "(epoch %llu) or the process exits (is it stopped?)",
            ss->seg, u ? u->pid : 0, slot, (unsigned long long)epoch,
            (unsigned long long)((now - ss->held_since_ms) / 1000), (unsigned long long)want);
}

/* Raises ss's fence to epoch (clients start no copy below it from now
 * on), then returns the lowest epoch below it of a copy in progress, or
 * epoch. Stores, then loads: see shm.h. */
static uint64_t fence_enforced(mc__data_plane_t *p, mc__shm_seg_t *ss, uint64_t epoch)
{
    if (atomic_load(&ss->f->epoch) < epoch)
        atomic_store(&ss->f->epoch, epoch);
    uint64_t low = epoch;
    uint32_t by = 0;
    for (uint32_t w = 0; w < sizeof(ss->used) / sizeof(ss->used[0]); w++)
        for (uint64_t bits = ss->used[w]; bits; bits &= bits - 1) {
            uint32_t slot = w * 64 + (uint32_t)__builtin_ctzll(bits);
            uint64_t e = atomic_load(&ss->f->busy[slot]);
            if (e && e < low) {
                low = e;
                by = slot;
            }
        }
    if (low < epoch)
        fence_held(p, ss, by, low, epoch);
    else
        ss->held_since_ms = 0;
    return low;
}

uint64_t mc__data_plane_enforced(mc__data_plane_t *p, uint32_t seg, uint64_t epoch)
{
    mc__shm_fence_t *f = p->nshm_segs ? seg_fence(p, seg, NULL) : NULL;
    mc__shm_seg_t *ss = f ? shm_seg_find(p, f) : NULL;
    uint64_t low = ss ? fence_enforced(p, ss, epoch) : epoch;
    for (uint32_t i = 0; i < p->nplacing; i++)
        if (p->placing[i].seg == seg && p->placing[i].epoch < low)
            low = p->placing[i].epoch;
    uint64_t mount = p->reading ? mc__data_plane_mount_epoch(p, seg) : 0;
    for (mc__reading_t *rd = p->reading; rd; rd = rd->next)
        if (rd->seg == seg && rd->mount < mount && rd->mount < low)
            low = rd->mount; /* its conn is closing (reading_fence()) */
    return low;
}

void mc__data_plane_fini(mc__data_plane_t *p)
{
    free(p->placing);
    p->placing = NULL;
    p->nplacing = p->cplacing = 0;
    free(p->shm_segs);
    p->shm_segs = NULL;
    p->nshm_segs = 0;
    free(p->users);
    p->users = NULL;
    p->nusers = p->cusers = 0;
    free(p->mounts);
    p->mounts = NULL;
    p->nmounts = 0;
    for (mc__reading_t *rd = p->reading; rd; rd = rd->next)
        rd->p = NULL; /* its conn frees it once it let go */
    p->reading = NULL;
}

/* ---- fences of mapped segments (shm.h) ---- */

/* The fence state of f, our segment seg's fence (now at epoch), made when
 * it is first handed out; NULL without memory. */
static mc__shm_seg_t *shm_seg_get(mc__data_plane_t *p, uint32_t seg, mc__shm_fence_t *f,
                                  uint64_t epoch)
{
    mc__shm_seg_t *ss = shm_seg_find(p, f);
    if (ss) {
        ss->seg = seg;
        return ss;
    }
    ss = realloc(p->shm_segs, sizeof(*ss) * (p->nshm_segs + 1));
    if (!ss)
        return NULL;
    p->shm_segs = ss;
    ss = &p->shm_segs[p->nshm_segs++];
    memset(ss, 0, sizeof(*ss));
    ss->seg = seg;
    ss->f = f;
    if (atomic_load(&f->epoch) < epoch)
        atomic_store(&f->epoch, epoch);
    return ss;
}

/* owner's slot in ss's fence: the one it holds, or a free one it now
 * holds (pid, peer and revoke as mc__shm_user_t). Returns the slot,
 * -EBUSY when none is free, or -ENOMEM. */
/* The first free slot of ss's fence, or MC__SHM_FENCE_SLOTS: none. */
static uint32_t free_slot(const mc__shm_seg_t *ss)
{
    uint32_t slot = 0;
    while (slot < MC__SHM_FENCE_SLOTS && (ss->used[slot / 64] >> (slot % 64) & 1))
        slot++;
    return slot;
}

/* Every slot of ss's fence is taken: revokes the RDMA peer that joined
 * first of those with no write in progress (its slot is then free).
 * Returns 0, or -EBUSY when there is none (mappings, or writes marked). */
static int revoke_oldest_idle(mc__data_plane_t *p, mc__shm_seg_t *ss)
{
    mc__shm_user_t *old = NULL;
    for (uint32_t i = 0; i < p->nusers; i++) {
        mc__shm_user_t *u = &p->users[i];
        if (u->f == ss->f && u->revoke && !atomic_load(&ss->f->busy[u->slot]) &&
            (!old || u->seq < old->seq))
            old = u;
    }
    if (!old)
        return -EBUSY;
    mc__log(MC__LOG_WARN,
            "segment %u: every fence slot is taken; RDMA peer %s (slot %u), the first to have "
            "joined of those with no write in progress, is torn down for a new one (a live peer "
            "connects again)",
            ss->seg, old->peer, old->slot);
    old->revoke(old->owner); /* calls mc__data_plane_closed(): old is gone */
    return 0;
}

static int64_t user_slot(mc__data_plane_t *p, const void *owner, mc__shm_seg_t *ss, int pid,
                         const char *peer, void (*revoke)(const void *owner))
{
    for (uint32_t i = 0; i < p->nusers; i++)
        if (p->users[i].owner == owner && p->users[i].f == ss->f)
            return p->users[i].slot;
    uint32_t slot = free_slot(ss);
    if (slot == MC__SHM_FENCE_SLOTS && revoke_oldest_idle(p, ss) == 0)
        slot = free_slot(ss);
    if (slot == MC__SHM_FENCE_SLOTS)
        return -EBUSY;
    mc__shm_user_t *nu = grow(p->users, p->nusers, &p->cusers, sizeof(*nu));
    if (!nu)
        return -ENOMEM;
    p->users = nu;
    mc__shm_user_t *u = &p->users[p->nusers++];
    *u = (mc__shm_user_t){
        .owner = owner, .f = ss->f, .slot = slot, .seq = ++p->joins, .pid = pid, .revoke = revoke};
    snprintf(u->peer, sizeof(u->peer), "%s", peer ? peer : "");
    ss->used[slot / 64] |= 1ull << (slot % 64);
    atomic_store(&ss->f->busy[slot], 0);
    return slot;
}

_Atomic uint64_t *mc__data_plane_fence_join(mc__data_plane_t *p, uint32_t seg, const void *owner,
                                            const char *peer, void (*revoke)(const void *owner),
                                            _Atomic uint64_t **epoch)
{
    uint64_t now;
    mc__shm_fence_t *f = seg_fence(p, seg, &now);
    mc__shm_seg_t *ss = f ? shm_seg_get(p, seg, f, now) : NULL;
    int64_t slot = ss ? user_slot(p, owner, ss, 0, peer, revoke) : -ENOENT;
    if (slot < 0) {
        mc__log(MC__LOG_WARN, "segment %u: no fence slot for RDMA peer %s: %s", seg, peer,
                strerror((int)-slot));
        return NULL;
    }
    *epoch = &f->epoch;
    return &f->busy[slot];
}

int mc__data_plane_maps(const mc__data_plane_t *p, const mc__conn_t *c)
{
    for (uint32_t i = 0; i < p->nusers; i++)
        if (p->users[i].owner == c)
            return 1;
    return 0;
}

void mc__data_plane_closed(mc__data_plane_t *p, const void *owner)
{
    for (uint32_t i = 0; i < p->nusers;) {
        mc__shm_user_t *u = &p->users[i];
        mc__shm_seg_t *ss = u->owner == owner ? shm_seg_find(p, u->f) : NULL;
        if (!ss) {
            i++;
            continue;
        }
        atomic_store(&ss->f->busy[u->slot], 0);
        ss->used[u->slot / 64] &= ~(1ull << (u->slot % 64));
        *u = p->users[--p->nusers];
    }
}

/* Hands a co-located client the segment's memfd and a slot of its fence:
 * over a Unix socket only (the server's shm listener), where reaching us
 * proves the client shares our host. */
static int do_shm_map(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h, const char *body,
                      size_t len)
{
    uint32_t seg;
    mc__seg_t s;
    uint64_t epoch;
    if (mc__unpack(body, len, "u", &seg) < 0)
        return -EBADMSG;
    if (!p->shm || !mc__conn_is_unix(c))
        return mc__rpc_reply(c, h, -EOPNOTSUPP, NULL, 0);
    if (p->lookup(p->arg, seg, &s, &epoch) < 0)
        return mc__rpc_reply(c, h, -ENOENT, NULL, 0);
    if (s.fd < 0 || !s.fence)
        return mc__rpc_reply(c, h, -EOPNOTSUPP, NULL, 0);
    mc__shm_seg_t *ss = shm_seg_get(p, seg, s.fence, epoch);
    pid_t pid = 0;
    mc__conn_peer_cred(c, NULL, &pid);
    int64_t slot = ss ? user_slot(p, c, ss, pid, NULL, NULL) : -ENOMEM;
    if (slot < 0)
        return mc__rpc_reply(c, h, (int)slot, NULL, 0);
    char resp[20];
    mc__wbuf_t w = {.p = resp, .cap = sizeof(resp)};
    mc__pack(&w, "qqu", s.size, mc__shm_fence_off(s.size), (uint32_t)slot);
    int rc = mc__rpc_reply_fd(c, h, 0, w.p, w.len, s.fd);
    if (rc < 0)
        return rc;
    p->shm_maps++;
    mc__log(MC__LOG_DEBUG, "%s: mapped segment %u (fence slot %u)", mc__conn_peer(c), seg,
            (unsigned)slot);
    return 0;
}

int mc__data_plane_handle(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h, const char *body,
                          size_t len)
{
    switch (h->op) {
    case MC__OP_READ:
        return do_read(p, c, h, body, len);
    case MC__OP_WRITE:
        return do_write(p, c, h, body, len);
    case MC__OP_SHM_MAP:
        return do_shm_map(p, c, h, body, len);
    default:
        return mc__rpc_reply(c, h, -EOPNOTSUPP, NULL, 0);
    }
}
