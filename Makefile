# Front door of the build. `make run` and `make test` are the README's two commands.
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc)
CMAKE_GEN  := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
SHARED     ?= ../shared
# `make run`: the model to serve. Empty: a random-weight llama-134m (F16) generated once into
# $(BUILD)/models, so that the server runs on any machine; pass MODEL=/path/to/model.gguf for a
# real one.
MODEL      ?=
RANDOM_MODEL := $(BUILD)/models/llama-134m-f16.gguf
HOST       ?= 127.0.0.1
PORT       ?= 8080
SERVE_ARGS ?=

# Every ctest run refuses to pass when it finds no test (a broken configuration, a wrong label).
CTEST      := ctest --output-on-failure --no-tests=error
# ccache where installed: the sanitizer and fuzz builds recompile everything otherwise.
LAUNCHER   := $(shell command -v ccache >/dev/null 2>&1 && echo "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache")
# The sanitizer builds: -O1 keeps them several times faster than -O0 with the same reports.
SAN_FLAGS  := -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" $(LAUNCHER)
# ThreadSanitizer runs: the modules with threads of their own or talking to a server on a socket
# (tests/CMakeLists.txt builds only these).
TSAN_LABELS ?= ^(core|kv|engine|server|redis)

.PHONY: all deps dev-deps test-deps configure configure-strata build build-strata build-asan build-tsan run test test-long \
  test-asan test-asan-binary test-tsan fuzz fuzz-request fuzz-build fuzz-short fuzz-seeds bench clean

all: build

# What building and running `strata` needs (Debian packages).
deps:
	@scripts/install-deps.sh

# And what the test, benchmark, sanitizer and fuzz builds need (GoogleTest, Google Benchmark,
# redis-server, clang, libFuzzer).
dev-deps:
	@scripts/install-deps.sh --dev

# What only the tests need beyond those: the openai npm client and Chromium (for the status
# page's browser test).
test-deps: dev-deps
	@scripts/install-test-deps.sh
	@scripts/install-browser-deps.sh

# The Release build with every target: tests and benchmarks too.
configure: dev-deps
	@cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_TESTS=ON -DSTRATA_BUILD_BENCH=ON >/dev/null

# `make run`'s: a new build directory is configured without the test and benchmark targets (so
# GoogleTest and Google Benchmark need not be installed); one that exists is left as configured.
configure-strata: deps
	@test -f $(BUILD)/CMakeCache.txt || \
	  cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCH=OFF >/dev/null

# Everything: libraries, `strata`, every test and benchmark binary (what `make test` needs).
build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Only what serving needs: the `strata` executable and the libraries it links.
build-strata: configure-strata
	@cmake --build $(BUILD) -j $(JOBS) --target strata

# Starts the OpenAI-compatible server (Ctrl-C stops it).
run: build-strata
ifeq ($(strip $(MODEL)),)
	@test -f $(RANDOM_MODEL) || { mkdir -p $(dir $(RANDOM_MODEL)) && \
	  $(BUILD)/bin/strata gguf make-random --preset llama-134m --dtype f16 \
	    --vocab-from $(SHARED)/tokenizer/ggml-vocab-llama-spm.gguf -o $(RANDOM_MODEL); }
	@echo "make run: serving a random-weight llama-134m ($(RANDOM_MODEL)); its text is noise."
	@echo "make run: to serve a real model: make run MODEL=/path/to/model.gguf"
	$(BUILD)/bin/strata serve --model $(RANDOM_MODEL) --host $(HOST) --port $(PORT) $(SERVE_ARGS)
else
	$(BUILD)/bin/strata serve --model $(MODEL) --host $(HOST) --port $(PORT) $(SERVE_ARGS)
endif

# Release build (with the CUDA backend where a toolkit is found) + every test; the `cuda` tests
# report SKIPPED without a GPU.
test: test-deps build
	$(CTEST) --test-dir $(BUILD) -j $(JOBS)

# What does not fit in `make test`'s time: every non-slow test again under ASan+UBSan (unit and
# black-box, against the sanitized binary), the ThreadSanitizer build and run, and a short run of
# both fuzz targets.
test-long: test-deps test-asan test-tsan fuzz-short

build-asan: dev-deps
	@cmake -S . -B $(ASAN_BUILD) $(CMAKE_GEN) $(SAN_FLAGS) -DSTRATA_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

# Every non-slow test under ASan+UBSan: the unit tests, and the binary's tests against the
# sanitized strata binary of $(ASAN_BUILD).
test-asan: build-asan
	$(CTEST) --test-dir $(ASAN_BUILD) -j $(JOBS) -LE slow

test-asan-binary: build-asan
	$(CTEST) --test-dir $(ASAN_BUILD) -j $(JOBS) -L binary -LE slow

build-tsan: dev-deps
	@cmake -S . -B $(TSAN_BUILD) $(CMAKE_GEN) $(SAN_FLAGS) -DSTRATA_TSAN=ON >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS)

# ThreadSanitizer over the thread pool, the cold store's I/O thread, the engine thread and the
# server (its black-box tests run the TSan binary); suppressions in tests/tsan.supp. The CPU SIMD
# kernel files are built without its instrumentation (src/backend/cpu/CMakeLists.txt).
test-tsan: build-tsan
	$(CTEST) --test-dir $(TSAN_BUILD) -j $(JOBS) -L '$(TSAN_LABELS)'

# libFuzzer (clang) for FUZZ_SECONDS (default 60), starting from the committed seed corpus; new
# inputs go to $(FUZZ_BUILD)/corpus*, crashes to fuzz/artifacts/. `make fuzz`: the GGUF parser;
# `make fuzz-request`: the server's request parsing (HTTP body -> request or 400).
FUZZ_SECONDS ?= 60
fuzz-build: dev-deps
	@cmake -S . -B $(FUZZ_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ $(LAUNCHER) -DSTRATA_FUZZ=ON -DSTRATA_BUILD_TESTS=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target gguf_fuzz request_fuzz

fuzz: fuzz-build
	mkdir -p $(FUZZ_BUILD)/corpus fuzz/artifacts
	$(FUZZ_BUILD)/fuzz/gguf_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 \
	  -artifact_prefix=fuzz/artifacts/ $(FUZZ_BUILD)/corpus fuzz/corpus

fuzz-request: fuzz-build
	mkdir -p $(FUZZ_BUILD)/corpus-request fuzz/artifacts
	$(FUZZ_BUILD)/fuzz/request_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -rss_limit_mb=2048 -dict=fuzz/request.dict \
	  -artifact_prefix=fuzz/artifacts/request- $(FUZZ_BUILD)/corpus-request fuzz/request_corpus

# Both targets for a short while (part of `make test-long`).
FUZZ_SHORT_SECONDS ?= 60
fuzz-short:
	$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_SHORT_SECONDS)
	$(MAKE) fuzz-request FUZZ_SECONDS=$(FUZZ_SHORT_SECONDS)

fuzz-seeds: build
	$(BUILD)/fuzz/gguf_fuzz_make_seeds fuzz/corpus

bench: build
	@ls $(BUILD)/bin/*_bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
