# The two set-up commands of the README: `make run` and `make test`.
# Both install missing Debian packages (deploy/debian-packages.txt), configure
# and build with CMake, then run. Everything else lives in CMakeLists.txt.

BUILD   ?= build
ASAN    ?= build-asan
TSAN    ?= build-tsan
JOBS    ?= $(shell nproc)
MAKEFLAGS += --no-print-directory
CMAKE_FLAGS ?=

.PHONY: all deps configure build test run sanitize tsan cross-aarch64 format clean

all: build

deps:
	@sh tools/install-deps.sh deploy/debian-packages.txt

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The main job. Until the service (hypic-cached) exists this runs the embedded
# executor: it generates the tiny default model once (no download) and prefills
# a prompt on it, printing the next-token candidates and the time taken.
run: build
	@test -f run/tiny/config.json || $(BUILD)/tools/hypic-model init --preset tiny --seed 1 --out run/tiny
	@$(BUILD)/tools/hypic-model info run/tiny
	@$(BUILD)/tools/hypic-model run run/tiny --text "Hybrid models keep a constant-size state per linear layer."

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
TSAN_TESTS = test_store test_store_tiers3 test_nvme test_arena test_policy
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
	rm -rf $(BUILD) $(ASAN) $(TSAN) build-aarch64
