# s4d: the README's commands. `make` builds, `make test` runs every CPU test,
# `make demo` runs the main job. Each installs missing Debian packages first.
PYTHON    ?= /usr/bin/python3
BUILD     ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 30
SOAK_FRAMES ?= 2000
JOBS      ?= $(shell nproc)
CMAKE_ARGS ?=
PRESET    ?= tiny
PRECISION ?= fp32

.PHONY: all deps deps-test build python test test-deps test-c test-python test-asan fuzz fuzz-build soak \
        demo clean

all: build python

deps:
	@scripts/install-deps.sh build

deps-test:
	@scripts/install-deps.sh test

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The PyTorch extension, built in place so that PYTHONPATH=python imports s4d.
python: deps
	@if [ -f python/setup.py ]; then \
	  echo "building the PyTorch extension (python/s4d)"; \
	  cd python && $(PYTHON) setup.py -q build_ext --inplace; \
	fi

test: deps-test all
	@$(MAKE) --no-print-directory test-deps test-c test-python test-asan fuzz

# Every Debian package the build used must come from scripts/install-deps.sh.
test-deps:
	@tests/deps/test_check_deps.sh $(BUILD)

test-c:
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

test-python:
	@if [ -d tests/python ]; then \
	  PYTHONPATH=$(CURDIR)/python S4D_BUILD=$(CURDIR)/$(BUILD) $(PYTHON) -m pytest -q tests/python; \
	fi

# The C test suite again under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: deps-test
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DS4D_CUDA=OFF -DS4D_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 900 -LE no_asan

# The libFuzzer targets (clang, ASan + UBSan), each run for FUZZ_SECONDS over the
# committed corpus (tests/fuzz/README.md); `make test` runs them briefly.
fuzz-build: deps-test
	@CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DS4D_CUDA=OFF \
	  -DS4D_FUZZ=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets

fuzz: fuzz-build
	@for t in onnx engine npy; do \
	  tests/fuzz/run_fuzz.sh $$t $(FUZZ_SECONDS) $(FUZZ_BUILD) || exit 1; \
	done

# The soak test's long mode: SOAK_FRAMES frames of the tiny head in one process.
soak: all
	@SOAK_FRAMES=$(SOAK_FRAMES) PYTHON=$(PYTHON) tests/soak/run_soak.sh $(CURDIR) \
	  $(BUILD)/bin/soak $(BUILD)/lib/libs4d_plugins.so $(BUILD)/soak

demo: all
	@PRESET=$(PRESET) PRECISION=$(PRECISION) BUILD=$(BUILD) PYTHON=$(PYTHON) scripts/demo.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
	find python -name '*.so' -delete
