/*
 * replicas.c - where bytes are: mc_obj_replicas() reads the replica set the
 * master handed out with an open version's handle (OPEN), so it needs no
 * call of its own and changes nothing; mc_store_served_addr() is where this
 * store serves its own segment, the name replicas there carry.
 */
#include <string.h>

#include "client/remote_i.h"

int mc_obj_replicas(const mc_obj_t *ob, mc_replica_t *out, int max)
{
    const mc__rset_t *rs = ob ? ob->rs : NULL;
    if (!rs)
        return 0;
    for (uint32_t i = 0; i < rs->n && (int)i < max; i++) {
        const struct rrep *r = &rs->r[i];
        mc_replica_t *o = &out[i];
        memset(o, 0, sizeof(*o));
        o->segment = r->seg;
        for (uint32_t e = 0; e < r->next; e++) {
            if (r->ext[e].off == MC__HOLE)
                continue; /* a sparse file's hole: no piece, no bytes */
            if (!o->extents++)
                o->offset = r->ext[e].off;
            o->bytes += r->ext[e].len;
        }
        /* Both are MC__ADDR_STRLEN long: the copy is whole. */
        _Static_assert(sizeof(o->addr) >= MC__ADDR_STRLEN, "mc_replica_t.addr holds an address");
        memcpy(o->addr, r->addr, MC__ADDR_STRLEN);
        o->addr[sizeof(o->addr) - 1] = '\0';
    }
    return (int)rs->n;
}

const char *mc_store_served_addr(mc_store_t *s)
{
    /* Both servers live from mc_store_open() to mc_store_close(), and
     * their bound address never changes: any thread may read it. */
    const struct mc__server *srv = s->rm && s->rm->srv ? s->rm->srv : s->srv;
    return srv ? mc__server_addr(srv) : "";
}
