/*
 * keys.c - the two helpers of the public API that every layer shares: the
 * key rule (mc_key_check()) and freeing a listing (mc_list_free()).
 *
 * They live in the lowest layer because the codec checks every key field
 * and frees half-decoded listings with them (wire/proto.c), the master
 * logic checks keys and builds listings (master/master.c), and the client
 * hands listings to callers (client/). Pure functions over memory, so the
 * wire layer still links alone (tests/fuzz/proto.link).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/mooncake.h"

int mc_key_check(const char *key, size_t klen)
{
    if (!key || klen == 0 || memchr(key, '\0', klen))
        return -EINVAL;
    if (klen > MC_KEY_MAX)
        return -ENAMETOOLONG;
    return 0;
}

void mc_list_free(mc_list_t *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free((char *)l->entries[i].key);
    free(l->entries);
    free(l);
}
