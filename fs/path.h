/*
 * path.h - how keys map to paths in the mount (docs/SEMANTICS.md).
 *
 * The root directory is the empty key prefix. A file at /a/b is the key
 * "a/b"; the directory /a/b is every key starting with "a/b/", plus the
 * explicit marker key "a/b/" that keeps it alive while empty.
 */
#ifndef FS_PATH_H
#define FS_PATH_H

#include <stddef.h>

/* Returns 0 if name can be one path component of the mount, -ENAMETOOLONG if
 * longer than NAME_MAX, -EINVAL for "", ".", "..", or a name holding '/'
 * or NUL. */
int fs_name_check(const char *name, size_t len);

/*
 * Writes parent_key + "/" + name (just name under the root, plen == 0) to
 * out, which holds at least MC_KEY_MAX + 1 bytes, NUL-terminated, and returns
 * its length. Keeps room for the directory marker's trailing '/'. Returns
 * -ENAMETOOLONG or -EINVAL as fs_name_check(), or -ENAMETOOLONG when the key
 * would pass MC_KEY_MAX - 1.
 */
int fs_key_join(const char *pkey, size_t plen, const char *name, char *out);

/*
 * Given a listing entry key under the directory prefix (plen bytes, "" or
 * ending in '/'), returns the length of the child name that starts at
 * key + plen (a trailing '/' of a folded sub-directory excluded), or -1 when
 * the entry cannot be shown in the mount: the directory's own marker, an
 * empty component, "." or "..", a name over NAME_MAX.
 */
int fs_child_name(const char *key, size_t klen, size_t plen);

#endif /* FS_PATH_H */
