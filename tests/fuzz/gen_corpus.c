/*
 * gen_corpus.c - writes the seed corpus of tests/fuzz/fuzz_proto.c: valid
 * frames and bodies built with the codec itself (core/src/wire/proto.c).
 *
 * Usage: gen_corpus DIR. Two kinds of seeds, matching the target's two
 * readings of an input:
 *   frame-OP-req|resp|err  one or more whole frames (header + body)
 *   body-OP-req|resp       a selector byte ((table index << 1) | response)
 *                          followed by a body (for the formats with keys
 *                          and nested structures)
 *   body-all-chars         the target's extra format, one past the table
 * The output is deterministic, so regenerating changes nothing unless the
 * protocol did. Build and run:
 *   cc -std=gnu11 -D_GNU_SOURCE -Icore/include -Icore/src -o /tmp/gen_corpus \
 *      tests/fuzz/gen_corpus.c core/src/wire/proto.c core/src/wire/fields.c \
 *      core/src/wire/keys.c && /tmp/gen_corpus tests/fuzz/corpus/proto
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/proto.h"

static const char *dir;

static const uint16_t codes[] = {
#define T_CODE(name, code, req, resp) code,
    MC__PROTO_OPS(T_CODE)
#undef T_CODE
};

static void die(const char *what)
{
    fprintf(stderr, "gen_corpus: %s\n", what);
    exit(1);
}

static void write_file(const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f))
        die(path);
}

/* Appends a frame (header + body) to out. */
static void frame(mc__wbuf_t *out, uint16_t op, int response, int16_t status, uint64_t id,
                  const mc__wbuf_t *body)
{
    mc__hdr_t h = {.magic = MC__PROTO_MAGIC,
                   .version = MC__PROTO_VERSION,
                   .op = op,
                   .id = id,
                   .len = (uint32_t)body->len,
                   .flags = response ? MC__F_RESPONSE : 0,
                   .status = status};
    unsigned char hdr[MC__PROTO_HDR_SIZE];
    mc__hdr_encode(hdr, &h);
    mc__pack(out, "*", hdr, (uint32_t)sizeof(hdr));
    mc__pack(out, "*", body->p, (uint32_t)body->len);
}

/* Writes body as frame-NAME and, when sel is set, as body-NAME (selector
 * byte + body), then empties body for the next seed. */
static void seed(const char *name, uint16_t op, int response, int16_t status, mc__wbuf_t *body,
                 int sel)
{
    char file[128];
    mc__wbuf_t out = {0};

    if (body->err)
        die(name);
    frame(&out, op, response, status, 1000 + op, body);
    snprintf(file, sizeof(file), "frame-%s", name);
    write_file(file, out.p, out.len);
    free(out.p);

    if (sel) {
        size_t idx = 0;
        while (codes[idx] != op)
            idx++;
        memset(&out, 0, sizeof(out));
        mc__pack(&out, "b*", (unsigned)(idx << 1 | (response ? 1 : 0)), body->p,
                 (uint32_t)body->len);
        snprintf(file, sizeof(file), "body-%s", name);
        write_file(file, out.p, out.len);
        free(out.p);
    }
    free(body->p);
    memset(body, 0, sizeof(*body));
}

#define S(lit) lit, (uint32_t)(sizeof(lit) - 1)

static const mc_stat_t st = {.size = 1048576,
                             .version = 42,
                             .mtime_ns = 1700000000123456789ll,
                             .mode = 0644,
                             .replicas = 2,
                             .flags = MC_STAT_LEASED,
                             .uid = 1000,
                             .gid = 100,
                             .nlink = 1,
                             .atime_ns = 1700000000000000000ll,
                             .ctime_ns = 1700000000123456789ll};

static void replicas(mc__wbuf_t *w)
{
    mc__pack(w, "u", 2u);
    mc__pack(w, "uqssu", 3u, (uint64_t)1796050401994252ull, S("10.0.0.2:7100"),
             S("MCRR opaque: 10.0.0.2:4791"), 2u);
    mc__pack(w, "qqqq", (uint64_t)0, (uint64_t)524288, (uint64_t)1048576, (uint64_t)524288);
    mc__pack(w, "uqssu", 7u, (uint64_t)9, S("shm:node-7"), S(""), 1u);
    mc__pack(w, "qq", (uint64_t)4096, (uint64_t)1048576);
}

