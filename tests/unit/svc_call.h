/*
 * svc_call.h - a request to the master service as the server hands it over
 * (mc__svc_handle()), for the unit tests of the service. Include it after
 * <cmocka.h>, "master/service.h" and "wire/proto.h".
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

#endif /* MC_TEST_SVC_CALL_H */
