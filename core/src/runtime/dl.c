/*
 * dl.c - libcurl and libmicrohttpd loaded at their first use (see dl.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "runtime/dl.h"
#include "runtime/log.h"

/* A function to look up: its name and where its pointer goes in a table. */
struct sym {
    const char *name;
    size_t off;
};

/* Made from the member's name, so that a name cannot go to another
 * member's place: curl_easy_init into .easy_init, MHD_stop_daemon into
 * .stop_daemon. */
#define CURL_SYM(m)                                                                                \
    {                                                                                              \
        "curl_" #m, offsetof(mc__curl_fns_t, m)                                                    \
    }
#define MHD_SYM(m)                                                                                 \
    {                                                                                              \
        "MHD_" #m, offsetof(mc__mhd_fns_t, m)                                                      \
    }
/* The entries of a table of syms. */
#define NSYMS(syms) (sizeof(syms) / sizeof((syms)[0]))

/* Opens soname and fills tab, a struct of n function pointers, from syms
 * (copied in, as POSIX has dlsym's pointers taken). Returns 0, or -1 with
 * the reason logged. */
static int load(const char *soname, const char *what, void *tab, const struct sym *syms, size_t n)
{
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        mc__log(MC__LOG_ERROR, "%s needs %s, which cannot be loaded: %s", what, soname, dlerror());
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(lib, syms[i].name);
        if (!f) {
            mc__log(MC__LOG_ERROR, "%s needs %s from %s, which does not have it", what,
                    syms[i].name, soname);
            dlclose(lib);
            return -1;
        }
        memcpy((char *)tab + syms[i].off, &f, sizeof(f));
    }
    return 0; /* never closed: its functions stay in use */
}

/* ---- libcurl ---- */

static const struct sym curl_syms[] = {
    CURL_SYM(global_init),         CURL_SYM(easy_init),        CURL_SYM(easy_cleanup),
    CURL_SYM(easy_setopt),         CURL_SYM(easy_getinfo),     CURL_SYM(multi_init),
    CURL_SYM(multi_cleanup),       CURL_SYM(multi_add_handle), CURL_SYM(multi_remove_handle),
    CURL_SYM(multi_assign),        CURL_SYM(multi_info_read),  CURL_SYM(multi_setopt),
    CURL_SYM(multi_socket_action), CURL_SYM(slist_append),     CURL_SYM(slist_free_all),
};
_Static_assert(sizeof(mc__curl_fns_t) == NSYMS(curl_syms) * sizeof(void *),
               "every member of mc__curl_fns_t is looked up");

static mc__curl_fns_t curl_fns;
static const mc__curl_fns_t *curl_ok;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_load(void)
{
    if (load("libcurl.so.4", "etcd", &curl_fns, curl_syms, NSYMS(curl_syms)) < 0)
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

static const struct sym mhd_syms[] = {
    MHD_SYM(start_daemon),        MHD_SYM(stop_daemon),
    MHD_SYM(quiesce_daemon),      MHD_SYM(create_response_from_buffer),
    MHD_SYM(add_response_header), MHD_SYM(queue_response),
    MHD_SYM(destroy_response),    MHD_SYM(get_connection_info),
};
_Static_assert(sizeof(mc__mhd_fns_t) == NSYMS(mhd_syms) * sizeof(void *),
               "every member of mc__mhd_fns_t is looked up");

static mc__mhd_fns_t mhd_fns;
static const mc__mhd_fns_t *mhd_ok;
static pthread_once_t mhd_once = PTHREAD_ONCE_INIT;

static void mhd_load(void)
{
    if (load("libmicrohttpd.so.12", "the metrics endpoint", &mhd_fns, mhd_syms, NSYMS(mhd_syms)) ==
        0)
        mhd_ok = &mhd_fns;
}

const mc__mhd_fns_t *mc__mhd(void)
{
    pthread_once(&mhd_once, mhd_load);
    return mhd_ok;
}
