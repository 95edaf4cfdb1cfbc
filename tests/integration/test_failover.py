"""Standby masters on etcd (issue 11, parts 2 and 3): real processes, one
etcd member on ports of the test's own (Debian's etcd; the test skips
without it), two masters campaigning on a short lease (--etcd-ttl 2),
nodes and a mount that find the leader through etcd:// addresses."""

import asyncio
import errno
import filecmp
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from harness import cli, free_port, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

TTL = "2"  # s: the leader's lease
# The hold of a segment mounted again: 3 s; the log compacted every 8 keys.
MASTER_ARGS = ("--etcd-ttl", TTL, "--put-ttl-ms", "3000", "--etcd-compact", "8")
# Lines the failover makes the processes log on purpose.
EXPECT = r"lost the connection|cannot connect|cannot find the master|session with|" \
    r"stepping down|starting again|cannot append|op log|write.*failed|publishing .* failed|ESTALE|Stale"


def masters(cluster, etcd, n=2, metrics=False):
    """n masters of etcd's cluster; returns them with the leader first. With
    metrics, each serves them on m.metrics (a loopback port)."""
    ms = []
    for _ in range(n):
        port = free_port()
        extra = ("--metrics", str(port)) if metrics else ()
        ms.append(cluster.master("--etcd", etcd.endpoint, *MASTER_ARGS, *extra, expect_log=EXPECT))
        ms[-1].metrics = port
    wait_for(lambda: any("leading cluster" in m.read_log() for m in ms), "a leader")
    return sorted(ms, key=lambda m: "leading cluster" not in m.read_log())


def etcd_keys(etcd):
    """The cluster's keys in etcd (etcdctl, Debian's etcd-client)."""
    r = subprocess.run(["etcdctl", "--endpoints", etcd.endpoint, "get", "--prefix", "/mooncake/",
                        "--keys-only"], capture_output=True, text=True,
                       env={**os.environ, "ETCDCTL_API": "3"}, timeout=30)
    assert r.returncode == 0, r.stderr
    return [k for k in r.stdout.splitlines() if k]


