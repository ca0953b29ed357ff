#!/usr/bin/env bash
# `make lint`: .clang-tidy's checks (no product function over 100 lines) with clang-tidy 16
# over every product source (common/, data/, models/, trainer/, launch/; not tests/ or bench/),
# compiled as build/compile_commands.json says. Installs clang-tidy-16 through scripts/setup.sh
# (scripts/apt-packages-lint.txt), which also configures and builds build/ when it is missing.
# Exits 1 naming each function over the limit (file:line and its length).
# Environment: LINT_JOBS (default: the number of cores), BUILD_DIR (default build), SEGTRAIN_CACHE
# (default ~/.cache/segtrain): lint/ there records the keys of sources that passed (scripts/lint_keys.py).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SEGTRAIN_APT_LISTS="scripts/apt-packages.txt scripts/apt-packages-lint.txt" bash scripts/setup.sh
mapfile -t sources < <(git ls-files 'common/*.cpp' 'data/*.cpp' 'models/*.cpp' 'trainer/*.cpp' 'launch/*.cpp')
cache=${SEGTRAIN_CACHE:-$HOME/.cache/segtrain}/lint
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
clang-tidy-16 --version >"$work/tool-version"
# A source whose key (scripts/lint_keys.py: tool, .clang-tidy, command, every file the unit
# reads) passed before is not parsed again; a failure is never recorded, so it is reported each run.
python3 scripts/lint_keys.py "$BUILD" "$work/tool-version" "${sources[@]}" >"$work/keys"
awk -v cache="$cache" '$2 == "-" || system("test -e " cache "/" $2) != 0' "$work/keys" >"$work/todo"
echo "[lint] clang-tidy (.clang-tidy: readability-function-size <= 100 lines) on ${#sources[@]} product sources," \
  "$(wc -l <"$work/todo") of them changed since they last passed" >&2
# One clang-tidy a source, so that each one that passes is recorded by itself.
check_one() {
  local source=$1 key=$2 log
  log=$3/$(echo "$source" | tr / _).log
  if clang-tidy-16 -p "$4" --quiet "$source" >"$log" 2>&1; then
    [[ $key == - ]] || touch "$5/$key"
  else
    return 1
  fi
}
export -f check_one
status=0
awk -v b="$BUILD" -v c="$cache" 'NF {print $1, $2, b, c}' "$work/todo" |
  xargs -r -P "${LINT_JOBS:-$(nproc)}" -L 1 bash -c 'check_one "$1" "$2" "$0" "$3" "$4"' "$work" || status=$?
if ((status != 0)); then
  cat "$work"/*.log | grep -E "error:|warning:" >&2 || cat "$work"/*.log >&2
  echo "[lint] failed: split the functions above (or mark a declarative table with its reason)" >&2
  exit 1
fi
echo "[lint] ok: no product function over 100 lines" >&2
