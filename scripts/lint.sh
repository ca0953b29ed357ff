#!/usr/bin/env bash
# `make lint`: .clang-tidy's checks (no product function over 100 lines) with clang-tidy 16
# over every product source (common/, data/, models/, trainer/, launch/; not tests/ or bench/),
# compiled as build/compile_commands.json says. Installs clang-tidy-16 through scripts/setup.sh
# (scripts/apt-packages-lint.txt), which also configures and builds build/ when it is missing.
# Exits 1 naming each function over the limit (file:line and its length).
# Environment: LINT_JOBS (default: the number of cores), BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SEGTRAIN_APT_LISTS="scripts/apt-packages.txt scripts/apt-packages-lint.txt" bash scripts/setup.sh
mapfile -t sources < <(git ls-files 'common/*.cpp' 'data/*.cpp' 'models/*.cpp' 'trainer/*.cpp' 'launch/*.cpp')
echo "[lint] clang-tidy (.clang-tidy: readability-function-size <= 100 lines) on ${#sources[@]} product sources" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
printf '%s\n' "${sources[@]}" |
  xargs -P "${LINT_JOBS:-$(nproc)}" -n 4 clang-tidy-16 -p "$BUILD" --quiet >"$log" 2>&1 || status=$?
if ((status != 0)); then
  grep -E "error:|warning:" "$log" >&2 || cat "$log" >&2
  echo "[lint] failed: split the functions above (or mark a declarative table with its reason)" >&2
  exit 1
fi
echo "[lint] ok: no product function over 100 lines" >&2
