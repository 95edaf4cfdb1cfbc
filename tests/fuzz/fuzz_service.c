/*
 * fuzz_service.c - libFuzzer target for the master's request handling: every
 * operation's body decoder and handler (core/src/master/service.c), run against a
 * live master with three segments, a few objects, writes in progress and open
 * handles, a repair task handed out and a replica dropped by a writer, so
 * that handlers get past their lookups.
 *
 * Input: a sequence of requests, each [op index][owner][u16 length][body],
 * run against a fresh master (two segments, a few objects, a write in
 * progress and an open handle) so that a crash replays from its input.
 * The property: no crash, no sanitizer report, and the master's space
 * accounting stays consistent after every request.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "master/master.h"
#include "wire/proto.h"
#include "master/service.h"

static const uint16_t ops[] = {
#define OP_CODE(name, code, req, resp) code,
    MC__PROTO_OPS(OP_CODE)
#undef OP_CODE
};

static mc__master_t *m;
static mc__svc_t *svc;
static uint64_t now;

static void call(uint64_t owner, uint16_t op, const char *fmt, ...)
{
    mc__wbuf_t req = {0}, resp = {0};
    va_list ap;
    va_start(ap, fmt);
    mc__vpack(&req, fmt, ap);
    va_end(ap);
    mc__svc_handle(svc, owner, op, req.p ? req.p : "", req.len, now, &resp);
    free(req.p);
    free(resp.p);
}

static void setup(void)
{
    mc__master_opts_t mo = {.lease_ms = 1000, .align = 64, .evict_high_pct = 95};
    mc__svc_opts_t so = {.node_ttl_ms = 100000, .put_ttl_ms = 100000};
    now = 1000000;
    if (mc__master_new(&m, &mo) < 0 || mc__svc_new(&svc, m, &so) < 0)
        abort();
    call(1, MC__OP_MOUNT_SEGMENT, "qusqsuq", (uint64_t)11, 0u, "127.0.0.1:1", 11u,
         (uint64_t)1 << 20, "", 0u, 0u, (uint64_t)0);
    call(1, MC__OP_MOUNT_SEGMENT, "qusqsuq", (uint64_t)12, 0u, "127.0.0.1:2", 11u,
         (uint64_t)1 << 20, "MCRR", 4u, 0u, (uint64_t)0);
    call(1, MC__OP_MOUNT_SEGMENT, "qusqsuq", (uint64_t)13, 0u, "127.0.0.1:3", 11u,
         (uint64_t)1 << 20, "", 0u, 0u, (uint64_t)0);
    const char *keys[] = {"a", "a/b", "a/c/", "d/e/f", "z"};
    for (int i = 0; i < 5; i++) { /* put ids are handed out from 1 */
        call(1, MC__OP_PUT_START, "kquuuuqisuuuq", keys[i], (uint32_t)strlen(keys[i]),
             (uint64_t)(100 * i + 1), (unsigned)MC_PUT_OWNER, 0644u, 2u, 0u, (uint64_t)0,
             (int64_t)0, "", 0u, 1000u, 1000u, 0u, (uint64_t)0);
        call(1, MC__OP_PUT_COMMIT, "qkquui", (uint64_t)(i + 1), keys[i], (uint32_t)strlen(keys[i]),
             (uint64_t)(100 * i), 0u, 0u, (int64_t)0);
    }
    call(2, MC__OP_PUT_START, "kquuuuqisuuuq", "pending", 7u, (uint64_t)4096, 0u, 0u, 1u, 0u,
         (uint64_t)0, (int64_t)0, "", 0u, 0u, 0u, 0u, (uint64_t)0);
    call(2, MC__OP_OPEN, "k", "a/b", 3u);
    /* Put 6 loses a replica (its writer could not reach the node); node
     * 11 leaves, so the objects it held are copied: node 13 takes its tasks
     * (ids from 1), node 12 may have some waiting. */
    call(2, MC__OP_PUT_START, "kquuuuqisuuuq", "drop", 4u, (uint64_t)4096, 0u, 0u, 2u, 0u,
         (uint64_t)0, (int64_t)0, "", 0u, 0u, 0u, 0u, (uint64_t)0);
    call(2, MC__OP_PUT_DROP_REPLICA, "qu", (uint64_t)7, 1u);
    call(1, MC__OP_UNMOUNT_SEGMENT, "qu", (uint64_t)11, 1u);
    mc__svc_tick(svc, now);
    call(1, MC__OP_REPAIR_TAKE, "q", (uint64_t)13);
}

static void check(void)
{
    mc_space_t sp;
    mc__master_space(m, &sp);
    if (sp.used > sp.total)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    while (size >= 4) {
        uint16_t op = ops[data[0] % (sizeof(ops) / sizeof(ops[0]))];
        uint64_t owner = 1 + data[1] % 4;
        size_t len = (size_t)data[2] | (size_t)data[3] << 8;
        data += 4;
        size -= 4;
        if (data[-4] == 0xff) { /* time passes: leases, puts and nodes expire */
            now += len * 1000;
            mc__svc_tick(svc, now);
            check();
            continue;
        }
        if (len > size)
            len = size;
        mc__wbuf_t resp = {0};
        mc__svc_handle(svc, owner, op, (const char *)data, len, now, &resp);
        free(resp.p);
        data += len;
        size -= len;
        now += 7;
        if (owner == 4) { /* the last owner's connection drops each time */
            mc__svc_owner_gone(svc, owner, now);
            mc__svc_tick(svc, now);
        }
        check();
    }
    mc__svc_free(svc);
    mc__master_free(m);
    return 0;
}
