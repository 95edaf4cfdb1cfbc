/*
 * dl.c - libcurl and libmicrohttpd loaded at their first use (see dl.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "runtime/dl.h"
#include "runtime/log.h"

/* Opens soname and fills tab, a struct of n function pointers, from the
 * names in syms, in order (copied in, as POSIX has dlsym's pointers taken).
 * Returns 0, or -1 with the reason logged. */
static int load(const char *soname, const char *what, void *tab, const char *const *syms, size_t n)
{
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        mc__log(MC__LOG_ERROR, "%s needs %s, which cannot be loaded: %s", what, soname, dlerror());
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(lib, syms[i]);
        memcpy((char *)tab + i * sizeof(f), &f, sizeof(f));
        if (!f) {
            mc__log(MC__LOG_ERROR, "%s needs %s from %s, which does not have it", what, syms[i],
                    soname);
            dlclose(lib);
            return -1;
        }
    }
    return 0; /* never closed: its functions stay in use */
}

/* ---- libcurl ---- */

static const char *const curl_syms[] = {
    "curl_global_init",         "curl_easy_init",        "curl_easy_cleanup",
    "curl_easy_setopt",         "curl_easy_getinfo",     "curl_multi_init",
    "curl_multi_cleanup",       "curl_multi_add_handle", "curl_multi_remove_handle",
    "curl_multi_assign",        "curl_multi_info_read",  "curl_multi_setopt",
    "curl_multi_socket_action", "curl_slist_append",     "curl_slist_free_all",
};
_Static_assert(sizeof(mc__curl_fns_t) == sizeof(curl_syms), "mc__curl_fns_t and its names");

static mc__curl_fns_t curl_fns;
static const mc__curl_fns_t *curl_ok;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_load(void)
{
    if (load("libcurl.so.4", "etcd", &curl_fns, curl_syms,
             sizeof(curl_syms) / sizeof(curl_syms[0])) < 0)
        return;
    if (curl_fns.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        mc__log(MC__LOG_ERROR, "etcd: libcurl's curl_global_init() failed");
        return;
    }
    curl_ok = &curl_fns;
}

const mc__curl_fns_t *mc__curl(void)
{
    pthread_once(&curl_once, curl_load);
    return curl_ok;
}

/* ---- libmicrohttpd ---- */

static const char *const mhd_syms[] = {
    "MHD_start_daemon",        "MHD_stop_daemon",
    "MHD_quiesce_daemon",      "MHD_create_response_from_buffer",
    "MHD_add_response_header", "MHD_queue_response",
    "MHD_destroy_response",    "MHD_get_connection_info",
};
_Static_assert(sizeof(mc__mhd_fns_t) == sizeof(mhd_syms), "mc__mhd_fns_t and its names");

static mc__mhd_fns_t mhd_fns;
static const mc__mhd_fns_t *mhd_ok;
static pthread_once_t mhd_once = PTHREAD_ONCE_INIT;

static void mhd_load(void)
{
    if (load("libmicrohttpd.so.12", "the metrics endpoint", &mhd_fns, mhd_syms,
             sizeof(mhd_syms) / sizeof(mhd_syms[0])) == 0)
        mhd_ok = &mhd_fns;
}

const mc__mhd_fns_t *mc__mhd(void)
{
    pthread_once(&mhd_once, mhd_load);
    return mhd_ok;
}
