# Mooncake FS - the one entry point: all, run, test, asan, bench, install, clean.
# Quiet by default; V=1 prints every command.

PYTHON ?= /usr/bin/python3
CC ?= cc
PREFIX ?= /usr/local
MOUNT ?= ./mnt
SEGMENT_SIZE ?= 1G
BUILD ?= build

ifeq ($(V),1)
Q :=
else
Q := @
endif

SAN_FLAGS :=
ifeq ($(SAN),1)
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif

CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
BASE_CFLAGS = -std=gnu11 $(WARN) -fPIC -fvisibility=hidden -D_GNU_SOURCE -Icore/include -Icore/src $(BASE_CFLAGS_RDMA) $(SAN_FLAGS)
FUSE_CFLAGS = $(shell pkg-config --cflags fuse3 2>/dev/null)
FUSE_LIBS = $(shell pkg-config --libs fuse3 2>/dev/null || echo -lfuse3)
# The metrics endpoint (runtime/metrics.c) serves HTTP with libmicrohttpd,
# and the etcd client (runtime/etcd.c) speaks HTTP/JSON with libcurl and
# libjansson. libmicrohttpd and libcurl are loaded at their first use
# (runtime/dl.c: linked, their trees cost every process about 8 ms at
# start), so they are not linked: the build needs their headers only.
JANSSON_LIBS := $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson)
CORE_LIBS := -luring -lsodium $(JANSSON_LIBS) -ldl -lpthread
# RDMA: built in when pkg-config finds libibverbs and librdmacm, unless
# NO_RDMA=1 (then the transport's calls are stubs returning -ENOTSUP and
# protocol "rdma" fails at open; "auto" means TCP).
ifneq ($(NO_RDMA),1)
RDMA_LIBS := $(shell pkg-config --libs libibverbs librdmacm 2>/dev/null)
endif
ifneq ($(strip $(RDMA_LIBS)),)
BASE_CFLAGS_RDMA := -DMC_HAVE_RDMA
CORE_LIBS += $(RDMA_LIBS)
endif
LDFLAGS_ALL = $(SAN_FLAGS) $(LDFLAGS)
# mooncake-cli's `stats --json` writes with libjansson.
$(BUILD)/mooncake-cli: BIN_LIBS = $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson)

