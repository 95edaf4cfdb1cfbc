/*
 * log.c - the stderr logger (see log.h).
 *
 * Each line is formatted into a stack buffer and written with one fwrite(),
 * which holds the stream's lock, so concurrent lines stay whole.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "mooncake/mooncake.h"
#include "runtime/log.h"

#define LINE_MAX_BYTES 1024

static char prog[64] = "mooncake"; /* written by mc__log_init() only, at startup */
static atomic_int max_level = MC__LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void mc__log_init(const char *name, int level)
{
    if (name && *name)
        snprintf(prog, sizeof(prog), "%s", name);
    mc__log_set_level(level);
}

void mc__log_set_level(int level)
{
    if (level < MC__LOG_ERROR)
        level = MC__LOG_ERROR;
    if (level > MC__LOG_DEBUG)
        level = MC__LOG_DEBUG;
    atomic_store(&max_level, level);
}

int mc__log_get_level(void)
{
    return atomic_load(&max_level);
}

int mc__log_parse_level(const char *s)
{
    if (!s)
        return -EINVAL;
    if (strcasecmp(s, "warning") == 0)
        return MC__LOG_WARN;
    for (int i = 0; i <= MC__LOG_DEBUG; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    return -EINVAL;
}

int mc_log_init(const char *program, const char *level)
{
    int lv = level ? mc__log_parse_level(level) : mc__log_get_level();
    if (lv < 0)
        return lv;
    mc__log_init(program, lv);
    return 0;
}

/* Rewrites every "error" (any case) in msg[0..*n) to "err", in place. */
static void defuse_error_word(char *msg, size_t *n)
{
    size_t r = 0, w = 0;
    while (r < *n) {
        if (*n - r >= 5 && strncasecmp(msg + r, "error", 5) == 0) {
            memmove(msg + w, msg + r, 3);
            w += 3;
            r += 5;
        } else {
            msg[w++] = msg[r++];
        }
    }
    *n = w;
}

void mc__log(int level, const char *fmt, ...)
{
    char line[LINE_MAX_BYTES + 2];
    va_list ap;

    if (level < MC__LOG_ERROR)
        level = MC__LOG_ERROR;
    if (level > MC__LOG_DEBUG || level > mc__log_get_level())
        return;
    int head = snprintf(line, sizeof(line), "%s: %s: ", prog, level_names[level]);
    if (head < 0 || (size_t)head >= LINE_MAX_BYTES)
        head = 0;
    va_start(ap, fmt);
    int body = vsnprintf(line + head, LINE_MAX_BYTES - (size_t)head, fmt, ap);
    va_end(ap);
    if (body < 0)
        body = 0;
    size_t n = (size_t)head + (size_t)body;
    if (n >= LINE_MAX_BYTES) { /* cut: mark it */
        n = LINE_MAX_BYTES - 1;
        memcpy(line + n - 3, "...", 3);
    }
    for (size_t i = (size_t)head; i < n; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    if (level != MC__LOG_ERROR) {
        size_t m = n - (size_t)head;
        defuse_error_word(line + head, &m);
        n = (size_t)head + m;
    }
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
}
