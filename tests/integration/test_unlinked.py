"""A file unlinked (or renamed over) while open lives on, as on a local file
system, until its last descriptor closes: its descriptors keep reading and
writing its bytes, whichever of them closes first. Only then are its bytes
dropped (nothing is published: it has no name) and its space comes back.
The pattern is common: a temporary file made, unlinked at once and used
through several descriptors (dup(2), a second open, a child's inherited
one). Before, the first close of any of them dropped the bytes the file's
writers had written, under the descriptors still open."""

import errno
import os

import pytest

from harness import (cli, cli_stats, past_the_put_ttl, revoked_writes, stopped_till_revoked,
                     wait_for)

MiB = 1 << 20


def used(m):
    return cli_stats(m.store_addr)["used_bytes"]


def test_a_temporary_file_keeps_its_bytes_past_the_close_of_a_dup(mnt):
    """create, unlink, write, then close a dup of the descriptor (the
    kernel sends a FLUSH for it, as for every close): the file still holds
    what was written, and takes more writes after it."""
    p = mnt.p("tmp")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(p)
    os.write(fd, b"B" * 100_000)
    os.close(os.dup(fd))
    assert os.pread(fd, 200_000, 0) == b"B" * 100_000
    assert os.fstat(fd).st_size == 100_000
    os.write(fd, b"C" * 10)
    os.close(os.dup(fd))
    assert os.pread(fd, 200_000, 0) == b"B" * 100_000 + b"C" * 10
    os.close(fd)
    assert not os.path.exists(p)


def _the_other_of_two_writers_after_unlink(p):
    """Opens p twice for writing, writes 1 MiB of "B" through the first,
    unlinks p and closes the first: returns the second descriptor."""
    w1 = os.open(p, os.O_RDWR)
    w2 = os.open(p, os.O_RDWR)
    os.pwrite(w1, b"B" * MiB, 0)
    os.unlink(p)
    os.close(w1)
    return w2


def test_two_opens_of_an_unlinked_file_share_its_bytes(mnt):
    """Two descriptors open for writing, the file unlinked, one closed: the
    other reads what the first wrote, and writes on from there."""
    p = mnt.p("f")
    with open(p, "wb") as f:
        f.write(b"A" * MiB)
    w2 = _the_other_of_two_writers_after_unlink(p)
    assert os.pread(w2, 2 * MiB, 0) == b"B" * MiB
    os.pwrite(w2, b"C" * 10, MiB)
    assert os.pread(w2, 2 * MiB, 0) == b"B" * MiB + b"C" * 10
    os.close(w2)
    assert not os.path.exists(p)


def test_a_file_renamed_over_keeps_its_bytes_for_its_descriptors(mnt):
    """The same when another file is renamed over the name: the replaced
    file's descriptors keep its bytes; the name holds the other file."""
    p, q = mnt.p("f"), mnt.p("g")
    with open(p, "wb") as f:
        f.write(b"A" * MiB)
    with open(q, "wb") as f:
        f.write(b"other")
    w1 = os.open(p, os.O_RDWR)
    w2 = os.open(p, os.O_RDWR)
    os.pwrite(w1, b"B" * MiB, 0)
    os.rename(q, p)
    os.close(w1)
    assert os.pread(w2, 2 * MiB, 0) == b"B" * MiB
    os.close(w2)
    assert open(p, "rb").read() == b"other"


def test_a_reader_of_an_unlinked_file_reads_its_writers_bytes_after_they_close(mnt):
    """A reader through the page cache (the default cache mode) follows the
    file's writers (docs/SEMANTICS.md, Consistency); once the file is
    unlinked and its writer closes, the reader still reads the writer's
    bytes, every one: before, its cache kept a few of the writer's pages
    and its misses read the file's old version, one read(2) returning
    bytes of both."""
    p = mnt.p("f")
    size = 4 * MiB
    with open(p, "wb") as f:
        f.write(b"A" * size)
    r = os.open(p, os.O_RDONLY)
    w = os.open(p, os.O_WRONLY)
    os.pwrite(w, b"B" * size, 0)
    assert os.pread(r, 4096, 0) == b"B" * 4096
    os.unlink(p)
    os.close(w)
    got = b"".join(os.pread(r, MiB, off) for off in range(0, size, MiB))
    os.close(r)
    assert got == b"B" * size, {c: got.count(c) for c in set(got)}


def test_with_cache_mode_direct_a_reader_keeps_its_version(store_mount):
    """With --cache-mode direct each reader reads the version it opened,
    whatever the file's writers do (the writer's bytes are the writers'):
    unlinking the file and closing one writer changes neither."""
    m = store_mount("256M", "--cache-mode", "direct")
    p = m.p("f")
    with open(p, "wb") as f:
        f.write(b"A" * MiB)
    r = os.open(p, os.O_RDONLY)
    w2 = _the_other_of_two_writers_after_unlink(p)
    assert os.pread(r, 2 * MiB, 0) == b"A" * MiB
    assert os.pread(w2, 2 * MiB, 0) == b"B" * MiB
    os.close(w2)
    assert os.pread(r, 2 * MiB, 0) == b"A" * MiB
    os.close(r)


