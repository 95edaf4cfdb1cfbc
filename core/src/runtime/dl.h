/*
 * dl.h - libraries loaded at their first use, not at every start: libcurl
 * (the etcd client, etcd.c) and libmicrohttpd (the metrics endpoint,
 * metrics.c). Linked, their trees (gnutls, krb5, ldap, nghttp2, ...: 41
 * shared libraries in all) cost every process that links libmooncake
 * about 8 ms at its start here, whether it ever speaks to etcd or serves
 * metrics; a mooncake-cli command, a node or a Python import mostly does
 * neither.
 *
 * Each function loads its library (dlopen, the Debian package's soname)
 * and looks up what the caller uses, once per process (pthread_once), and
 * returns the table, or NULL when the library or a symbol is missing, or
 * libcurl's curl_global_init() failed (the reason logged once; not tried
 * again): the caller then fails with -ELIBACC. The types are the
 * libraries' own headers', which the build needs as before. Through the
 * table, curl_easy_setopt() loses the type checks curl.h's macros give a
 * direct call: its callers pass long, pointer or function as the option
 * says (CURLOPT_*'s comments in curl.h).
 */
#ifndef MC_RUNTIME_DL_H
#define MC_RUNTIME_DL_H

#include <curl/curl.h>
#include <microhttpd.h>

/* libcurl.so.4, curl_global_init() done (once, by mc__curl()). */
typedef struct mc__curl_fns {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *h);
    CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
    CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *m);
    CURLMcode (*multi_add_handle)(CURLM *m, CURL *h);
    CURLMcode (*multi_remove_handle)(CURLM *m, CURL *h);
    CURLMcode (*multi_assign)(CURLM *m, curl_socket_t fd, void *p);
    CURLMsg *(*multi_info_read)(CURLM *m, int *left);
    CURLMcode (*multi_setopt)(CURLM *m, CURLMoption opt, ...);
    CURLMcode (*multi_socket_action)(CURLM *m, curl_socket_t fd, int mask, int *running);
    struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
    void (*slist_free_all)(struct curl_slist *l);
} mc__curl_fns_t;

const mc__curl_fns_t *mc__curl(void);

/* libmicrohttpd.so.12. */
typedef struct mc__mhd_fns {
    struct MHD_Daemon *(*start_daemon)(unsigned flags, uint16_t port, MHD_AcceptPolicyCallback apc,
                                       void *apc_cls, MHD_AccessHandlerCallback dh, void *dh_cls,
                                       ...);
    void (*stop_daemon)(struct MHD_Daemon *d);
    MHD_socket (*quiesce_daemon)(struct MHD_Daemon *d);
    struct MHD_Response *(*create_response_from_buffer)(size_t size, void *buffer,
                                                        enum MHD_ResponseMemoryMode mode);
    enum MHD_Result (*add_response_header)(struct MHD_Response *r, const char *header,
                                           const char *content);
    enum MHD_Result (*queue_response)(struct MHD_Connection *c, unsigned status,
                                      struct MHD_Response *r);
    void (*destroy_response)(struct MHD_Response *r);
    const union MHD_ConnectionInfo *(*get_connection_info)(struct MHD_Connection *c,
                                                           enum MHD_ConnectionInfoType t, ...);
} mc__mhd_fns_t;

const mc__mhd_fns_t *mc__mhd(void);

#endif /* MC_RUNTIME_DL_H */
