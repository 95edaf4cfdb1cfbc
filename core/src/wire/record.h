/*
 * record.h - the record of a version that a node keeps: one struct, which the
 * codec (proto.c: mc__pack_rec_head(), mc__take_rec()) writes and reads and
 * the master (master.h: mc__master_record(), mc__master_merge()) fills and
 * merges. A plain type with no code, so that the master logic, which may
 * not use the codec, shares it.
 */
#ifndef MC_WIRE_RECORD_H
#define MC_WIRE_RECORD_H

#include <stdint.h>

/*
 * The record of a published version that a node keeps for each version with
 * a replica in its segment, and reports to a master that restarted (see
 * docs/PROTOCOL.md, "Records"). Its bytes:
 *   q version, q stamp (orders records of one version: the latest wins),
 *   k key, s link (a name entry: the inode key it names; else empty),
 *   q size, i mtime_ns, i atime_ns, i ctime_ns, u mode, u uid, u gid, u type,
 *   q rdev, u links, u pin, u want (replicas asked for), s xattrs (packed,
 *   as the master keeps them), u extent count, then per extent q offset,
 *   q length (the replica in the segment of the node that holds the record).
 * Decoded fields point into the input. The one record type of the project:
 * the master fills it from a version (mc__master_record(), which hands the
 * extents over apart, in host order) and merges it (mc__master_merge(),
 * the extents apart too); only the codec reads or writes ext. A link or
 * xattr list that is empty may be "" or NULL (NULL is packed as empty).
 */
typedef struct mc__rec {
    uint64_t version, stamp;
    const char *key;
    uint32_t klen;
    const char *link;
    uint32_t linklen;
    uint64_t size;
    int64_t mtime_ns, atime_ns, ctime_ns;
    uint32_t mode, uid, gid, type;
    uint64_t rdev;
    uint32_t links, pin, want;
    const char *xattr;
    uint32_t xattr_len;
    uint32_t next;            /* extents */
    const unsigned char *ext; /* decoded: next * 16 bytes, LE offset, length;
                                 NULL in a record the master filled */
} mc__rec_t;

#endif /* MC_WIRE_RECORD_H */
