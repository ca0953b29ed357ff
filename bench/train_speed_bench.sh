#!/usr/bin/env bash
# Training speed: segtrain train vs an equivalent PyTorch loop, tokens/s and MFU
# (bench/train_bench.py speed). Prints JSON; run by bench/run.sh (`make bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build} exec .venv/bin/python bench/train_bench.py speed
