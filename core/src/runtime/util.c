/*
 * util.c - small public helpers: naming result codes, parsing sizes, and
 * raising the descriptor limit.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "mooncake/mooncake.h"
#include "runtime/log.h"

const char *mc_strerror(int code)
{
    if (code >= 0)
        return "success";
    const char *d = strerrordesc_np(-code);
    return d ? d : "unknown error";
}

int mc_parse_size(const char *s, uint64_t *out)
{
    if (!s)
        return -EINVAL;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno)
        return -ERANGE;
    while (isspace((unsigned char)*end))
        end++;
    static const struct {
        const char *suffix;
        int shift;
    } units[] = {
        {"", 0},     {"b", 0},  {"k", 10},  {"kb", 10},  {"kib", 10}, {"m", 20},  {"mb", 20},
        {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30}, {"t", 40},   {"tb", 40}, {"tib", 40},
    };
    size_t len = strlen(end);
    while (len && isspace((unsigned char)end[len - 1]))
        len--;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strlen(units[i].suffix) == len && strncasecmp(end, units[i].suffix, len) == 0) {
            if (units[i].shift && n > (~0ULL >> units[i].shift))
                return -ERANGE;
            *out = (uint64_t)n << units[i].shift;
            return 0;
        }
    }
    return -EINVAL;
}

long mc_nofile_raise(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -errno;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            return -errno;
        mc__log(MC__LOG_DEBUG, "descriptor limit raised from %llu to %llu", (unsigned long long)was,
                (unsigned long long)rl.rlim_cur);
    }
    return rl.rlim_cur > LONG_MAX ? LONG_MAX : (long)rl.rlim_cur;
}