def test_the_space_of_an_unlinked_file_comes_back_at_its_last_close(store_mount):
    """Its bytes take space while a descriptor holds the file (as on a
    local file system), and none once the last one closes; nothing is
    published under its name, nor under any other."""
    m = store_mount("256M")
    base = used(m)
    p = m.p("f")
    r = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    w = os.open(p, os.O_WRONLY)
    os.write(w, b"x" * (8 * MiB))
    os.unlink(p)
    os.close(w)
    assert used(m) >= base + 8 * MiB
    assert os.pread(r, 16, 8 * MiB - 16) == b"x" * 16
    os.close(r)
    wait_for(lambda: used(m) <= base, "the unlinked file's space to come back", timeout=10)
    assert os.listdir(m.p()) == []
    assert cli(m.store_addr, "ls").stdout.strip() == b""


def test_a_descriptor_whose_first_write_comes_after_the_unlink_keeps_the_bytes(mnt):
    """A descriptor open for writing that wrote nothing yet when the file
    lost its name (unlink, or another file renamed over it) writes into the
    file's bytes, as on a local file system: a write in the middle, an
    append. Before, its first write started an empty file."""
    data = bytes(range(256)) * 4096  # 1 MiB
    for how in ("unlink", "rename"):
        p, q = mnt.p("f"), mnt.p("g")
        with open(p, "wb") as f:
            f.write(data)
        with open(q, "wb") as f:
            f.write(b"other")
        fd = os.open(p, os.O_RDWR)
        ap = os.open(p, os.O_RDWR | os.O_APPEND)
        if how == "unlink":
            os.unlink(p)
        else:
            os.rename(q, p)
        os.pwrite(fd, b"XY", 5)
        os.write(ap, b"tail")
        want = data[:5] + b"XY" + data[7:] + b"tail"
        assert os.pread(fd, 2 * MiB, 0) == want, how
        os.close(fd)
        assert os.pread(ap, 2 * MiB, 0) == want, how
        os.close(ap)
        if how == "rename":
            assert open(p, "rb").read() == b"other"
            os.unlink(p)
        else:
            os.unlink(q)


def _a_cluster_mount_and_one_to_stop(cluster, make_mount):
    """(a master with a put TTL of 3 s and a node, a mount of it, another
    mount of it for past_the_put_ttl() to stop)."""
    m = cluster.master("--put-ttl-ms", "3000")
    cluster.node(m)
    mnt = make_mount("--master", m.addr, "--segment-size", "0")
    stopped = make_mount("--master", m.addr, "--segment-size", "0",
                         expect_log=r"revoked|publishing")
    return m, mnt, stopped


def test_an_idle_unlinked_file_of_a_running_cluster_mount_keeps_its_bytes(
        cluster, make_mount):
    """Its bytes are a version in progress, whose write lease the mount
    renews while it runs: well past the put TTL (a writer of a stopped
    mount was revoked meanwhile) a read that misses the page cache reads
    them, and the descriptor writes on."""
    m, mnt, stopped = _a_cluster_mount_and_one_to_stop(cluster, make_mount)
    p = mnt.p("tmp")
    data = os.urandom(MiB)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.unlink(p)
        os.write(fd, data)
        past_the_put_ttl(m, stopped)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the reads miss the cache
        assert os.pread(fd, MiB, 0) == data
        os.pwrite(fd, b"more", MiB)
        assert os.pread(fd, 2 * MiB, 0) == data + b"more"
    finally:
        os.close(fd)
    assert revoked_writes(m) == 1  # the stopped writer's only


def test_an_unlinked_file_of_a_stopped_cluster_mount_fails_its_reads_past_the_put_ttl(
        cluster, make_mount):
    """When the mount stops (SIGSTOP) past the put TTL, nothing renews its
    write and the master revokes it (docs/SEMANTICS.md, Faults): a read
    that then misses the page cache fails with ESTALE, never reads the
    space the master handed to another object, which keeps its bytes."""
    m = cluster.master("--put-ttl-ms", "1000")
    cluster.node(m)
    mnt = make_mount("--master", m.addr, "--segment-size", "0", expect_log=r"revoked")
    p = mnt.p("tmp")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.unlink(p)
        os.write(fd, b"a" * MiB)
        os.fsync(fd)  # its bytes are in the store before the mount stops
        stopped_till_revoked(m, mnt)
        victim = os.urandom(MiB)
        r = cli(m.addr, "put", "victim", input=victim)
        assert r.returncode == 0, r.stderr
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the reads miss the cache
        with pytest.raises(OSError) as e:
            os.pread(fd, MiB, 0)
        assert e.value.errno == errno.ESTALE, e.value
    finally:
        os.close(fd)
    assert cli(m.addr, "get", "victim").stdout == victim


