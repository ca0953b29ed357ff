#!/usr/bin/env bash
# The ATen ops a bf16 training step of segtrain runs on the CPU, by op, inputs and autograd node: the copies,
# adds and kernel launches a step (bench/op_census.py, its census library bench/op_census.cpp). Prints JSON.
# Counts, not times: the same on every run, so a change that removes a copy shows as a smaller count.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/op_census.py "$@"
