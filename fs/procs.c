/*
 * procs.c - which process a request comes from: the kernel names the
 * requesting thread, and a file's writer state records processes
 * (writers.c: a close publishes only from one that opened the file for
 * writing or wrote to it).
 *
 * A process's main thread has its process's id, and pidfd_open() takes
 * only those; any other thread's process is read from /proc/TID/status.
 * The main threads found are kept (FS_LEADERS of them, the oldest going
 * first), each with its pidfd open and polled on the loop: the pidfd turns
 * readable when the process has exited, and the entry goes then, before its
 * id can be reused (that takes the process reaped and the kernel's ids
 * gone round). So a process making many files pays the pidfd_open() and
 * its close() once, not per file.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fs.h"
#include "fs_i.h"

/* Forgets entry e (its process exited, or it makes room). */
static void leader_drop(struct fs_leader *e)
{
    mc_poll_stop(&e->poll);
    close(e->pidfd);
    e->pid = 0;
}

static void leader_gone(mc_poll_t *p, int revents)
{
    (void)revents; /* exited, or the poll failed: either way not kept */
    leader_drop(p->data);
}

/* Keeps pid, a main thread, with its pidfd pfd (taken: closed on failure). */
static void leader_keep(fs_t *fs, pid_t pid, int pfd)
{
    struct fs_leader *e = &fs->leaders[fs->leader_next];
    fs->leader_next = (fs->leader_next + 1) % FS_LEADERS;
    if (e->pid)
        leader_drop(e);
    e->poll.data = e;
    if (mc_poll_once(fs->loop, &e->poll, pfd, POLLIN, leader_gone) < 0) {
        close(pfd);
        return;
    }
    e->pid = pid;
    e->pidfd = pfd;
}

pid_t fs_proc_of(fs_t *fs, pid_t tid)
{
    for (int i = 0; i < FS_LEADERS; i++)
        if (fs->leaders[i].pid == tid)
            return tid;
    int pfd = (int)syscall(SYS_pidfd_open, tid, 0);
    if (pfd >= 0) {
        leader_keep(fs, tid, pfd);
        return tid;
    }
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tid;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return tid;
    buf[n] = '\0';
    const char *t = strstr(buf, "\nTgid:");
    return t ? (pid_t)atoi(t + 7) : tid;
}

void fs_procs_close(fs_t *fs)
{
    for (int i = 0; i < FS_LEADERS; i++)
        if (fs->leaders[i].pid) {
            close(fs->leaders[i].pidfd);
            fs->leaders[i].pid = 0;
        }
}
