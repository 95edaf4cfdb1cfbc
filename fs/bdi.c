/*
 * bdi.c - the kernel's readahead window for the files of the mount. FUSE
 * takes the smaller of max_readahead (ops.c: 1 MiB) and the window of the
 * mount's backing device, which starts at the kernel's default, 128 KiB:
 * with the page cache, a sequential reader then waits for one 128 KiB
 * request at a time. The window is the device's read_ahead_kb in sysfs
 * (/sys/class/bdi/MAJOR:MINOR, the mount's device number), which root may
 * raise; the mount's device number is read from /proc/self/mountinfo, not
 * by a stat() of the mount point, which this very daemon would have to
 * answer.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

/* The device number ("MAJ:MIN") of the last mount on path, into dev. */
static int mount_dev(const char *path, char *dev, size_t n)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof(line), f)) {
        char d[64], mnt[PATH_MAX];
        if (sscanf(line, "%*s %*s %63s %*s %4095s", d, mnt) != 2)
            continue;
        unescape(mnt);
        if (strcmp(mnt, path) == 0 && strlen(d) < n) {
            strcpy(dev, d); /* the last one is on top */
            found = 1;
        }
    }
    fclose(f);
    return found ? 0 : -1;
}

void fs_kernel_readahead(const char *mountpoint, unsigned kib)
{
    char dev[64], path[128], val[32];
    if (mount_dev(mountpoint, dev, sizeof(dev)) < 0)
        return;
    snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return; /* not root: the kernel's default stays */
    int len = snprintf(val, sizeof(val), "%u", kib);
    if (write(fd, val, (size_t)len) != len)
        fprintf(stderr, "mooncake-fs: info: %s: the kernel kept its readahead window\n", path);
    close(fd);
}
