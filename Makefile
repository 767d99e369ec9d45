# The two set-up commands of the README: `make run` and `make test`.
# Both install missing Debian packages (deploy/debian-packages.txt), configure
# and build with CMake, then run. Everything else lives in CMakeLists.txt.

BUILD   ?= build
ASAN    ?= build-asan
TSAN    ?= build-tsan
JOBS    ?= $(shell nproc)
MAKEFLAGS += --no-print-directory
CMAKE_FLAGS ?=

.PHONY: all deps configure build test e2e run demo install sanitize tsan cross-aarch64 format clean

all: build

deps:
	@sh tools/install-deps.sh deploy/debian-packages.txt

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# A frontend nobody here wrote the model code of, end to end (client/python/e2e):
# transformers' Qwen3-Next and Qwen3.5 on CPU load the running state hypic-cached
# delivers over shared memory into their own cache object and decode from it; in mode
# full the 32 tokens must equal transformers' own prefill-and-decode. Its own venv with
# the pinned torch stack (client/python/requirements-e2e.txt; the first run downloads
# about 3 GB from PyPI), against daemons the test starts and always stops.
#
# Then an engine people serve with: vLLM's CPU build with hypic.vllm's HypicConnector on
# two tiny hybrids (Qwen3.5, Qwen3-Next) that hypic-cached serves from the same files:
# the loaded state, the first token and the greedy decode against the daemon's pic
# answer, the fail-closed cases, prefix caching on (tests/client/test_vllm.sh). Its own
# venv (client/python/requirements-vllm.txt, tools/vllm/venv.sh; the first run
# downloads about 3.5 GB).
E2E_VENV ?= $(BUILD)/e2e-venv
VLLM_VENV ?= $(BUILD)/vllm-venv
e2e: build
	@sh tests/client/test_frontend.sh $(BUILD)/cached/hypic-cached $(E2E_VENV)
	@sh tests/client/test_vllm.sh $(BUILD)/cached/hypic-cached $(VLLM_VENV)

# The main job: hypic-cached in the foreground on the embedded default, the
# trained model models/hypic-recall (committed: no download, nothing to
# generate); the host tier in RAM and the NVMe tier under var/nvme;
# 127.0.0.1:7878 for gRPC, :7879 for /metrics. A second one beside the first
# needs its own of all three: make run PORT=N HTTP_PORT=M NVME_DIR=DIR.
# Ctrl-C drains and stops it cleanly. Once it is serving, tools/run.sh prints
# the hypicctl commands that send it one of the model's held-out requests
# (models/hypic-recall/examples: four documents and a question).
PORT ?= 7878
HTTP_PORT ?= 7879
NVME_DIR ?= var/nvme
run: build
	@sh tools/run.sh $(BUILD) $(PORT) $(HTTP_PORT) $(NVME_DIR)

# The service end to end, in the background: warms a small document set,
# prefills the documents in shuffled orders in every mode through hypicctl,
# prints TTFT per mode and the cache's statistics, and stops the daemon.
demo: build
	@sh tools/demo.sh $(BUILD)

# The C client for programs outside the tree, into PREFIX (make install
# PREFIX=$HOME/.local): lib/libhypic-client.so (versioned) and .a, each
# holding the modules it uses, include/hypic/hypic_client.h with the
# hypic.pb-c.h it includes, lib/pkgconfig/hypic-client.pc and
# hypic-client-static.pc (docs/api.md#building-against-the-installed-client).
# Builds those two libraries only; `cmake --install $(BUILD) --prefix DIR`
# does the same after a build.
PREFIX ?= /usr/local
install: configure
	@cmake --build $(BUILD) -j$(JOBS) --target hypic_client_shared hypic_client_static
	@cmake --install $(BUILD) --prefix $(PREFIX)

# AddressSanitizer + UndefinedBehaviorSanitizer build running the same tests.
sanitize: deps
	@cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DHY_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN) -j$(JOBS)
	@cd $(ASAN) && ctest --output-on-failure -j$(JOBS)

# ThreadSanitizer over the store's multi-threaded tests (the store does not
# use OpenMP, whose runtime TSan cannot see into). Not test_nvme_journal: it
# reopens RocksDB many times, and Debian's librocksdb is not instrumented, so
# TSan reports its background threads' own bookkeeping; the journal's
# concurrency runs under TSan in test_nvme's four-thread case.
TSAN_TESTS = test_store test_tier_moves test_nvme test_arena test_policy
tsan: deps
	@cmake -S . -B $(TSAN) -DCMAKE_BUILD_TYPE=Debug -DHY_TSAN=ON >/dev/null
	@cmake --build $(TSAN) -j$(JOBS) --target $(TSAN_TESTS)
	@cd $(TSAN) && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --output-on-failure -R "^($(shell echo $(TSAN_TESTS) | tr ' ' '|'))$$"

# The CPU parts cross-compiled for aarch64 (Grace-class hosts) with Debian's
# gcc-aarch64-linux-gnu and the target's libraries through multiarch; checks
# that the outputs are aarch64 code (tools/cross-aarch64.sh says what it
# installs and why the store is compiled but not linked there).
cross-aarch64:
	@sh tools/cross-aarch64.sh build-aarch64

format:
	@git ls-files '*.c' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN) $(TSAN) build-aarch64 $(FUZZ)

# libFuzzer targets (tests/fuzz: the request decoders, the entry deserialiser,
# the nvme tier's records) built with clang, ASan and UBSan in $(FUZZ), each
# run for FUZZ_SECONDS from a copy of its committed seed corpus; fails on any
# crash (the input is left in $(FUZZ)/fuzz-run/<target>/).
FUZZ         ?= build-fuzz
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz: deps
	@CC=clang cmake -S . -B $(FUZZ) -DCMAKE_BUILD_TYPE=Debug -DHY_FUZZ=ON -DHY_WITH_CUDA=OFF >/dev/null
	@cmake --build $(FUZZ) -j$(JOBS) --target fuzz_all
	@FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run.sh $(FUZZ)
