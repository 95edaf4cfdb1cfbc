"""fsx-style: a seeded random sequence of file operations (write, pwrite
past the end, truncate up and down, fallocate, writes and reads through a
shared mapping, reads through a second descriptor, close and reopen) run on
a file of the mount and on a file of the test's own temporary directory,
side by side: with the page cache (--cache-mode pages) one process sees its
file on the mount exactly as on a local file system, so every read must
match the local file byte for byte."""

import errno
import mmap
import os
import random

import pytest

from test_space import FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, fallocate

MAX = 300_000  # file sizes stay below this


class Pair:
    """The same file twice: on the mount (m) and local (l)."""

    def __init__(self, mpath, lpath):
        self.paths = (mpath, lpath)
        self.fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o644) for p in self.paths]
        self.rfds = [os.open(p, os.O_RDONLY) for p in self.paths]

    def both(self, f):
        return [f(fd) for fd in self.fds]

    def size(self):
        sizes = self.both(lambda fd: os.fstat(fd).st_size)
        assert sizes[0] == sizes[1], f"sizes differ: mount {sizes[0]}, local {sizes[1]}"
        return sizes[0]

    def reopen(self):
        for fd in self.fds + self.rfds:
            os.close(fd)
        self.fds = [os.open(p, os.O_RDWR) for p in self.paths]
        self.rfds = [os.open(p, os.O_RDONLY) for p in self.paths]

    def close(self):
        for fd in self.fds + self.rfds:
            os.close(fd)


def check_read(pair, fds, off, n, what):
    got = [os.pread(fd, n, off) for fd in fds]
    if got[0] != got[1]:
        at = next((i for i, (a, b) in enumerate(zip(*got)) if a != b), min(map(len, got)))
        raise AssertionError(f"{what}: pread({n}, {off}) differs at +{at}: mount "
                             f"{len(got[0])} bytes, local {len(got[1])}")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_operations_match_a_local_file(store_mount, tmp_path, seed):
    m = store_mount("64M")
    rng = random.Random(seed)
    pair = Pair(m.p("fsx"), str(tmp_path / "fsx"))
    log = []
    try:
        for step in range(600):
            size = pair.size()
            op = rng.choice(["write", "write", "append", "truncate", "falloc", "mmap",
                             "read", "read2", "reopen"])
            off = rng.randrange(0, max(size, 1) + 4096)
            n = rng.randrange(1, 20_000)
            log.append((step, op, off, n, size))
            if op == "write" and off + n < MAX:
                data = rng.randbytes(n)
                pair.both(lambda fd: os.pwrite(fd, data, off))
            elif op == "append":
                data = rng.randbytes(n)
                pair.both(lambda fd: os.pwrite(fd, data, size))
            elif op == "truncate":
                new = rng.randrange(0, MAX)
                pair.both(lambda fd: os.ftruncate(fd, new))
            elif op == "falloc" and off + n < MAX:
                mode = rng.choice([0, FALLOC_FL_KEEP_SIZE,
                                   FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                   FALLOC_FL_ZERO_RANGE])
                try:
                    pair.both(lambda fd: fallocate(fd, mode, off, n))
                except OSError as e:
                    if e.errno != errno.EOPNOTSUPP:  # tmp_path's file system may not
                        raise
            elif op == "mmap" and size:
                a = rng.randrange(0, size)
                data = rng.randbytes(min(n, size - a))
                for fd in pair.fds:
                    with mmap.mmap(fd, size, mmap.MAP_SHARED) as mm:
                        mm[a:a + len(data)] = data
                        if rng.random() < 0.5:
                            mm.flush()
            elif op == "read":
                check_read(pair, pair.fds, off, n, f"step {step}")
            elif op == "read2":
                check_read(pair, pair.rfds, off, n, f"step {step}, a second descriptor")
            elif op == "reopen":
                pair.reopen()
        size = pair.size()
        check_read(pair, pair.fds, 0, size + 1, "at the end")
        pair.close()
        with open(m.p("fsx"), "rb") as a, open(tmp_path / "fsx", "rb") as b:
            assert a.read() == b.read(), "the published file differs"
    except BaseException:
        print("last steps:", log[-10:])
        raise
