#!/usr/bin/python3
"""check-layers.py - fails when a file uses a layer it must not (make check-layers).

Every file under core/src/LAYER/ belongs to LAYER (the folder is the layer);
core/include/mooncake/ is "api", core/bin/ is "bin", fs/ is "fs" and
python/mooncake/ is "python". Two kinds of use are checked against the
tables below, which mirror docs/ARCHITECTURE.md ("Layers"):

  includes  every #include "..." of every .c/.h file in those folders,
            resolved the way the compiler does (the file's own folder, then
            -Icore/include, then -Icore/src);
  calls     with --objects BUILD, every symbol an object file under
            BUILD/{core/src,core/bin,fs} uses and another one defines (nm).
            For bin, fs and python a public symbol (mc_*, not mc__*) counts
            as a use of "api" wherever it is implemented: that is what
            using only the public header means.

An edge from layer A to layer B passes when A == B, B is in ALLOWED[A], or
the file is a composition root listed in ROOTS; NARROW then forbids some
edges inside a layer. Prints one line per broken rule (file:line for
includes) and exits 1; exits 0 when all is well, 2 on a usage error.

  tests/check-layers.py [--root DIR] [--objects BUILD]
  tests/check-layers.py --self-test   (a fixture tree with wrong-way uses
                                       must fail, a clean one must pass)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Who may use whom, bottom to top. Arrows point down only: no cycle.
ALLOWED = {
    "api": [],  # core/include/mooncake: the public types, codes and calls
    "wire": ["api"],  # the codec and keys: pure functions
    "runtime": ["wire", "api"],  # loop, net, rpc, auth, log, util
    "transport": ["runtime", "wire", "api"],  # shm, rdma
    "master": ["wire", "api"],  # logic, index, allocator, request handling
    "node": ["transport", "runtime", "wire", "api"],  # the data plane: segments served
    # listeners, sessions and the control plane; hands data requests to node
    "server": ["node", "master", "transport", "runtime", "wire", "api"],
    "client": ["server", "node", "master", "transport", "runtime", "wire", "api"],
    "bin": ["api"],  # programs use the public header only
    "fs": ["api"],
    "python": ["api"],
}

# Composition roots: files that build a process out of internal layers.
# mooncake-master is one: it is a master service, a protocol server (its
# control and data planes) and optionally a segment (shm, rdma) on one
# loop, and there is no public API for being a master (a library user
# opens a store, embedded or a client).
ROOTS = {
    "core/bin/mooncake-master.c": [
        "master", "server", "node", "transport", "runtime", "wire", "api"],
}

# Narrower rules inside a layer: (files, targets they must not use, why).
NARROW = [
    (
        r"core/src/master/(master|master_i|put|namespace|records|index|index_i|index_hash|slab|alloc|repair)\.[ch]$",
        r"core/src/master/(service|service_i|nodes|names|tasks)\.[ch]$|core/src/wire/proto\.[ch]$",
        "the master logic uses only index, alloc and the key rule; the codec is the service's",
    ),
    (
        r"core/src/master/(index|index_i|index_hash|slab|alloc|ids)\.[ch]$",
        r"core/src/master/(master|master_i|put|namespace|repair|service|service_i|nodes|names|tasks)\.[ch]$",
        "index, allocator and id hash are the bottom of the master and use nothing else of it",
    ),
    (
        r"core/src/master/(repair|service|service_i|nodes|names|tasks)\.[ch]$",
        r"core/src/master/master_i\.h$",
        "master_i.h is private to the master logic's files; the rest use master.h",
    ),
    (
        r"^(?!core/src/runtime/loop(_io)?\.c$)",
        r"core/src/runtime/loop_ring\.h$",
        "loop_ring.h is private to loop.c and loop_io.c; the rest use loop.h and loop_i.h",
    ),
    (
        r"^(?!core/src/runtime/net(_send)?\.c$)",
        r"core/src/runtime/net_i\.h$",
        "net_i.h is private to net.c and net_send.c; the rest use net.h",
    ),
    (
        r"^(?!core/src/runtime/etcd(_json|_pages)?\.c$)",
        r"core/src/runtime/etcd_i\.h$",
        "etcd_i.h is private to etcd.c, etcd_json.c and etcd_pages.c; the rest use etcd.h",
    ),
]

SCANNED = ["core/include/mooncake", "core/src", "core/bin", "fs", "python/mooncake"]
INCLUDE_DIRS = ["core/include", "core/src"]
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    """The layer of a path relative to the root, or None when unknown."""
    parts = rel.split("/")
    if rel.startswith("core/include/mooncake/"):
        return "api"
    if parts[:2] == ["core", "src"]:
        return parts[2] if len(parts) == 4 and parts[2] in ALLOWED else None
    if parts[:2] == ["core", "bin"]:
        return "bin"
    if parts[0] == "fs":
        return "fs"
    if parts[:2] == ["python", "mooncake"]:
        return "python"
    return None


def edge_problem(src, dst, dst_layer=None):
    """Why src may not use dst (paths relative to the root), or None."""
    a, b = layer_of(src), dst_layer or layer_of(dst)
    if a is None:
        return "%s is in no layer (core/src/LAYER/ with LAYER one of %s)" % (
            src, ", ".join(sorted(ALLOWED)))
    if b is None:
        return "%s is in no layer" % dst
    if a != b and b not in ROOTS.get(src, ALLOWED[a]):
        return "layer %s may not use layer %s (allowed: %s)" % (
            a, b, ", ".join(ROOTS.get(src, ALLOWED[a])) or "nothing")
    for files, targets, why in NARROW:
        if re.search(files, src) and re.search(targets, dst) and src != dst:
            return why
    return None


def sources(root):
    for top in SCANNED:
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(d, n), root)


def resolve(root, rel, name):
    for d in [os.path.dirname(rel)] + INCLUDE_DIRS:
        p = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(os.path.join(root, p)):
            return p
    return None


def check_includes(root):
    errors = []
    for rel in sources(root):
        if layer_of(rel) is None:
            errors.append("%s: in no layer (core/src/LAYER/ with LAYER one of %s)" % (
                rel, ", ".join(sorted(ALLOWED))))
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                dst = resolve(root, rel, m.group(1))
                if dst is None:
                    errors.append('%s:%d: #include "%s" names no file' % (rel, lineno, m.group(1)))
                    continue
                why = edge_problem(rel, dst)
                if why:
                    errors.append('%s:%d: #include "%s": %s' % (rel, lineno, m.group(1), why))
    return errors


def nm(path):
    out = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "TDBRVW":
            defined.add(f[2])
        elif len(f) == 2 and f[0] == "U":
            undefined.add(f[1])
    return defined, undefined


def check_calls(root, build):
    objs = {}  # source path (relative to root) -> (defined, undefined)
    for top in ("core/src", "core/bin", "fs"):
        for d, _, names in os.walk(os.path.join(build, top)):
            for n in names:
                if n.endswith(".o"):
                    o = os.path.join(d, n)
                    src = os.path.relpath(o, build)[:-2] + ".c"
                    # An object whose source is gone (moved, removed) is
                    # stale: a build made before the move left it there.
                    if os.path.exists(os.path.join(root, src)):
                        objs[src] = nm(o)
    if not objs:
        return ["%s: no object files under core/src, core/bin, fs (build first)" % build]
    where = {}
    for src, (defined, _) in objs.items():
        for s in defined:
            where.setdefault(s, src)
    errors = []
    for src, (_, undefined) in sorted(objs.items()):
        for s in sorted(undefined):
            dst = where.get(s)
            if dst is None or dst == src:
                continue
            public = s.startswith("mc_") and not s.startswith("mc__")
            outside = layer_of(src) in ("bin", "fs", "python")
            why = edge_problem(src, dst, "api" if public and outside else None)
            if why:
                errors.append("%s: calls %s (defined in %s): %s" % (src, s, dst, why))
    return errors


def run(root, build):
    errors = check_includes(root)
    if build:
        errors += check_calls(root, build)
    for e in errors:
        print("check-layers: " + e)
    if not errors:
        print("check-layers: ok (includes%s go down the layers)" % (" and calls" if build else ""))
    return 1 if errors else 0


FIXTURE = {
    "core/include/mooncake/mooncake.h": "int mc_open(void);\n",
    "core/src/wire/proto.h": '#include "mooncake/mooncake.h"\n',
    "core/src/master/master.h": '#include "mooncake/mooncake.h"\nint mc__master_go(void);\n',
    "core/src/master/master.c": '#include "master/master.h"\nint mc__master_go(void) { return 0; }\n',
    "core/src/master/master_i.h": '#include "master/master.h"\n',
    "core/src/client/store_i.h": '#include "master/master.h"\nint mc__client_thing(void);\n',
    "core/src/client/store.c": '#include "client/store_i.h"\n'
    "int mc__client_thing(void) { return mc__master_go(); }\n"
    "int mc_open(void) { return mc__client_thing(); }\n",
    "fs/main.c": '#include "mooncake/mooncake.h"\nint main(void) { return mc_open(); }\n',
}

# Each wrong-way use the fixture gains, and a word its complaint must hold.
BREAKS = [
    ("core/src/master/master.c", '#include "client/store_i.h"\n', "master.c:3"),
    ("fs/main.c", '#include "wire/proto.h"\n', "layer fs may not use layer wire"),
    ("core/src/wire/proto.h", '#include "runtime/loop.h"\n', "names no file"),
    ("core/src/master/master.h", '#include "wire/proto.h"\n', "the codec is the service's"),
    ("core/src/master/index.c", '#include "master/master.h"\n', "bottom of the master"),
    ("core/src/master/service.c", '#include "master/master_i.h"\n', "private to the master logic"),
    ("core/src/stray.c", "", "in no layer"),
]


def self_test():
    """The check must pass a clean fixture and fail each broken one."""
    tmp = tempfile.mkdtemp(prefix="check-layers-")
    failures = 0
    try:
        def tree(extra):
            root = os.path.join(tmp, "t%d" % len(os.listdir(tmp)))
            files = dict(FIXTURE)
            for path, text in extra:
                files[path] = files.get(path, "") + text
            for path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
                with open(os.path.join(root, path), "w") as f:
                    f.write(text)
            return root

        def expect(label, root, build, want_rc, word):
            nonlocal failures
            p = subprocess.run([sys.executable, __file__, "--root", root]
                               + (["--objects", build] if build else []),
                               capture_output=True, text=True)
            if p.returncode != want_rc or word not in p.stdout:
                failures += 1
                print("check-layers self-test: %s: exit %d, want %d with %r; output:\n%s"
                      % (label, p.returncode, want_rc, word, p.stdout + p.stderr))

        expect("clean tree", tree([]), None, 0, "")
        for path, text, word in BREAKS:
            expect("%s gains %r" % (path, text.strip()), tree([(path, text)]), None, 1, word)

        # Calls: a master that calls up into the client must fail, though its
        # includes are clean (the prototype is written by hand).
        cc = os.environ.get("CC", "cc")
        if shutil.which(cc):
            root = tree([("core/src/master/master.c",
                          "int mc__client_thing(void);\n"
                          "int mc__master_up(void) { return mc__client_thing(); }\n")])
            build = os.path.join(root, "build")
            for src in ("core/src/master/master.c", "core/src/client/store.c", "fs/main.c"):
                obj = os.path.join(build, src[:-2] + ".o")
                os.makedirs(os.path.dirname(obj), exist_ok=True)
                subprocess.run([cc, "-c", "-I" + os.path.join(root, "core/include"),
                                "-I" + os.path.join(root, "core/src"), "-o", obj,
                                os.path.join(root, src)], check=True)
            expect("master calls the client", root, build, 1,
                   "core/src/master/master.c: calls mc__client_thing")
            # The same objects without that call pass.
            os.remove(os.path.join(root, "core/src/master/master.c"))
            with open(os.path.join(root, "core/src/master/master.c"), "w") as f:
                f.write(FIXTURE["core/src/master/master.c"])
            subprocess.run([cc, "-c", "-I" + os.path.join(root, "core/include"),
                            "-I" + os.path.join(root, "core/src"), "-o",
                            os.path.join(build, "core/src/master/master.o"),
                            os.path.join(root, "core/src/master/master.c")], check=True)
            expect("clean objects", root, build, 0, "")
    finally:
        shutil.rmtree(tmp)
    if failures:
        return 1
    print("check-layers self-test: ok (%d wrong-way fixtures caught)" % (len(BREAKS) + 1))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--objects", metavar="BUILD", help="also check calls between these objects")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    return run(os.path.abspath(a.root), a.objects and os.path.abspath(a.objects))


if __name__ == "__main__":
    sys.exit(main())
