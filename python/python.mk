# python/python.mk - the Python package (mooncake.store, mooncake.async_store).
# Included by the top-level Makefile, which defines PYTHON, BUILD and Q.
#
#   python-ext    builds the C extension in place (PYTHONPATH=python works)
#   python-test   runs python/tests with $(PYTHON) (Debian's pytest); the
#                 cluster tests start mooncake-master, mooncake-cli nodes and
#                 mooncake-fs mounts on loopback
#   python-wheel  builds the wheel offline into $(BUILD)/python/dist
#
# Under SAN=1 (make asan) the suite is skipped: an extension linked with the
# sanitized libmooncake would need the ASan runtime preloaded into Python.

PY_EXT_SUFFIX := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
PY_EXT := python/mooncake/_store$(PY_EXT_SUFFIX)
PY_BUILD := $(abspath $(BUILD))/python

.PHONY: python-ext python-test python-wheel

python-ext: $(PY_EXT)

$(PY_EXT): $(wildcard python/mooncake/_store*.[ch]) python/setup.py $(BUILD)/libmooncake.a $(BUILD)/mooncake.pc \
           core/include/mooncake/mooncake.h core/include/mooncake/loop.h
	@$(if $(Q),echo "  PYEXT   $@")
	$(Q)cd python && MC_LIBMOONCAKE=$(abspath $(BUILD))/libmooncake.a \
	    $(PYTHON) -W ignore setup.py -q build_ext --inplace --force \
	    --build-temp $(PY_BUILD)/temp --build-lib $(PY_BUILD)/lib

ifeq ($(SAN),1)
python-test:
	@echo "python: skipped under sanitizers (the extension would need the ASan runtime preloaded)"
else
python-test: python-ext $(BUILD)/mooncake-fs $(BUILD)/mooncake-master $(BUILD)/mooncake-cli
	$(Q)MC_BUILD=$(BUILD) PYTHONPATH=python $(PYTHON) -m pytest -q -rs $(PYTEST_JOBS) python/tests
endif

python-wheel: $(BUILD)/libmooncake.a $(BUILD)/mooncake.pc
	$(Q)cd python && MC_LIBMOONCAKE=$(abspath $(BUILD))/libmooncake.a \
	    $(PYTHON) -m pip wheel -q --no-build-isolation --no-deps --no-index -w $(PY_BUILD)/dist .
