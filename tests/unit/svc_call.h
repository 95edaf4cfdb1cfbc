/*
 * svc_call.h - a request to the master service as the server hands it over
 * (mc__svc_handle()), and the master and service those tests start, for
 * the unit tests of the service. Include it after <cmocka.h>,
 * "master/service.h" and "wire/proto.h".
 */
#ifndef MC_TEST_SVC_CALL_H
#define MC_TEST_SVC_CALL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

/* Hands svc the request op of owner at now, its body packed per fmt from
 * ap; the answer goes to *resp (emptied first). Returns the status. */
static inline int svc_vcall(mc__svc_t *svc, mc__wbuf_t *resp, uint64_t owner, uint64_t now,
                            uint16_t op, const char *fmt, va_list ap)
{
    mc__wbuf_t req = {0};
    assert_int_equal(mc__vpack(&req, fmt, ap), 0);
    resp->len = 0;
    resp->err = 0;
    int rc = mc__svc_handle(svc, owner, op, req.p ? req.p : "", req.len, now, resp);
    free(req.p);
    return rc;
}

/* A master (5 s read leases, 64-byte units) and its service (a node gone
 * after 3 s of silence, 10 s write leases), as the service tests run them,
 * in *m and *svc. svc_test_free() frees them. */
static inline void svc_test_new(mc__master_t **m, mc__svc_t **svc)
{
    mc__master_opts_t mo = {.lease_ms = 5000, .align = 64};
    mc__svc_opts_t so = {.node_ttl_ms = 3000, .put_ttl_ms = 10000};
    assert_int_equal(mc__master_new(m, &mo), 0);
    assert_int_equal(mc__svc_new(svc, *m, &so), 0);
}

/* Frees what svc_test_new() made and the answers' buffer resp. */
static inline void svc_test_free(mc__master_t *m, mc__svc_t *svc, mc__wbuf_t *resp)
{
    mc__svc_free(svc);
    mc__master_free(m);
    free(resp->p);
}

#endif /* MC_TEST_SVC_CALL_H */
