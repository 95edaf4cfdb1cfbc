"""Concurrent users: writers and readers on different files, and readers of
a file while it is replaced."""

import ctypes
import errno
import hashlib
import os
import platform
import random
import signal
import subprocess
import threading
import time

import pytest

from harness import cli, free_port, wait_for


def test_8_writers_and_readers(mnt):
    errors = []

    def worker(n):
        try:
            data = os.urandom(1 << 20) * 4 + bytes([n]) * 1000
            p = mnt.p(f"w{n}")
            for round_ in range(3):
                with open(p, "wb") as f:
                    for off in range(0, len(data), 65536):
                        f.write(data[off:off + 65536])
                with open(p, "rb") as f:
                    if f.read() != data:
                        errors.append(f"worker {n} round {round_}: content differs")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"worker {n}: {e!r}")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("cache", ["direct", "pages"])
def test_readers_see_old_or_new_never_a_mix(store_mount, cache):
    """A file is overwritten in place (O_TRUNC) and by rename while readers
    read it whole: every read is exactly one of the published contents.
    With --cache-mode direct that holds for readers on the same mount, each
    open reading one version; with the page cache (one content per file in
    a mount, as on a local file system) it holds for readers on the mount
    when the file is replaced by rename, and for other clients of the store
    (mooncake-cli) whichever way it is written."""
    mnt = store_mount("512M", "--cache-mode", cache)
    size = 3 << 20
    versions = [bytes([v]) * size for v in range(1, 6)]
    digests = {hashlib.sha256(v).hexdigest() for v in versions}
    p = mnt.p("hot")
    with open(p, "wb") as f:
        f.write(versions[0])
    stop = threading.Event()
    bad = []
    reads = [0]
    in_place = cache == "direct"  # are readers on the mount shown O_TRUNC rounds?

    def check(h, who):
        reads[0] += 1
        if h not in digests:
            bad.append(f"mixed or partial content read by {who}: {h}")

    def reader():
        while not stop.is_set():
            # A fresh process each time.
            before = writing[0]
            out = subprocess.run(["sha256sum", p], capture_output=True, text=True)
            if out.returncode != 0 and "Stale file handle" in out.stderr:
                continue  # both readers raced one replacement, then another (SEMANTICS, rename)
            if out.returncode != 0:
                bad.append(out.stderr)
                continue
            # With the page cache, only reads that overlapped no O_TRUNC write.
            if in_place or (before == writing[0] and before % 2 == 0):
                check(out.stdout.split()[0], "a reader on the mount")

    def other_client():
        while not stop.is_set():
            out = cli(mnt.store_addr, "get", "hot")
            if out.returncode != 0:
                bad.append(out.stderr)
                continue
            check(hashlib.sha256(out.stdout).hexdigest(), "another client")

    writing = [0]  # odd while an O_TRUNC write is in progress
    readers = [threading.Thread(target=reader) for _ in range(2)]
    readers.append(threading.Thread(target=other_client))
    for t in readers:
        t.start()
    try:
        round_ = 0
        # Until the readers have read it often enough (bounded in time).
        deadline = time.time() + 60
        while (round_ < 6 or reads[0] < 40) and time.time() < deadline:
            round_ += 1
            for v in versions[1:]:
                if round_ % 2:
                    writing[0] += 1
                    with open(p, "wb") as f:  # O_TRUNC, written in chunks
                        for off in range(0, size, 1 << 18):
                            f.write(v[off:off + (1 << 18)])
                    writing[0] += 1
                else:
                    tmp = mnt.p(".hot.tmp")
                    with open(tmp, "wb") as f:
                        f.write(v)
                    os.rename(tmp, p)
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert reads[0] >= 40
    assert not bad, bad[:5]


@pytest.mark.parametrize("cache", ["direct", "pages"])
def test_open_that_raced_a_rename_reads_the_file_it_found(store_mount, cache):
    """An open whose path was looked up before a rename through the mount
    replaced the file reads the file it found, as on a local file system,
    and does not fail with ESTALE (the kernel retries a stale open only once:
    a path replaced twice in that window failed the open). The race made
    certain: a descriptor opened with O_PATH before the rename is opened
    again through /proc, which the kernel does without looking the path up.
    The path itself names the new file."""
    mnt = store_mount("64M", "--cache-mode", cache)
    p, tmp = mnt.p("f"), mnt.p(".f.tmp")
    with open(p, "wb") as f:
        f.write(b"the old file")
    fd = os.open(p, os.O_PATH)
    try:
        with open(tmp, "wb") as f:
            f.write(b"the new one")
        os.rename(tmp, p)
        with open(f"/proc/self/fd/{fd}", "rb") as f:
            assert f.read() == b"the old file"
        with open(p, "rb") as f:
            assert f.read() == b"the new one"
    finally:
        os.close(fd)


