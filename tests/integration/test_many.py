"""Many small files: 10,000 x 4 KiB written, listed, read back, removed,
under the sanitizers (make asan) too (14 s there)."""

import os

FILES = 10000


def test_many_small_files(mnt):
    os.mkdir(mnt.p("many"))
    blobs = {}
    for i in range(FILES):
        data = (f"{i:08d}".encode() * 512)[:4096]
        blobs[f"f{i:05d}"] = data
        with open(mnt.p("many", f"f{i:05d}"), "wb") as f:
            f.write(data)
    names = os.listdir(mnt.p("many"))
    assert len(names) == FILES
    assert sorted(names) == sorted(blobs)
    with os.scandir(mnt.p("many")) as it:
        for e in it:
            assert e.stat().st_size == 4096
    for name, data in blobs.items():
        with open(mnt.p("many", name), "rb") as f:
            assert f.read() == data
    for name in blobs:
        os.unlink(mnt.p("many", name))
    assert os.listdir(mnt.p("many")) == []
    os.rmdir(mnt.p("many"))
    st = os.statvfs(mnt.p())
    assert st.f_blocks == st.f_bfree  # every byte given back