int main(int argc, char **argv)
{
    mc__wbuf_t b = {0};
    unsigned char mac[32], nonce[32];

    if (argc != 2)
        die("usage: gen_corpus DIR");
    dir = argv[1];
    for (int i = 0; i < 32; i++) {
        mac[i] = (unsigned char)(i * 37 + 11);
        nonce[i] = (unsigned char)(i * 53 + 7);
    }

    mc__pack(&b, "hhuss", (unsigned)MC__PROTO_SESSION, (unsigned)MC__PROTO_SESSION,
             (unsigned)MC__ROLE_CLIENT, S("mooncake-fs/1234"), nonce, (uint32_t)sizeof(nonce));
    seed("hello-req", MC__OP_HELLO, 0, 0, &b, 1);
    mc__pack(&b, "huss", 1u, 1u, nonce, (uint32_t)sizeof(nonce), mac, (uint32_t)sizeof(mac));
    seed("hello-resp", MC__OP_HELLO, 1, 0, &b, 1);
    mc__pack(&b, "s", mac, (uint32_t)sizeof(mac));
    seed("auth-req", MC__OP_AUTH, 0, 0, &b, 0);
    seed("auth-err", MC__OP_AUTH, 1, -EACCES, &b, 0);
    mc__pack(&b, "q", (uint64_t)1700000000123ull);
    seed("ping-resp", MC__OP_PING, 1, 0, &b, 0);
    mc__pack(&b, "qusqsuq", (uint64_t)0x1122334455667788ull, 0u, S("127.0.0.1:7100"),
             (uint64_t)1 << 30, S("MCRR opaque: 127.0.0.1:4791"), (unsigned)MC__MOUNT_REPORT,
             (uint64_t)1796050401994252ull);
    seed("mount_segment-req", MC__OP_MOUNT_SEGMENT, 0, 0, &b, 0);
    mc__pack(&b, "uqq", 3u, (uint64_t)0x1234567890abcdefull, (uint64_t)1796050401994253ull);
    seed("mount_segment-resp", MC__OP_MOUNT_SEGMENT, 1, 0, &b, 0);
    mc__pack(&b, "ququ", (uint64_t)0x1122334455667788ull, 3u, (uint64_t)1796050401994252ull,
             (unsigned)MC__MOUNT_CHECKED);
    seed("heartbeat-req", MC__OP_HEARTBEAT, 0, 0, &b, 0);
    mc__pack(&b, "uq", (unsigned)MC__HB_REMOUNT, (uint64_t)0);
    seed("heartbeat-resp", MC__OP_HEARTBEAT, 1, 0, &b, 0);
    {
        static const char xattr[] = {4, 'u', 's', 'e', 'r', 2, 0, 0, 0, 'h', 'i'};
        mc__rec_t r = {.version = 1796050401994252ull,
                       .stamp = 1796050401994300ull,
                       .key = "a/b",
                       .klen = 3,
                       .link = "",
                       .size = 100,
                       .mtime_ns = 1700000000123456789ll,
                       .atime_ns = 1700000000000000000ll,
                       .ctime_ns = 1700000000123456789ll,
                       .mode = 0644,
                       .uid = 1000,
                       .gid = 100,
                       .want = 2,
                       .xattr = xattr,
                       .xattr_len = sizeof(xattr),
                       .next = 2};
        mc__wbuf_t rec = {0}, note = {0};
        mc__pack_rec_head(&rec, &r);
        mc__pack_extent(&rec, 4096, 64);
        mc__pack_extent(&rec, 65536, 64);
        mc__pack(&b, "quu", (uint64_t)0x1122334455667788ull, 3u, 1u);
        mc__pack(&b, "s", rec.p, (uint32_t)rec.len);
        seed("records_report-req", MC__OP_RECORDS_REPORT, 0, 0, &b, 1);
        mc__pack(&note, "bqs", (unsigned)MC__NOTE_PUT, r.version, rec.p, (uint32_t)rec.len);
        mc__pack(&b, "s", note.p, (uint32_t)note.len);
        note.len = 0;
        mc__pack(&note, "bq", (unsigned)MC__NOTE_DROP, (uint64_t)77);
        mc__pack(&b, "s", note.p, (uint32_t)note.len);
        seed("records_take-resp", MC__OP_RECORDS_TAKE, 1, 0, &b, 1);
        mc__pack(&b, "quq", (uint64_t)0x1122334455667788ull, 3u, (uint64_t)4096);
        seed("records_take-req", MC__OP_RECORDS_TAKE, 0, 0, &b, 0);
        free(rec.p);
        free(note.p);
    }
    mc__pack(&b, "uq", (unsigned)MC__HB_REPAIR, (uint64_t)1796050401994253ull);
    seed("heartbeat-repair-resp", MC__OP_HEARTBEAT, 1, 0, &b, 0);
    mc__pack(&b, "q", (uint64_t)0x1122334455667788ull);
    seed("repair_take-req", MC__OP_REPAIR_TAKE, 0, 0, &b, 0);
    { /* one task: id, limit, bytes, the target (one replica), the sources */
        mc__wbuf_t t = {0};
        mc__pack(&t, "qqqu", (uint64_t)7, (uint64_t)10000, (uint64_t)1000000, 1u);
        mc__pack(&t, "uqssuqq", 4u, (uint64_t)5, S(""), S(""), 1u, (uint64_t)0, (uint64_t)1000000);
        replicas(&t);
        mc__pack(&b, "s", t.p, (uint32_t)t.len);
        free(t.p);
    }
    seed("repair_take-resp", MC__OP_REPAIR_TAKE, 1, 0, &b, 1);
    mc__pack(&b, "qqi", (uint64_t)0x1122334455667788ull, (uint64_t)7, (int64_t)-EIO);
    seed("repair_done-req", MC__OP_REPAIR_DONE, 0, 0, &b, 0);
    mc__pack(&b, "qu", (uint64_t)99, 3u);
    seed("put_drop_replica-req", MC__OP_PUT_DROP_REPLICA, 0, 0, &b, 0);
    mc__pack(&b, "sqsq", S("repair_done"), (uint64_t)3, S("repair_bytes"), (uint64_t)3 << 20);
    seed("stats-resp", MC__OP_STATS, 1, 0, &b, 1);
    mc__pack(&b, "kquuuuqisuuuq", S("dir/file.bin"), (uint64_t)1048576,
             (unsigned)(MC_PUT_NOREPLACE | MC_PUT_OWNER | MC_PUT_MODE), 0644u, 2u,
             (unsigned)MC_PIN_SOFT, (uint64_t)60000, (int64_t)0, S("127.0.0.1:7101"), 1000u, 100u,
             (unsigned)MC_TYPE_FILE, (uint64_t)0);
    seed("put_start-req", MC__OP_PUT_START, 0, 0, &b, 1);
    mc__pack(&b, "q", (uint64_t)99);
    replicas(&b);
    seed("put_start-resp", MC__OP_PUT_START, 1, 0, &b, 1);
    mc__pack(&b, "qq", (uint64_t)99, (uint64_t)100);
    seed("put_renew-req", MC__OP_PUT_RENEW, 0, 0, &b, 0);
    mc__pack(&b, "i", (int64_t)0);
    replicas(&b);
    mc__pack(&b, "i", (int64_t)-ENOENT);
    seed("put_renew-resp", MC__OP_PUT_RENEW, 1, 0, &b, 1);
    mc__pack(&b, "qkquui", (uint64_t)99, S("dir/file.bin"), (uint64_t)1000000,
             (unsigned)MC_META_MODE, 0600u, (int64_t)-1);
    seed("put_commit-req", MC__OP_PUT_COMMIT, 0, 0, &b, 1);
    mc__pack_stat(&b, &st);
    seed("put_commit-resp", MC__OP_PUT_COMMIT, 1, 0, &b, 0);
    mc__pack(&b, "q", (uint64_t)5000);
    mc__pack_stat(&b, &st);
    replicas(&b);
    seed("get_replicas-resp", MC__OP_GET_REPLICAS, 1, 0, &b, 1);
    mc__pack_stat(&b, &st);
    seed("lookup-resp", MC__OP_LOOKUP, 1, MC_LOOKUP_DIR, &b, 0);
    mc__pack(&b, "kku", S("a/"), S("b/"), (unsigned)MC_RENAME_PREFIX);
    seed("rename-req", MC__OP_RENAME, 0, 0, &b, 1);
    mc__pack(&b, "ssuu", S("dir/"), S("dir/a"), (unsigned)'/', 100u);
    seed("list-req", MC__OP_LIST, 0, 0, &b, 0);

    mc_list_entry_t e[3] = {
        {.key = "dir/b", .klen = 5, .st = st},
        {.key = "dir/c/", .klen = 6, .is_prefix = 1},
        {.key = "dir/d", .klen = 5, .st = st},
    };
    mc_list_t l = {.n = 3, .entries = e, .more = 1, .next = "dir/d", .next_len = 5};
    mc__pack_list(&b, &l);
    seed("list-resp", MC__OP_LIST, 1, 0, &b, 1);

    mc__pack(&b, "kuuuuii", S("dir/file.bin"),
             (unsigned)(MC_META_MODE | MC_META_UID | MC_META_ATIME | MC_META_MTIME), 0755u, 1000u,
             0u, (int64_t)1600000000000000000ll, (int64_t)1700000000000000000ll);
    seed("set_meta-req", MC__OP_SET_META, 0, 0, &b, 0);
    mc__pack_stat(&b, &st);
    seed("set_meta-resp", MC__OP_SET_META, 1, 0, &b, 0);
    mc__pack(&b, "ksu*", S("dir/file.bin"), S("user.color"), (unsigned)MC_XATTR_CREATE, S("blue"));
    seed("xattr_set-req", MC__OP_XATTR_SET, 0, 0, &b, 1);
    mc__pack(&b, "ks", S("dir/file.bin"), S("user.color"));
    seed("xattr_get-req", MC__OP_XATTR_GET, 0, 0, &b, 0);
    mc__pack(&b, "*", S("blue"));
    seed("xattr_get-resp", MC__OP_XATTR_GET, 1, 0, &b, 1);
    mc__pack(&b, "*", "user.a\0user.color", (uint32_t)18);
    seed("xattr_list-resp", MC__OP_XATTR_LIST, 1, 0, &b, 1);
    seed("xattr_get-err", MC__OP_XATTR_GET, 1, -ENODATA, &b, 0);
    mc__pack(&b, "qqqq", (uint64_t)1 << 30, (uint64_t)1 << 20, (uint64_t)12, (uint64_t)3);
    seed("statfs-resp", MC__OP_STATFS, 1, 0, &b, 0);
    mc__pack(&b, "uqqu", 3u, (uint64_t)7, (uint64_t)524288, 4096u);
    seed("read-req", MC__OP_READ, 0, 0, &b, 0);
    mc__pack(&b, "uqq*", 3u, (uint64_t)1796050401994252ull, (uint64_t)0, S("hello, segment"));
    seed("write-req", MC__OP_WRITE, 0, 0, &b, 1);
    mc__pack(&b, "qu", (uint64_t)42, 3u);
    seed("put_epoch-req", MC__OP_PUT_EPOCH, 0, 0, &b, 0);
    mc__pack(&b, "q", (uint64_t)1796050401994253ull);
    seed("put_epoch-resp", MC__OP_PUT_EPOCH, 1, 0, &b, 0);
    seed("stat-err", MC__OP_STAT, 1, -ENOENT, &b, 0);

    /* The target's extra format, one past the table: "bhuqisk*". */
    mc__wbuf_t all = {0};
    size_t nops = sizeof(codes) / sizeof(codes[0]);
    mc__pack(&all, "bbhuqisk*", (unsigned)(nops << 1), 0xa5u, 0xbeefu, 0xdeadbeefu,
             (uint64_t)1 << 63, (int64_t)-1, S("bytes"), S("a/key"), S("rest"));
    write_file("body-all-chars", all.p, all.len);
    free(all.p);

    /* Two frames in one input, as they arrive on a connection. */
    mc__wbuf_t two = {0}, empty = {0};
    mc__pack(&b, "q", (uint64_t)5);
    frame(&two, MC__OP_PING, 0, 0, 1, &empty);
    frame(&two, MC__OP_PING, 1, 0, 1, &b);
    write_file("frame-ping-req-resp", two.p, two.len);
    free(two.p);
    free(b.p);
    return 0;
}