def test_more_writing_processes_than_the_daemon_keeps_each_publish(mnt):
    """The daemon keeps the processes it has seen (fs/procs.c, 8 of them)
    to tell who may publish a close: twelve processes, each with a file of
    its own open for writing at once, close in the reverse order, and a
    forked child of each closes what it inherited first; every file is
    published by its own process's close, none by a child's."""
    n = 12
    ready_r, ready_w = os.pipe()
    go = [os.pipe() for _ in range(n)]
    kids = []
    for i in range(n):
        pid = os.fork()
        if pid == 0:  # a writer: open, write, wait for its turn, close
            status = 1
            try:
                fd = os.open(mnt.p(f"p{i}"), os.O_CREAT | os.O_WRONLY, 0o644)
                os.write(fd, b"from %d" % i)
                child = os.fork()
                if child == 0:
                    os.close(fd)
                    os._exit(0)
                os.waitpid(child, 0)
                os.write(ready_w, b"r")
                if os.read(go[i][0], 1) == b"g":
                    os.close(fd)
                    status = 0
            finally:
                os._exit(status)
        kids.append(pid)
    for _ in range(n):
        assert os.read(ready_r, 1) == b"r"
    for i in range(n):  # a child's close published nothing
        assert cli(mnt.store_addr, "get", f"p{i}").stdout == b""
    for i in reversed(range(n)):
        os.write(go[i][1], b"g")
        assert os.waitpid(kids[i], 0)[1] == 0
        assert cli(mnt.store_addr, "get", f"p{i}").stdout == b"from %d" % i
    for fd in [ready_r, ready_w] + [f for pair in go for f in pair]:
        os.close(fd)


def test_who_publishes_a_close(mnt):
    """The close of a descriptor publishes only for a process that opened
    the file for writing or wrote to it (SEMANTICS, "Who publishes"): a
    forked child closing what it inherited publishes nothing, a thread of
    the writing process does; other clients see the file only then."""
    p = mnt.p("f")
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"half")
    child = os.fork()
    if child == 0:  # the child: close what it inherited, and go
        os.close(fd)
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    assert cli(mnt.store_addr, "get", "f").stdout == b""  # not published
    done = []

    def close_in_thread():
        os.write(fd, b" and the rest")
        os.close(fd)
        done.append(1)

    t = threading.Thread(target=close_in_thread)
    t.start()
    t.join()
    assert done == [1]
    assert cli(mnt.store_addr, "get", "f").stdout == b"half and the rest"


