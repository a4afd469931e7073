# Front door of the build. `make run` and `make test` are the README's two commands.
BUILD      ?= build
ASAN_BUILD ?= build-asan
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

.PHONY: all deps test-deps build build-asan run test test-asan fuzz fuzz-seeds bench clean

all: build

deps:
	@scripts/install-deps.sh

# What only the tests need: the openai npm client and Chromium (for the status page's browser test).
test-deps: deps
	@scripts/install-test-deps.sh
	@scripts/install-browser-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Starts the OpenAI-compatible server (Ctrl-C stops it).
run: build
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

# Release build + every test, then the unit tests again under ASan+UBSan (slow tests left out).
test: test-deps build build-asan
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -LE slow

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" \
	  -DSTRATA_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

test-asan: build-asan
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -LE slow

# libFuzzer on the GGUF parser for FUZZ_SECONDS (default 60), starting from the seed corpus.
FUZZ_SECONDS ?= 60
fuzz: deps
	@cmake -S . -B $(FUZZ_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DSTRATA_FUZZ=ON -DSTRATA_BUILD_TESTS=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target gguf_fuzz
	mkdir -p $(FUZZ_BUILD)/corpus fuzz/artifacts
	$(FUZZ_BUILD)/fuzz/gguf_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 \
	  -artifact_prefix=fuzz/artifacts/ $(FUZZ_BUILD)/corpus fuzz/corpus

fuzz-seeds: build
	$(BUILD)/fuzz/gguf_fuzz_make_seeds fuzz/corpus

bench: build
	@ls $(BUILD)/bin/*_bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
