/*
 * forkfd.h - the sockets a forked child must not keep.
 *
 * fork() gives the child a copy of every descriptor. The child of a
 * process with a store cannot use its connections (the loop's thread is
 * not forked), and holding them open would hide the parent's death from
 * its peers: a node would keep the fence slot of a mapping whose copy the
 * dead parent left marked (and with it the space of every write that ended
 * on that segment), a master a writer's connection, a listener its port.
 * So every connection's socket, every listening socket and every loop's
 * io_uring (whose requests in flight hold sockets too) is marked here
 * (the metrics server's listener and connections and etcd's connections
 * as well, through libmicrohttpd's and libcurl's callbacks), and
 * a child closes the marked ones right after fork() (pthread_atfork); the
 * rings' mappings (which hold the ring as well) and the segments mapped
 * from nodes are not inherited at all (MADV_DONTFORK).
 * Its copies of the store's structures are dead: it must not use them.
 */
#ifndef MC_FORKFD_H
#define MC_FORKFD_H

/* mc__fd_own() marks fd (a socket of ours) for closing in a forked child;
 * best effort: without memory it stays unmarked. mc__fd_disown() unmarks
 * it, before the caller closes it. Any thread. */
void mc__fd_own(int fd);
void mc__fd_disown(int fd);

/* How many fork()s this process's line has seen since the first
 * mc__fd_own(): a loop made before a fork, used after it, is a parent's
 * (its thread is not here). */
unsigned mc__fork_count(void);

#endif /* MC_FORKFD_H */