def test_open_creat_racing_unlink_and_rename_never_fails(mnt):
    """open(O_CREAT | O_TRUNC) of a name that other threads unlink and
    rename over at the same time opens the file that is there or makes a
    new one, as on a local file system: never ENOENT (the file the kernel
    had looked up went between its lookup and its open) nor another error,
    and its write and close succeed (the writes of a file unlinked or
    renamed over meanwhile are dropped at its last close, which answers
    0).
    The one exception SEMANTICS allows: ESTALE, when the kernel's second
    look at the path races again (under load, now and then)."""
    names = [mnt.p(f"r{i}") for i in range(4)]
    stop = time.time() + 8
    bad, stale, opens = [], [0], [0]

    def opener(seed):
        r = random.Random(seed)
        while time.time() < stop and len(bad) < 5:
            p = r.choice(names)
            try:
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as e:
                if e.errno == errno.ESTALE:
                    stale[0] += 1
                else:
                    bad.append(f"open({p}, O_CREAT): {errno.errorcode[e.errno]}")
                continue
            opens[0] += 1
            try:
                data = os.urandom(r.randrange(0, 200_000))
                if os.write(fd, data) != len(data):
                    bad.append(f"write({p}): short")
            except OSError as e:
                bad.append(f"write({p}): {errno.errorcode[e.errno]}")
            finally:
                try:
                    os.close(fd)
                except OSError as e:
                    bad.append(f"close({p}): {errno.errorcode[e.errno]}")

    def remover(seed):
        r = random.Random(seed)
        while time.time() < stop and len(bad) < 5:
            try:
                if r.random() < 0.5:
                    os.unlink(r.choice(names))
                else:
                    os.rename(r.choice(names), r.choice(names))
            except FileNotFoundError:
                pass

    threads = [threading.Thread(target=opener, args=(i,)) for i in range(4)] + \
        [threading.Thread(target=remover, args=(10 + i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, f"{bad} ({opens[0]} opens, {stale[0]} ESTALE)"
    assert opens[0] > stale[0] and opens[0] >= 20, f"{opens[0]} opens, {stale[0]} ESTALE"


def test_open_creat_of_a_name_removed_elsewhere_under_a_cached_entry_creates_it(store_mount):
    """The deterministic form of the race above: the kernel holds the
    name's entry (--cache-timeout 30) but not the file's attributes (a
    sparse file's publish drops them), and another client removes the
    file. open(O_CREAT | O_TRUNC) then finds the cached entry, asks for the
    attributes to check permissions (GETATTR), and the daemon's stat of the
    name finds nothing: that must make the kernel look the name up again
    (ESTALE), so that the open creates the file, not fail with ENOENT."""
    m = store_mount("64M", "--cache-timeout", "30")
    p = m.p("f")
    with open(p, "wb") as f:
        f.truncate(1 << 20)  # a hole: its publish drops the kernel's attributes
    assert cli(m.store_addr, "rm", "f").returncode == 0
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        assert os.write(fd, b"new") == 3
    finally:
        os.close(fd)
    assert cli(m.store_addr, "get", "f").stdout == b"new"


def _a_reader_and_a_writer(cluster):
    """A cluster mount (its metrics on a port of its own) and a file f of
    1 MiB of "A" open twice: (master, metrics port, path, size, a read-only
    descriptor, a read-write one); the mount is cluster.last_mount."""
    port = free_port()
    master = cluster.master()
    cluster.node(master, "256M")
    m = cluster.last_mount = cluster.mount("--master", master.addr, "--segment-size", "0",
                                           "--metrics", str(port))
    p = m.p("f")
    size = 1 << 20
    with open(p, "wb") as f:
        f.write(b"A" * size)
    return master, port, p, size, os.open(p, os.O_RDONLY), os.open(p, os.O_RDWR)


def _with_the_master_paused(master, port, steps):
    """Pauses master and runs each step (call, its argument, the FUSE
    opcode it sends) in a thread of its own, in turn, each once the daemon
    has received the request of the one before; then resumes the master
    and waits for the threads. What the steps sent to the master reaches it
    in the order the daemon sent it."""
    from test_metrics import fuse_requests
    before = [fuse_requests(port, op) for _, _, op in steps]
    threads = []
    master.pause()
    try:
        for (call, arg, op), n in zip(steps, before):
            threads.append(threading.Thread(target=call, args=(arg,)))
            threads[-1].start()
            wait_for(lambda op=op, n=n: fuse_requests(port, op) > n,
                     f"the {op} to reach the daemon while the master was paused", timeout=20,
                     step=0.01)
    finally:
        master.resume()
    for t in threads:
        t.join(30)


def _stop_with_calls(mnt, port, held, calls):
    """Pauses `held` (a master or a node), makes each of calls (a function,
    the FUSE opcode it sends) on a thread of its own once the one before
    reached the daemon (mnt, its metrics on port), then sends SIGTERM: the
    daemon must exit 0 with a clean log, and every call return, with
    ECANCELED or the kernel's errors for a mount whose daemon went away,
    all before `held` is let go on."""
    from test_metrics import fuse_requests
    errs, threads = {}, []

    def call(fn):
        try:
            fn()
        except OSError as e:
            errs[fn] = e.errno

    held.pause()
    try:
        for fn, op in calls:
            n = fuse_requests(port, op)
            threads.append(threading.Thread(target=call, args=(fn,)))
            threads[-1].start()
            wait_for(lambda op=op, n=n: fuse_requests(port, op) > n,
                     f"the {op} to reach the daemon", timeout=20, step=0.01)
        mnt.request_stop(signal.SIGTERM)
        assert mnt.wait_exit() == 0, mnt.read_log()[-3000:]
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "a call on the mount still waits after its daemon exited"
    finally:
        held.resume()
    # What the daemon answered as it stopped, or the kernel once it was gone.
    assert set(errs.values()) <= {errno.ECANCELED, errno.ENOTCONN, errno.ECONNABORTED}, errs


def test_a_mount_stopped_while_a_close_waits_for_an_unlink_exits_cleanly(cluster):
    """SIGTERM to the daemon while a close of a file waits for an unlink of
    it to be answered (the master paused holds the unlink in flight): the
    close waiting at the gate is let go as the daemon shuts down (with
    ECANCELED, fs/namespace.c), the daemon exits 0 with no error in its
    log, the mount is gone, and both calls return, with ECANCELED (or the
    kernel's errors for a mount whose daemon went away), all before the
    master is let go on."""
    master, port, p, size, r, w = _a_reader_and_a_writer(cluster)
    os.pwrite(w, b"x", 0)
    try:
        _stop_with_calls(cluster.last_mount, port, master, [
            (lambda: os.unlink(p), "UNLINK"), (lambda: os.close(w), "FLUSH")])
    finally:
        os.close(r)


def test_unlink_during_a_publish_keeps_the_readers_version(cluster):
    """A descriptor reading a file through the page cache while this mount
    publishes a new version of it (a close's commit at the master) and
    another process unlinks it: the reader goes on reading the new version,
    as on a local file system. The unlink reaches the master after the
    commit and after the mount opened the new version for its readers;
    before, it overtook that open and the reader's next miss of the cache
    failed with EIO. The master is paused to hold the commit in flight
    while the unlink arrives. (A rename goes through the same step, settle()
    in fs/namespace.c; this test cannot hold one there: with the master
    paused, the daemon's rename waits at its lookups, and the kernel holds
    a close of the file back until the rename is answered.)"""
    master, port, p, size, r, w = _a_reader_and_a_writer(cluster)
    try:
        assert os.pread(r, 4, 0) == b"AAAA"
        os.pwrite(w, b"x", 0)
        _with_the_master_paused(master, port, [(os.close, w, "FLUSH"), (os.unlink, p, "UNLINK")])
        assert not os.path.exists(p)
        os.posix_fadvise(r, 0, 0, os.POSIX_FADV_DONTNEED)  # the next reads miss the cache
        assert os.pread(r, 4, size // 2) == b"AAAA"
        assert os.pread(r, 2, 0) == b"xA"
    finally:
        os.close(r)


def test_a_close_while_an_unlink_is_in_flight_does_not_bring_the_file_back(cluster):
    """A writer's close (its commit) that comes while an unlink of the file
    is on its way to the master must not publish the file again under the
    name the unlink removed: the unlink returned, so the name is gone, and
    the file's bytes live on for its descriptors still open. Before, the
    commit followed the unlink to the master with the old name and made
    the file again there. The master is paused to hold the unlink in
    flight while the close arrives."""
    master, port, p, size, r, w = _a_reader_and_a_writer(cluster)
    try:
        os.pwrite(w, b"x", 0)
        os.stat(p)
        _with_the_master_paused(master, port, [(os.unlink, p, "UNLINK"), (os.close, w, "FLUSH")])
        assert not os.path.exists(p)
        assert cli(master.addr, "ls").stdout.split() == []
        os.posix_fadvise(r, 0, 0, os.POSIX_FADV_DONTNEED)  # the next reads miss the cache
        assert os.pread(r, 2, 0) == b"xA"
        assert os.pread(r, 4, size // 2) == b"AAAA"
    finally:
        os.close(r)



def _stopped_with_calls_queued(cluster, held, calls):
    """_stop_with_calls() on a cluster mount (metrics on a port of its own)
    with file f open for writing (fd) and a dup of it (fd2: the same FUSE
    handle; each of calls takes both),
    `held` "master" or "node". The daemon read freed handles and died on
    the way out, leaving the mount dead."""
    port = free_port()
    master = cluster.master()
    node = cluster.node(master, "256M")
    mnt = cluster.mount("--master", master.addr, "--segment-size", "0", "--metrics", str(port))
    fd = os.open(mnt.p("f"), os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"a" * 4096)
    fd2 = os.dup(fd)
    _stop_with_calls(mnt, port, master if held == "master" else node,
                     [(lambda fn=fn: fn(fd, fd2), op) for fn, op in calls])


def test_a_mount_stopped_with_a_write_queued_behind_a_commit_exits_cleanly(cluster):
    """The close's commit waits for the paused master; a write of the other
    descriptor queues behind it. The commit is cancelled at the stop; the
    write must not run on the handle the stop freed."""
    _stopped_with_calls_queued(cluster, "master", [
        (lambda fd, fd2: os.close(fd), "FLUSH"),
        (lambda fd, fd2: os.pwrite(fd2, b"y", 1), "WRITE")])


def test_a_mount_stopped_with_an_fsync_waiting_for_writes_behind_exits_cleanly(cluster):
    """A write answered before its bytes reached the paused node (write
    behind); an fsync of the other descriptor waits for it. The write is
    cancelled at the stop; the fsync must not run on the freed handle."""
    _stopped_with_calls_queued(cluster, "node", [
        (lambda fd, fd2: os.write(fd, b"b" * 65536), "WRITE"),
        (lambda fd, fd2: os.fsync(fd2), "FSYNC")])


def test_a_mount_stopped_with_a_read_queued_behind_a_commit_exits_cleanly(cluster):
    """The close's commit waits for the paused master; a read of the other
    descriptor (its pages dropped, so that it reaches the daemon) queues
    behind it; the stop must not run it on the freed handle."""
    def read(fd, fd2):
        os.posix_fadvise(fd2, 0, 0, os.POSIX_FADV_DONTNEED)
        os.pread(fd2, 4096, 0)

    _stopped_with_calls_queued(cluster, "master", [
        (lambda fd, fd2: os.close(fd), "FLUSH"), (read, "READ")])


@pytest.mark.parametrize("existing", [False, True])
def test_a_file_open_for_writing_when_the_mount_stops_is_not_published(cluster, existing):
    """SIGTERM to the daemon while a file is open for writing (its writes
    landed, fsync answered): the version in progress is dropped, never
    published (SEMANTICS, "the mount is stopped"); other clients keep the
    version of before: the file's old content, or a new file's empty one.
    The stop freed the handle and published the half-written version."""
    master = cluster.master()
    cluster.node(master, "256M")
    mnt = cluster.mount("--master", master.addr, "--segment-size", "0")
    if existing:
        with open(mnt.p("f"), "wb") as f:
            f.write(b"the whole old file")
    fd = os.open(mnt.p("f"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"the first half")
    os.fsync(fd)
    mnt.request_stop(signal.SIGTERM)
    assert mnt.wait_exit() == 0, mnt.read_log()[-3000:]
    r = cli(master.addr, "get", "f")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (b"the whole old file" if existing else b""), "published half-written"
    with pytest.raises(OSError):
        os.close(fd)


def getdents(fd, size=4096):
    """The names one getdents64(2) of size bytes returns from fd."""
    libc = ctypes.CDLL(None, use_errno=True)
    nr = {"x86_64": 217, "aarch64": 61}[platform.machine()]
    buf = ctypes.create_string_buffer(size)
    n = libc.syscall(nr, fd, buf, size)
    if n < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    names, at = [], 0
    raw = buf.raw[:n]
    while at < n:
        reclen = int.from_bytes(raw[at + 16:at + 18], "little")
        names.append(raw[at + 19:at + reclen].split(b"\0", 1)[0].decode())
        at += reclen
    return [x for x in names if x not in (".", "..")] if n else None


@pytest.mark.parametrize("to", ["a", "z"])
def test_a_directory_renamed_while_it_is_listed_lists_each_entry_once(mnt, to):
    # A directory stream lists the directory, whatever its name: renaming
    # it (through this mount) between two reads of a listing adds or
    # removes none of its entries, so the listing returns each one once.
    d = mnt.p("m")
    os.mkdir(d)
    names = {f"entry-{i:04d}" for i in range(300)}
    for n in names:
        open(os.path.join(d, n), "w").close()
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        seen = getdents(fd)  # part of the listing
        assert 0 < len(seen) < len(names)
        os.rename(d, mnt.p(to))
        while (more := getdents(fd)) is not None:
            seen += more
    finally:
        os.close(fd)
    dup = sorted({n for n in seen if seen.count(n) > 1})
    missing = sorted(names - set(seen))
    assert not dup and not missing, (f"{len(seen)} listed, {len(dup)} twice, "
                                     f"{len(missing)} missing")
    assert sorted(os.listdir(mnt.p(to))) == sorted(names)
