/*
 * zc_check.c - the zero-copy API over RDMA, inside the test VM
 * (vm-cluster.sh): registers a 64 MiB buffer, puts 32 MiB from its first
 * half (2 replicas), gets it into the second half, compares, and checks
 * that the NIC moved every byte straight from and to the buffer: the
 * counters show rdma_zero_copy_bytes == rdma_bytes == 3 x 32 MiB, tcp 0.
 * A put from unregistered memory then goes through staging (zero copy
 * unchanged).
 *
 * Usage: zc_check MASTER RDMA_DEVICE [SECRET_FILE]. Exit 0 when every check
 * passed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mooncake/mooncake.h"

#define BUF (64u << 20)
#define HALF (BUF / 2)

static int fails;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            printf("ok   " __VA_ARGS__);                                                           \
        } else {                                                                                   \
            printf("FAIL " __VA_ARGS__);                                                           \
            fails++;                                                                               \
        }                                                                                          \
        printf("\n");                                                                              \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: zc_check MASTER RDMA_DEVICE [SECRET_FILE]\n");
        return 2;
    }
    mc_store_opts_t o;
    mc_store_opts_init(&o);
    o.master = argv[1];
    o.protocol = "rdma";
    o.rdma_devices = argv[2];
    o.secret_file = argc == 4 ? argv[3] : NULL;
    o.segment_size = 0;
    mc_store_t *s;
    int rc = mc_store_open(&s, &o);
    if (rc < 0) {
        printf("FAIL open: %s\n", mc_strerror(rc));
        return 1;
    }
    char *buf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        printf("FAIL mmap\n");
        return 1;
    }
    for (size_t i = 0; i < HALF; i++)
        buf[i] = (char)(i * 2654435761u >> 13);
    memset(buf + HALF, 0, HALF);

    rc = mc_register_buffer(s, buf, BUF);
    CHECK(rc == 0, "register 64 MiB: %s", mc_strerror(rc));
    rc = mc_register_buffer(s, buf + 4096, 4096);
    CHECK(rc == -EEXIST, "overlapping register: %s", mc_strerror(rc));

    mc_put_opts_t po = {.replica_num = 2};
    rc = mc_put(s, "zc", 2, buf, HALF, &po);
    CHECK(rc == 0, "put_from 32 MiB, 2 replicas: %s", mc_strerror(rc));
    rc = mc_get(s, "zc", 2, 0, buf + HALF, HALF, NULL);
    CHECK(rc == (int)HALF, "get_into 32 MiB: %d", rc);
    CHECK(memcmp(buf, buf + HALF, HALF) == 0, "bytes equal");

    mc_store_stats_t st;
    mc_store_stats(s, &st);
    CHECK(st.rdma_zero_copy_bytes == 3ull * HALF && st.rdma_bytes == 3ull * HALF &&
              st.tcp_bytes == 0 && st.shm_bytes == 0,
          "counters: rdma %llu zero_copy %llu (want %llu) tcp %llu shm %llu",
          (unsigned long long)st.rdma_bytes, (unsigned long long)st.rdma_zero_copy_bytes,
          3ull * HALF, (unsigned long long)st.tcp_bytes, (unsigned long long)st.shm_bytes);

    /* Unregistered memory goes through the staging slots. */
    char *plain = malloc(1 << 20);
    memcpy(plain, buf, 1 << 20);
    rc = mc_put(s, "plain", 5, plain, 1 << 20, NULL);
    mc_store_stats_t st2;
    mc_store_stats(s, &st2);
    CHECK(rc == 0 && st2.rdma_zero_copy_bytes == st.rdma_zero_copy_bytes &&
              st2.rdma_bytes == st.rdma_bytes + (1 << 20),
          "put from unregistered memory: staged (%s, zero_copy %llu)", mc_strerror(rc),
          (unsigned long long)st2.rdma_zero_copy_bytes);
    free(plain);

    rc = mc_unregister_buffer(s, buf);
    CHECK(rc == 0, "unregister: %s", mc_strerror(rc));
    mc_store_close(s);
    munmap(buf, BUF);
    printf("zero-copy check: %d failure(s)\n", fails);
    return fails ? 1 : 0;
}
