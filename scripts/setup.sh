#!/usr/bin/env bash
# Installs everything segtrain needs on a Debian 12 machine and builds it.
# Idempotent: with nothing changed, a second run takes seconds.
#   apt packages (scripts/apt-packages.txt) -> .venv with torch + test packages -> cmake configure -> build
# Environment: TORCH_VERSION (default 2.13.0), BUILD_DIR (default build), BUILD_TYPE (default Release),
#              PYTHON (default python3), SEGTRAIN_SKIP_APT=1 to skip the apt step.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
PYTHON=${PYTHON:-python3}
VENV=$ROOT/.venv

say() { printf '[setup] %s\n' "$*" >&2; }

# --- apt --------------------------------------------------------------------
if [[ "${SEGTRAIN_SKIP_APT:-0}" != 1 ]]; then
  mapfile -t packages < <(grep -v '^\s*#' scripts/apt-packages.txt | grep -v '^\s*$')
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    say "installing Debian packages: ${missing[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# --- Python virtual environment ---------------------------------------------
want="torch==$TORCH_VERSION $(sha256sum scripts/requirements.txt | cut -c1-16)"
if [[ ! -x $VENV/bin/python ]]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [[ "$(cat "$VENV/.segtrain-stamp" 2>/dev/null)" != "$want" ]]; then
  say "installing torch==$TORCH_VERSION and test packages into .venv"
  pip() { "$VENV/bin/pip" "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
  pip install -q --upgrade pip >/dev/null
  pip install -q "torch==$TORCH_VERSION"
  # torch is pinned above; a later unpinned requirement must not replace it.
  pip install -q -r scripts/requirements.txt "torch==$TORCH_VERSION"
  echo "$want" >"$VENV/.segtrain-stamp"
fi

# --- configure and build ----------------------------------------------------
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]] || ! grep -q "CMAKE_BUILD_TYPE:STRING=$BUILD_TYPE\$" "$BUILD_DIR/CMakeCache.txt"; then
  say "configuring $BUILD_DIR ($BUILD_TYPE)"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DPython3_EXECUTABLE="$VENV/bin/python" >/dev/null
fi
say "building"
cmake --build "$BUILD_DIR" -- -j"${JOBS:-$(nproc)}"