CORE_SRC := $(sort $(wildcard core/src/*/*.c))
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
FS_SRC := $(sort $(wildcard fs/*.c))
FS_OBJ := $(FS_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

BIN_MASTER := $(BUILD)/mooncake-master
BIN_CLI := $(BUILD)/mooncake-cli
BIN_OBJ := $(BUILD)/core/bin/mooncake-master.o $(BUILD)/core/bin/mooncake-cli.o
LIB_A := $(BUILD)/libmooncake.a
LIB_SO := $(BUILD)/libmooncake.so
FS_BIN := $(BUILD)/mooncake-fs
MC_BENCH := $(BUILD)/mc_bench

.PHONY: all deps check-deps run test test-unit test-integration asan bench install clean format format-check check-layers fuzz test-rdma bench-rdma
all: $(LIB_A) $(LIB_SO) $(BUILD)/mooncake.pc $(FS_BIN) $(BIN_MASTER) $(BIN_CLI) $(UNIT_BIN) $(MC_BENCH)

deps:
	$(Q)packaging/deps.sh

# check-deps runs before the first compile (an order-only prerequisite of
# every object): when a library `make all` needs is missing it names the
# Debian packages and `make deps` instead of letting the compiler stop on a
# missing header. One pkg-config call when all is there. The goals that run
# `make deps` first (run, test, bench) check after it. RDMA is optional
# (left out when libibverbs-dev or librdmacm-dev is missing).
BUILD_DEPS := fuse3=libfuse3-dev liburing=liburing-dev libsodium=libsodium-dev \
	libmicrohttpd=libmicrohttpd-dev jansson=libjansson-dev libcurl=libcurl4-openssl-dev \
	cmocka=libcmocka-dev
check-deps: $(if $(filter deps run test bench,$(MAKECMDGOALS)),| deps)
	@pkg-config --exists $(foreach d,$(BUILD_DEPS),$(firstword $(subst =, ,$(d)))) 2>/dev/null && \
	    command -v $(firstword $(CC)) >/dev/null && exit 0; \
	missing=""; command -v $(firstword $(CC)) >/dev/null || missing=" build-essential"; \
	command -v pkg-config >/dev/null || missing="$$missing pkg-config"; \
	for d in $(BUILD_DEPS); do \
	    pkg-config --exists $${d%%=*} 2>/dev/null || missing="$$missing $${d#*=}"; \
	done; \
	echo "missing Debian packages:$$missing" >&2; \
	echo "run \`make deps\` (packaging/deps.sh) to install them" >&2; exit 1

$(BUILD)/%.o: %.c | check-deps
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(BASE_CFLAGS) $(CFLAGS) $(if $(filter fs/%,$<),$(FUSE_CFLAGS)) -MMD -MP -c -o $@ $<

$(LIB_A): $(CORE_OBJ)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(CORE_OBJ) core/libmooncake.map
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -o $@ $(CORE_OBJ) -Wl,--version-script=core/libmooncake.map -Wl,-soname,libmooncake.so.0 $(LDFLAGS_ALL) $(CORE_LIBS)

$(FS_BIN): $(FS_OBJ) $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -o $@ $(FS_OBJ) $(LIB_A) $(LDFLAGS_ALL) $(FUSE_LIBS) $(CORE_LIBS)

# A static pattern rule: the programs' objects are targets of their own,
# kept between builds (not intermediate) and tracked by their .d files.
$(BIN_MASTER) $(BIN_CLI): $(BUILD)/mooncake-%: $(BUILD)/core/bin/mooncake-%.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -o $@ $< $(LIB_A) $(LDFLAGS_ALL) $(CORE_LIBS) $(BIN_LIBS)

# mooncake.pc for pkg-config: $(BUILD)/mooncake.pc names this build
# tree's library and headers (python/setup.py reads it); `make install`
# installs $(BUILD)/install/mooncake.pc, made for PREFIX. Both come from
# packaging/mooncake.pc.in (rules in the packaging section below).

$(BUILD)/tests/%: tests/unit/%.c $(LIB_A) $(FS_OBJ) $(wildcard tests/unit/*.h)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(BASE_CFLAGS) $(CFLAGS) -Ifs $(FUSE_CFLAGS) -o $@ $< $(filter-out $(BUILD)/fs/main.o,$(FS_OBJ)) $(LIB_A) $(LDFLAGS_ALL) -lcmocka $(FUSE_LIBS) $(CORE_LIBS)


run: deps all
	$(Q)mkdir -p $(MOUNT)
	@echo "mounting an embedded store at $(MOUNT) (Ctrl-C unmounts)"
	$(Q)$(FS_BIN) -f --segment-size $(SEGMENT_SIZE) $(MOUNT)

# Each suite of make test is a stage: tests/stage.sh prints its duration
# (and appends it to MC_STAGE_LOG, which .ci/run sums up).
STAGE = tests/stage.sh $(if $(filter 1,$(SAN)),asan-)$(1)
# The integration stage drives the Python client too (test_restart): the
# extension is built first, except under the sanitizers (it cannot load).
# The model checker mostly waits (its 90 s took 17 s of CPU here), so it
# runs alongside the fuzz and packaging stages (tests/alongside.sh), which
# keep the CPUs busy and depend on no timing: the fuzz targets run for a
# fixed time, the package builds, and the model checker's rounds take as
# long as they take within its fixed time.
test: deps all $(if $(filter 1,$(SAN)),,python-ext) format-check check-layers
	$(Q)$(call STAGE,unit) tests/run-unit.sh $(BUILD)
ifneq ($(SAN),1)
	$(Q)$(call STAGE,rdma-vm) $(MAKE) --no-print-directory test-rdma
endif
	$(Q)MC_BUILD=$(BUILD) $(call STAGE,integration) $(PYTHON) -m pytest -q -rs --durations=15 $(PYTEST_JOBS) $(INTEGRATION)
	$(Q)$(call STAGE,python) $(MAKE) --no-print-directory python-test
ifneq ($(SAN),1)
	$(Q)tests/alongside.sh $(BUILD)/model.log $(call STAGE,model) $(MAKE) --no-print-directory test-model \
	    -- $(MAKE) --no-print-directory test-fuzz-packaging
endif

# The stages of make test that run alongside the model checker.
.PHONY: test-fuzz-packaging
test-fuzz-packaging:
	$(Q)$(call STAGE,fuzz) tests/fuzz/run.sh $(FUZZ_CI_SECONDS)
	$(Q)$(call STAGE,packaging) $(MAKE) --no-print-directory test-packaging

# make fuzz FUZZ_SECONDS=300: every libFuzzer target, for that long in all.
FUZZ_SECONDS ?= 120
FUZZ_CI_SECONDS ?= 30
fuzz:
	$(Q)tests/fuzz/run.sh $(FUZZ_SECONDS)

# The model checker (tests/model): random operations and faults against the
# real store, every read checked against a reference model. `make soak
# SECONDS=1800` runs it that long over every configuration from a random
# seed (MC_MODEL_SEED=N replays one; MC_MODEL_FAULTS=enospc,... picks the
# fault classes); `make test-model` is the short, fixed-seed run of make test.
SECONDS ?= 600
MODEL_SECONDS ?= 90
.PHONY: soak test-model
soak: all python-ext
	$(Q)MC_BUILD=$(BUILD) $(PYTHON) tests/model/run.py --seconds $(SECONDS) \
		$(if $(MC_MODEL_SEED),,--random) --examples 5 --steps 40

test-model: all python-ext
	$(Q)MC_BUILD=$(BUILD) $(PYTHON) tests/model/run.py --seconds $(MODEL_SECONDS)

test-unit: all
	$(Q)tests/run-unit.sh $(BUILD)

# INTEGRATION=tests/integration/test_x.py ... runs only those integration
# tests (.ci/run's make asan does).
INTEGRATION ?= tests/integration
# TEST_JOBS=N: the integration and Python suites run their test files on N
# processes (pytest-xdist, Debian's python3-pytest-xdist; a file's tests
# stay together on one, in order); 1 runs them in this process. Most of
# their time is waiting (for leases to end, nodes to expire, a master to
# restart, a FUSE or io_uring wait): with 2 processes on 2 cores the CPUs
# were busy half the time (/proc/stat: 50% user and system, 44% iowait), so
# 4 processes take the integration suite from 229 s to 147 s, and 146 s
# under the sanitizers (from 225 to 257 s). Every test makes its own
# processes, ports and directories, so files do not share anything.
TEST_JOBS ?= 4
PYTEST_JOBS = $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile)
asan:
	$(Q)MC_SANITIZED=1 $(MAKE) --no-print-directory BUILD=build-asan SAN=1 CFLAGS="-O1 -g" test

# make bench: the mount, the cluster and the Python client next to their
# baselines, in one run; writes bench/out/report.md and its plots
# (bench/run.sh). mc_bench (bench/cluster.sh's client) links what the
# library links. BENCH_BASE=REV then compares REV with the working tree:
# embedded 1 KiB put/get and the mount's write/read (bench/compare.sh).
# make all builds it too, so that a measure by hand never runs a stale one.
$(MC_BENCH): bench/mc_bench.c $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CPPFLAGS) -std=gnu11 -O2 -g $(WARN) -Icore/include -o $@ $< $(LIB_A) $(LDFLAGS_ALL) $(CORE_LIBS)
bench: deps all python-ext $(MC_BENCH)
	$(Q)MC_BUILD=$(BUILD) MC_BENCH=$(MC_BENCH) PYTHON=$(PYTHON) bench/run.sh
ifneq ($(BENCH_BASE),)
	$(Q)MC_BUILD=$(BUILD) bench/compare.sh $(BENCH_BASE)
	$(Q){ echo; cat bench/out/compare.md; } >>bench/out/report.md
endif

# make test-rdma: the RDMA transport, for real, on Soft-RoCE in a QEMU VM
# running Debian's kernel (installs qemu and the kernel the first time;
# skips with the reason when they cannot be had). REQUIRE_RDMA=1 makes that
# skip a failure (for a CI machine that must run it).
RDMA_SELFTEST := $(BUILD)/tests/rdma_selftest
RDMA_SELFTEST_SRC := tests/rdma/rdma_selftest.c core/src/transport/transport_rdma.c \
	core/src/transport/rdma_io.c core/src/transport/rdma_desc.c core/src/runtime/loop.c \
	core/src/runtime/loop_io.c core/src/runtime/log.c core/src/runtime/forkfd.c
$(RDMA_SELFTEST): $(RDMA_SELFTEST_SRC) core/src/transport/transport_rdma.h core/src/transport/rdma_i.h \
	core/src/runtime/loop_i.h core/src/runtime/loop_ring.h core/src/runtime/log.h | check-deps
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(BASE_CFLAGS) $(CFLAGS) -DMC_HAVE_RDMA -o $@ $(RDMA_SELFTEST_SRC) $(LDFLAGS_ALL) $(RDMA_LIBS) -luring -lpthread

# The zero-copy API over RDMA (mc_register_buffer), run by vm-cluster.sh.
RDMA_ZC_CHECK := $(BUILD)/tests/zc_check
$(RDMA_ZC_CHECK): tests/rdma/zc_check.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(BASE_CFLAGS) $(CFLAGS) -Icore/include -o $@ $< $(LIB_A) $(LDFLAGS_ALL) $(CORE_LIBS)

# Inside the VM: the transport selftest, then a master and two nodes with
# protocol rdma (tests/rdma/vm-cluster.sh); the image carries our binaries,
# their libraries (ldd), fusermount3 and the fuse module.
RDMA_VM_BINS = $(RDMA_SELFTEST) $(RDMA_ZC_CHECK) $(BIN_MASTER) $(BIN_CLI) $(FS_BIN) tests/rdma/vm-selftest.sh \
	$(wildcard /usr/bin/fusermount3)
# run-vm.sh writes why it skips to MC_VM_SKIP_FILE; RDMA_SKIPPED reports it
# as the last line ($(1): the target's name), and in MC_STAGE_LOG for
# .ci/run's summary, and, for test-rdma under REQUIRE_RDMA=1, fails.
RDMA_SKIP_FILE = $(BUILD)/rdma-vm/skip-reason
RDMA_SKIPPED = if [ $$rc -eq 77 ]; then \
	    msg="$(1): SKIPPED: $$(cat $(RDMA_SKIP_FILE) 2>/dev/null || echo 'no reason given')"; \
	    echo "$$msg"; [ -z "$${MC_STAGE_LOG:-}" ] || echo "$$msg" >>"$$MC_STAGE_LOG"; \
	    if [ "$(1)$(REQUIRE_RDMA)" = test-rdma1 ]; then \
	        echo "$(1): FAIL: REQUIRE_RDMA=1 and the RDMA VM test could not run"; rc=1; \
	    else rc=0; fi; \
	fi; exit $$rc
test-rdma:
	$(Q)rc=0; mkdir -p $(BUILD)/rdma-vm && rm -f $(RDMA_SKIP_FILE); \
	export MC_VM_SKIP_FILE=$(RDMA_SKIP_FILE); \
	tests/rdma/run-vm.sh --deps || rc=$$?; \
	if [ $$rc -eq 0 ]; then \
	    $(MAKE) --no-print-directory $(RDMA_SELFTEST) $(RDMA_ZC_CHECK) all && \
	    MC_VM_MEM=$${MC_VM_MEM:-2048} tests/rdma/run-vm.sh -w $(BUILD)/rdma-vm -t 400 \
	        tests/rdma/vm-cluster.sh $(RDMA_VM_BINS) || rc=$$?; \
	fi; \
	$(call RDMA_SKIPPED,test-rdma)

# make bench-rdma: 1 MiB gets over RDMA and over TCP in the same VM, as a
# ratio. Soft-RoCE under QEMU's emulation proves behaviour, not speed.
bench-rdma:
	$(Q)rc=0; mkdir -p $(BUILD)/rdma-vm && rm -f $(RDMA_SKIP_FILE); \
	export MC_VM_SKIP_FILE=$(RDMA_SKIP_FILE); \
	tests/rdma/run-vm.sh --deps || rc=$$?; \
	if [ $$rc -eq 0 ]; then \
	    $(MAKE) --no-print-directory all $(MC_BENCH) && \
	    MC_VM_MEM=$${MC_VM_MEM:-2048} tests/rdma/run-vm.sh -w $(BUILD)/rdma-vm -t 400 \
	        tests/rdma/vm-bench.sh $(BIN_MASTER) $(BIN_CLI) $(MC_BENCH) || rc=$$?; \
	fi; \
	$(call RDMA_SKIPPED,bench-rdma)

# ---- Packaging: install, man pages, pkg-config, systemd units, .debs ----
# make install PREFIX=/usr/local (DESTDIR= for staging) installs the
# programs, libmooncake (shared, static, headers, mooncake.pc), the man
# pages (scdoc, from docs/man) and the systemd units; make uninstall
# removes them. make deb builds the Debian packages into $(BUILD)/deb (the
# tree staged in a temporary directory with packaging/debian as debian/);
# make test-packaging checks the man pages against --help, builds the
# packages, runs lintian and installs them in a clean root
# (tests/packaging/install-test.py); make test runs it (about a minute).
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
UNITDIR ?= $(PREFIX)/lib/systemd/system
VERSION := $(shell sed -n 's/^\#define MC_VERSION_STRING "\(.*\)"/\1/p' core/include/mooncake/mooncake.h)
MAN_PAGES := $(patsubst docs/man/%.scd,$(BUILD)/man/%,$(wildcard docs/man/*.scd))
UNITS := $(BUILD)/systemd/mooncake-master.service $(BUILD)/systemd/mooncake-fs@.service
INSTALLED_PROGRAMS := $(FS_BIN) $(BIN_MASTER) $(BIN_CLI)
# Rewrites $@ from $< with the install directories filled in, and only when
# that changes it: a later PREFIX=... rewrites it, an unchanged one does not.
SUBST_DIRS = mkdir -p $(dir $@); \
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    -e 's|@LIBS_PRIVATE@|$(strip $(CORE_LIBS))|g' $< >$@.tmp && \
	if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

.PHONY: man pc units uninstall deb test-packaging FORCE
man: $(MAN_PAGES)
pc: $(BUILD)/mooncake.pc $(BUILD)/install/mooncake.pc
units: $(UNITS)

$(BUILD)/man/%: docs/man/%.scd
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  SCDOC   $@")
	$(Q)scdoc <$< >$@.tmp && mv $@.tmp $@

$(BUILD)/install/mooncake.pc: packaging/mooncake.pc.in FORCE
	$(Q)$(SUBST_DIRS)

# The build tree's own, for building against it in place.
$(BUILD)/mooncake.pc: override PREFIX = $(abspath $(BUILD))
$(BUILD)/mooncake.pc: override LIBDIR = $(abspath $(BUILD))
$(BUILD)/mooncake.pc: override INCLUDEDIR = $(abspath core/include)
$(BUILD)/mooncake.pc: packaging/mooncake.pc.in FORCE
	$(Q)$(SUBST_DIRS)

$(BUILD)/systemd/%: packaging/systemd/%.in FORCE
	$(Q)$(SUBST_DIRS)

install: $(LIB_A) $(LIB_SO) $(INSTALLED_PROGRAMS) $(MAN_PAGES) $(BUILD)/install/mooncake.pc $(UNITS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/mooncake \
	    $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man1 \
	    $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man8
	install -m 755 $(INSTALLED_PROGRAMS) $(DESTDIR)$(BINDIR)/
	install -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	install -m 644 $(LIB_SO) $(DESTDIR)$(LIBDIR)/libmooncake.so.0
	ln -sf libmooncake.so.0 $(DESTDIR)$(LIBDIR)/libmooncake.so
	install -m 644 core/include/mooncake/*.h $(DESTDIR)$(INCLUDEDIR)/mooncake/
	install -m 644 $(BUILD)/install/mooncake.pc $(DESTDIR)$(PKGCONFIGDIR)/
	install -m 644 $(UNITS) $(DESTDIR)$(UNITDIR)/
	$(foreach m,$(MAN_PAGES),install -m 644 $(m) $(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m)))/ &&) true

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(INSTALLED_PROGRAMS))) \
	    $(addprefix $(DESTDIR)$(LIBDIR)/,libmooncake.a libmooncake.so libmooncake.so.0) \
	    $(DESTDIR)$(PKGCONFIGDIR)/mooncake.pc $(addprefix $(DESTDIR)$(UNITDIR)/,$(notdir $(UNITS))) \
	    $(foreach m,$(MAN_PAGES),$(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m)))
	rm -rf $(DESTDIR)$(INCLUDEDIR)/mooncake

deb:
	$(Q)packaging/deps.sh deb
	$(Q)packaging/build-deb.sh $(BUILD)/deb

test-packaging: $(INSTALLED_PROGRAMS)
	$(Q)packaging/deps.sh deb
	$(Q)MC_BUILD=$(BUILD) $(PYTHON) -m pytest -q -rs tests/packaging
	$(Q)packaging/build-deb.sh $(BUILD)/deb
	$(Q)lintian --fail-on error $(BUILD)/deb/*.changes
	$(Q)$(PYTHON) tests/packaging/install-test.py $(BUILD)/deb

FORMAT_SRC = $(wildcard core/include/mooncake/*.h core/src/*/*.[ch] core/bin/*.c fs/*.[ch] tests/unit/*.[ch] tests/fuzz/*.c tests/rdma/*.c python/mooncake/*.c)
format:
	$(Q)clang-format -i $(FORMAT_SRC)

format-check:
	$(Q)clang-format --dry-run -Werror $(FORMAT_SRC)

# The layers of core/src (docs/ARCHITECTURE.md, "Layers"): every include and
# every call between objects goes down the table in tests/check-layers.py,
# whose self-test first proves it catches wrong-way uses.
check-layers: $(CORE_OBJ) $(FS_OBJ) $(BIN_OBJ)
	$(Q)$(PYTHON) tests/check-layers.py --self-test
	$(Q)$(PYTHON) tests/check-layers.py --objects $(BUILD)

clean:
	rm -rf build build-asan build-nordma $(BUILD) python/mooncake/_store*.so python/build python/*.egg-info

-include $(CORE_OBJ:.o=.d) $(FS_OBJ:.o=.d) $(BIN_OBJ:.o=.d)
-include python/python.mk
