/*
 * path.c - key <-> path mapping rules for the mount (see path.h).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "mooncake/mooncake.h"
#include "path.h"

int fs_name_check(const char *name, size_t len)
{
    if (len == 0 || memchr(name, '/', len) || memchr(name, '\0', len))
        return -EINVAL;
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return -EINVAL;
    if (len > NAME_MAX)
        return -ENAMETOOLONG;
    return 0;
}

int fs_key_join(const char *pkey, size_t plen, const char *name, char *out)
{
    size_t nlen = strlen(name);
    int rc = fs_name_check(name, nlen);
    if (rc < 0)
        return rc;
    size_t len = plen + (plen ? 1 : 0) + nlen;
    if (len > MC_KEY_MAX - 1)
        return -ENAMETOOLONG;
    size_t at = 0;
    if (plen) {
        memcpy(out, pkey, plen);
        out[plen] = '/';
        at = plen + 1;
    }
    memcpy(out + at, name, nlen);
    out[len] = '\0';
    return (int)len;
}

int fs_child_name(const char *key, size_t klen, size_t plen)
{
    if (klen <= plen)
        return -1; /* the directory's own marker */
    size_t n = klen - plen;
    if (key[klen - 1] == '/')
        n--;
    if (fs_name_check(key + plen, n) < 0)
        return -1;
    return (int)n;
}