def metric(m, name):
    """The value of metric name (no labels) that master m serves."""
    with urllib.request.urlopen(f"http://127.0.0.1:{m.metrics}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def leads(m):
    return m.read_log().count("leading cluster")


def test_kill9_of_the_leader_while_files_are_copied(cluster, tmp_path):
    """kill -9 of the leader while a loop copies files into a mount and
    reads them back: every file whose close returned success reads back
    equal after the failover, and new files are written again."""
    etcd = cluster.etcd()
    leader, standby = masters(cluster, etcd)
    for _ in range(2):
        cluster.node(etcd.url, "32M", expect_log=EXPECT)
    mnt = cluster.mount("--master", etcd.url, "--segment-size", "0", "--timeout-ms", "15000",
                        expect_log=EXPECT)
    src = tmp_path / "src"
    src.mkdir()
    files = []
    for i in range(40):
        p = src / f"f{i}"
        p.write_bytes(os.urandom(1 + (i * 7919) % 200_000))
        files.append(p)

    done, failed, first_after, reads_failed = [], [], [], []
    killed, gone = threading.Event(), threading.Event()

    def copy_loop():
        for p in files:
            dst = mnt.p(p.name)
            try:
                with open(p, "rb") as fi, open(dst, "wb") as fo:
                    fo.write(fi.read())  # close at the end of the block
            except OSError as e:
                failed.append((p.name, e.errno))
                continue
            try:  # read back at once, through whichever master leads now
                same = filecmp.cmp(p, dst, shallow=False)
            except OSError as e:
                reads_failed.append((p.name, e.errno))
                same = True  # checked again below, once the failover is over
            assert same, f"{p.name} read back different bytes"
            done.append(p)
            if killed.is_set() and not first_after:
                first_after.append(time.monotonic())
            if len(done) == 10:
                killed.set()
                gone.wait(60)  # the next file goes to a cluster without its leader

    # Things without bytes are records too: a directory, an empty file, a
    # symbolic link, a mode.
    os.mkdir(mnt.p("dir"))
    open(mnt.p("dir", "empty"), "wb").close()
    os.symlink("dir/empty", mnt.p("link"))
    os.chmod(mnt.p("dir", "empty"), 0o600)
    t = threading.Thread(target=copy_loop)
    t.start()
    assert killed.wait(60), "the first files were never written"
    t0 = time.monotonic()
    leader.kill9()
    gone.set()
    t.join(120)
    assert not t.is_alive(), "the copy loop hangs"
    assert first_after, f"no file was written after the failover: {failed}"
    print(f"failover: {first_after[0] - t0:.2f} s from kill -9 of the leader to the next "
          f"file closed; {len(failed)} of {len(files)} closes and {len(reads_failed)} reads "
          f"failed meanwhile")
    assert leads(standby) == 1
    assert os.path.isdir(mnt.p("dir"))
    assert os.stat(mnt.p("dir", "empty")).st_size == 0
    assert os.stat(mnt.p("dir", "empty")).st_mode & 0o777 == 0o600
    assert os.readlink(mnt.p("link")) == "dir/empty"
    for p in done:  # read back through the new leader
        r = subprocess.run(["cmp", str(p), mnt.p(p.name)], capture_output=True)
        assert r.returncode == 0, (p.name, r.stdout, r.stderr)
    for name, e in failed:  # a close that failed said why, and was never half-published
        assert e in (errno.EIO, errno.ESTALE, errno.ETIMEDOUT, errno.ENOTCONN, errno.EAGAIN,
                     errno.ECONNRESET), (name, errno.errorcode.get(e))
    # The log was compacted into a snapshot and trimmed as it went.
    keys = etcd_keys(etcd)
    assert any(k.endswith("/snapshot") for k in keys), keys
    assert sum("/log/" in k for k in keys) < 8 + 4, keys
    # What was renamed, removed and chmod'ed a moment before the kill (before
    # the nodes heard of it: only the op log has it) stays so.
    os.rename(mnt.p(done[0].name), mnt.p("renamed"))
    os.remove(mnt.p(done[1].name))
    os.chmod(mnt.p(done[2].name), 0o640)
    standby.kill9()  # and once more, onto a master that starts afresh from the snapshot
    m3 = cluster.master("--etcd", etcd.endpoint, *MASTER_ARGS, expect_log=EXPECT)
    wait_for(lambda: leads(m3) == 1, "the third master to lead")
    wait_for(lambda: os.path.exists(mnt.p("renamed")), "the mount to follow the third master")
    assert filecmp.cmp(done[0], mnt.p("renamed"), shallow=False)
    assert not os.path.exists(mnt.p(done[0].name))
    assert not os.path.exists(mnt.p(done[1].name))
    assert os.stat(mnt.p(done[2].name)).st_mode & 0o777 == 0o640


def test_a_stopped_leader_steps_down(cluster):
    """SIGSTOP of the leader past its lease: the standby takes over; after
    SIGCONT the old leader steps down, and a write sent to it is refused,
    while writes through etcd go to the new leader."""
    etcd = cluster.etcd()
    leader, standby = masters(cluster, etcd)
    cluster.node(etcd.url, "32M", expect_log=EXPECT)
    assert cli(etcd.url, "put", "before", input=b"one").returncode == 0
    leader.pause()
    wait_for(lambda: leads(standby) == 1, "the standby to take over", timeout=20)
    r = cli(etcd.url, "--timeout-ms", "15000", "put", "after", input=b"two")
    assert r.returncode == 0, r.stderr
    leader.resume()
    # It steps down by starting again (execv, as a candidate): a put sent
    # in between finds its sockets closed (reset, refused). Once it listens
    # again it answers, and refuses the put.
    wait_for(lambda: "stepping down" in leader.read_log() and
             leader.read_log().split("stepping down", 1)[1].count("listening on") >= 1,
             "the old leader to step down and listen again")
    r = cli(leader.addr, "--timeout-ms", "3000", "put", "refused", input=b"x")
    assert r.returncode != 0
    assert b"Remote address changed" in r.stderr or b"Read-only" in r.stderr or \
        b"refused" in r.stderr, r.stderr
    assert cli(etcd.url, "get", "refused").returncode != 0
    assert cli(etcd.url, "get", "before").stdout == b"one"
    assert cli(etcd.url, "get", "after").stdout == b"two"


def test_etcd_down_reads_go_on_changes_are_refused(cluster):
    """etcd stopped: the leader answers reads, refuses changes with EROFS,
    and takes them again once etcd is back."""
    etcd = cluster.etcd()
    leader, standby = masters(cluster, etcd, metrics=True)
    assert metric(leader, "mooncake_master_leading") == 1
    assert metric(standby, "mooncake_master_leading") == 0
    cluster.node(etcd.url, "32M", expect_log=EXPECT)
    mnt = cluster.mount("--master", etcd.url, "--segment-size", "0", expect_log=EXPECT)
    with open(mnt.p("kept"), "wb") as f:
        f.write(b"kept bytes")
    assert cli(leader.addr, "put", "k", input=b"v").returncode == 0
    etcd.stop()
    assert cli(leader.addr, "get", "k").stdout == b"v"
    with open(mnt.p("kept"), "rb") as f:
        assert f.read() == b"kept bytes"
    r = cli(leader.addr, "put", "k2", input=b"no")
    assert r.returncode != 0 and b"Read-only file system" in r.stderr, r.stderr
    assert metric(leader, "mooncake_master_oplog_writable") == 0
    try:
        with open(mnt.p("new"), "wb") as f:
            f.write(b"no")
        raise AssertionError("a write while etcd is down succeeded")
    except OSError as e:
        assert e.errno in (errno.EROFS, errno.EIO), e
    etcd.start()
    wait_for(lambda: cli(leader.addr, "put", "k2", input=b"yes").returncode == 0,
             "changes to be taken again", timeout=20)
    with open(mnt.p("new"), "wb") as f:
        f.write(b"yes")
    assert cli(etcd.url, "get", "k2").stdout == b"yes"
    assert metric(leader, "mooncake_master_oplog_writable") == 1
    wait_for(lambda: metric(leader, "mooncake_master_oplog_pending") == 0,
             "the op log to hold every change")
    with open(mnt.p("new"), "rb") as f:
        assert f.read() == b"yes"


def test_python_async_puts_across_a_failover(cluster):
    """The Python client with master_server_addr="etcd://..." (Mooncake's
    form): every async_put that returned 0, before or after kill -9 of the
    leader, reads back equal with async_get."""
    if os.environ.get("MC_SANITIZED"):
        pytest.skip("the Python C extension does not load under the sanitizers")
    from mooncake.async_store import MooncakeDistributedStoreAsync

    etcd = cluster.etcd()
    leader, standby = masters(cluster, etcd)
    cluster.node(etcd.url, "32M", expect_log=EXPECT)
    s = MooncakeDistributedStoreAsync()
    assert s.setup({"master_server_addr": etcd.url, "timeout_ms": 15000}) == 0
    blobs = {f"py/{i}": os.urandom(1000 + 37 * i) for i in range(40)}

    async def run():
        ok = []
        for i, (k, v) in enumerate(blobs.items()):
            if i == 20:
                leader.kill9()
            if await s.async_put(k, v) == 0:
                ok.append(k)
        return ok, [await s.async_get(k) for k in ok]

    try:
        ok, got = asyncio.run(run())
        assert len(ok) >= 20, ok
        after = [k for k in list(blobs)[20:] if k in ok]
        assert after, "no put succeeded after the failover"
        print(f"python: {len(after)} of 20 async_puts after kill -9 of the leader succeeded")
        assert leads(standby) == 1
        for k, v in zip(ok, got):
            assert v == blobs[k], k
    finally:
        s.close()


def test_three_etcd_members_one_lost(cluster):
    """etcd of three members: kill -9 of the member every process asks
    first changes nothing the user sees (the others keep a quorum, the
    clients of etcd go to the next endpoint); a failover of the masters
    then still works."""
    etcd = cluster.etcd(3)
    leader, standby = masters(cluster, etcd)
    cluster.node(etcd.url, "32M", expect_log=EXPECT)
    assert cli(etcd.url, "put", "k1", input=b"one").returncode == 0
    etcd.members[0].kill9()

    def put_k2():
        r = cli(etcd.url, "--timeout-ms", "10000", "put", "k2", input=b"two")
        return r.returncode == 0
    wait_for(put_k2, "a put with one etcd member gone", timeout=20, step=0.5)
    assert cli(etcd.url, "get", "k1").stdout == b"one"
    leader.kill9()
    wait_for(lambda: leads(standby) == 1, "the standby to take over", timeout=20)
    r = cli(etcd.url, "--timeout-ms", "15000", "get", "k2")
    assert r.stdout == b"two", r.stderr
    r = cli(etcd.url, "--timeout-ms", "15000", "put", "k3", input=b"three")
    assert r.returncode == 0, r.stderr
    assert cli(etcd.url, "get", "k3").stdout == b"three"


def test_a_standby_watching_a_stopped_etcd_member_still_takes_over(cluster):
    """etcd of three members, the one every process asks first stopped
    (SIGSTOP: its connections stay open and say nothing, as a member cut
    off or hung). Clients must still find the leader (a lookup that timed
    out there made every later one go there again, and time out); the
    standby's watch of the leader's key goes silent, not closed, and when
    the leader then dies the standby must still take over (it checks,
    within a bound, what its watch no longer tells it)."""
    etcd = cluster.etcd(3)
    leader, standby = masters(cluster, etcd)
    cluster.node(etcd.url, "32M", expect_log=EXPECT)
    assert cli(etcd.url, "put", "k1", input=b"one").returncode == 0
    etcd.members[0].pause()
    try:
        def put_k2():
            r = cli(etcd.url, "--timeout-ms", "10000", "put", "k2", input=b"two")
            return r.returncode == 0
        wait_for(put_k2, "a put with one etcd member stopped", timeout=30, step=0.5)
        leader.kill9()
        wait_for(lambda: leads(standby) == 1, "the standby to take over", timeout=40)
        r = cli(etcd.url, "--timeout-ms", "15000", "get", "k2")
        assert r.stdout == b"two", r.stderr
    finally:
        etcd.members[0].resume()


def test_a_new_node_first_at_a_new_leader_takes_no_segment_id_of_the_log(cluster):
    """Nodes A (segment 1) and B (segment 2) are stopped when the leader
    dies; a new node C mounts first at the new leader, then A comes back
    (its id taken: it gets another). The op log's records of B's segment
    must not be merged into A's segment: B's files would read A's bytes."""
    from harness import cli_stats
    etcd = cluster.etcd()
    leader, standby = masters(cluster, etcd)
    a = cluster.node(etcd.url, "16M", "--log-level", "info", expect_log=EXPECT)
    b = cluster.node(etcd.url, "16M", "--log-level", "info", expect_log=EXPECT)
    MiB = 1 << 20
    data = {"a": b"A" * MiB, "x": b"X" * MiB, "b": b"B" * MiB}
    for k, node in (("a", a), ("x", b), ("b", b)):
        r = cli(etcd.url, "--preferred", node.addr, "put", k, input=data[k])
        assert r.returncode == 0, r.stderr
    wait_for(lambda: cli_stats(leader.addr)["counters"]["notices_waiting"] == 0,
             "the nodes to fetch their records", step=0.2)
    a.pause()
    b.pause()
    try:
        leader.kill9()
        wait_for(lambda: leads(standby) == 1, "the standby to lead")
        cluster.node(etcd.url, "16M", "--log-level", "info", expect_log=EXPECT)
        a.resume()
        wait_for(lambda: cli_stats(standby.addr)["segments"] == 2, "A to mount again")
        wait_for(lambda: cli(etcd.url, "get", "a").returncode == 0, "A's report")
        r = cli(etcd.url, "--timeout-ms", "2000", "get", "b")
        assert r.returncode != 0 or r.stdout == data["b"], \
            "b read %r... (not its bytes) while its node is away" % r.stdout[:8]
    finally:
        a.resume()
        b.resume()
    wait_for(lambda: cli_stats(standby.addr)["segments"] == 3, "B to mount again")
    for k, v in data.items():
        assert cli(etcd.url, "get", k).stdout == v, k


def test_a_put_at_a_new_leader_wins_over_an_older_version_reported_later(cluster):
    """A leader started after the standby that takes over from it handed
    out version ids past that standby's clock. A put acknowledged by the
    new leader before the node holding the key's version of before mounts
    again must stay the key's version once that node reports."""
    from harness import cli_stats
    etcd = cluster.etcd()
    first, older, younger = masters(cluster, etcd, n=3)  # older started before younger
    a = cluster.node(etcd.url, "16M", expect_log=EXPECT)
    cluster.node(etcd.url, "16M", expect_log=EXPECT)
    older.pause()  # so that the younger one takes over
    try:
        first.kill9()
        wait_for(lambda: leads(younger) == 1, "the younger standby to lead")
    finally:
        older.resume()
    wait_for(lambda: cli_stats(younger.addr)["segments"] == 2, "the nodes to mount again")
    # Past the hold of A's segment mounted again: "k" goes there.
    wait_for(lambda: cli_stats(younger.addr)["counters"]["segments_held"] == 0,
             "the holds of the segments mounted again to end", step=0.2)
    wait_for(lambda: cli(etcd.url, "--preferred", a.addr, "put", "k",
                         input=b"old").returncode == 0, "a put at the younger leader", step=0.5)
    wait_for(lambda: cli_stats(younger.addr)["counters"]["notices_waiting"] == 0,
             "the nodes to fetch their records", step=0.2)
    a.pause()
    try:
        younger.kill9()
        wait_for(lambda: leads(older) == 1, "the older standby to lead")
        wait_for(lambda: cli(etcd.url, "put", "k", input=b"new").returncode == 0,
                 "a put at the older leader", step=0.5)
        assert cli(etcd.url, "get", "k").stdout == b"new"
    finally:
        a.resume()
    wait_for(lambda: cli_stats(older.addr)["segments"] == 2, "A to mount again")
    wait_for(lambda: cli_stats(older.addr)["counters"]["records_merged"] +
             cli_stats(older.addr)["counters"]["records_refused"] >= 2, "A's report")
    assert cli(etcd.url, "get", "k").stdout == b"new", "the version of before came back"