def test_pythons_temporary_file_with_a_child_writing_to_it(mnt):
    """tempfile.TemporaryFile() (O_TMPFILE is refused with EOPNOTSUPP, so
    it makes a file and unlinks it) written by this process and by a child
    through the descriptor it inherits: the child's exit closes its copy
    (a FLUSH), and the file keeps every byte."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryFile(dir=mnt.p()) as f:
        f.write(b"x" * 300_000)
        f.flush()
        subprocess.run([sys.executable, "-c", f"import os; os.write({f.fileno()}, b'tail')"],
                       pass_fds=(f.fileno(),), check=True)
        f.seek(0)
        assert f.read() == b"x" * 300_000 + b"tail"
    assert os.listdir(mnt.p()) == []


def test_the_attributes_of_an_unlinked_file_change_through_its_descriptor(mnt):
    """fchmod, futimens and fchown of a file unlinked while open take
    effect, as on a local file system: its descriptors' fstat shows them
    (nothing else can see the file). Before, they answered 0 and changed
    nothing. With another name left (a hard link) they change the file
    that name shows."""
    p = mnt.p("f")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"x")
    os.unlink(p)
    os.fchmod(fd, 0o600)
    os.utime(fd, ns=(1_000_000_000, 2_000_000_000))
    os.fchown(fd, -1, 0)
    st = os.fstat(fd)
    os.close(fd)
    assert (st.st_mode & 0o7777, st.st_atime_ns, st.st_mtime_ns, st.st_gid, st.st_nlink) == \
        (0o600, 1_000_000_000, 2_000_000_000, 0, 0)

    a, b = mnt.p("a"), mnt.p("b")
    with open(a, "wb") as f:
        f.write(b"y")
    os.link(a, b)
    fd = os.open(a, os.O_RDONLY)
    os.unlink(a)
    os.fchmod(fd, 0o640)
    os.utime(fd, ns=(3_000_000_000, 4_000_000_000))
    os.setxattr(fd, "user.k", b"v")
    os.close(fd)
    st = os.stat(b)
    assert (st.st_mode & 0o7777, st.st_mtime_ns) == (0o640, 4_000_000_000)
    assert os.getxattr(b, "user.k") == b"v"


def test_extended_attributes_of_a_file_unlinked_with_no_other_name_fail(mnt):
    """They went with its name (docs/SEMANTICS.md): ENOENT, not a
    success that keeps nothing."""
    p = mnt.p("f")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    os.unlink(p)
    try:
        for call in (lambda: os.setxattr(fd, "user.k", b"v"), lambda: os.getxattr(fd, "user.k")):
            with pytest.raises(OSError) as e:
                call()
            assert e.value.errno == errno.ENOENT
    finally:
        os.close(fd)


def test_attributes_after_every_name_of_a_hard_linked_file_went(mnt):
    """ln a b, a descriptor of a, rm b, rm a: the mount still counts two
    names for a (its count is a's last stat's), so a change through the
    descriptor goes to the file's inode key, which went with b. It then
    takes effect for the descriptors, as for any file with no name left;
    before, it answered 0 and changed nothing."""
    a, b = mnt.p("a"), mnt.p("b")
    with open(a, "wb") as f:
        f.write(b"y")
    os.link(a, b)
    os.stat(a)
    fd = os.open(a, os.O_RDONLY)
    try:
        os.unlink(b)
        os.unlink(a)
        os.fchmod(fd, 0o600)
        assert os.fstat(fd).st_mode & 0o7777 == 0o600
    finally:
        os.close(fd)


def test_an_unlinked_file_held_open_for_writing_without_writes_does_not_expire(
        cluster, make_mount):
    """A descriptor open for writing that has not written when the file is
    unlinked holds the file as it went with a read handle, not a writer:
    nothing of it expires with the put TTL. Well past the TTL a reader
    through the page cache still reads the file, and the descriptor's
    first write changes the file's bytes. (Past: once a writer of a
    stopped mount was revoked.)"""
    m, mnt, stopped = _a_cluster_mount_and_one_to_stop(cluster, make_mount)
    p = mnt.p("f")
    with open(p, "wb") as f:
        f.write(b"A" * MiB)
    r = os.open(p, os.O_RDONLY)
    w = os.open(p, os.O_RDWR)
    try:
        os.unlink(p)
        past_the_put_ttl(m, stopped)
        os.posix_fadvise(r, 0, 0, os.POSIX_FADV_DONTNEED)
        assert os.pread(r, 4, MiB // 2) == b"AAAA"
        os.pwrite(w, b"B", 1)
        assert os.pread(w, 4, 0) == b"ABAA"
        assert os.pread(w, 2 * MiB, 0) == b"A" + b"B" + b"A" * (MiB - 2)
    finally:
        os.close(w)
        os.close(r)
    assert revoked_writes(m) == 1  # the stopped writer's only
