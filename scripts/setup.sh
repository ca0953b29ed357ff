#!/usr/bin/env bash
# Installs everything segtrain needs on a Debian 12 machine and builds it.
# Idempotent: with nothing changed, a second run takes seconds.
#   apt packages (scripts/apt-packages.txt) -> venv with torch + test packages -> cmake configure -> build
# Environment: TORCH_VERSION (default 2.13.0), BUILD_DIR (default build), BUILD_TYPE (default Release),
#              PYTHON (default python3), SEGTRAIN_VENV (default .venv, or .venv-cuda),
#              SEGTRAIN_SKIP_APT=1 to skip the apt step,
#              SEGTRAIN_APT_LISTS (default scripts/apt-packages.txt; `make fuzz` adds
#              scripts/apt-packages-fuzz.txt), SEGTRAIN_SKIP_BUILD=1 to stop after the venv,
#              SEGTRAIN_CUDA=1 for the CUDA configuration: the CUDA build of torch (default 2.14.1) in
#              .venv-cuda, built in build-cuda with nvcc ($CUDACXX, PATH, $CUDA_HOME or /usr/local/cuda)
#              for TORCH_CUDA_ARCH_LIST (default 8.0;9.0 when no GPU is visible).
#              SEGTRAIN_BUILD_TARGETS (default all): the CMake targets to build, e.g. "segtrain";
#              SEGTRAIN_TORCH_PYTHON=/path/to/python3: build against the torch already installed for
#              that Python (the venv sees its packages; nothing is pip-installed over them);
#              SEGTRAIN_OFFLINE=DIR (from scripts/pack_offline.sh): no apt-get and no pip: the
#              packed Debian packages are unpacked into SEGTRAIN_OFFLINE_PREFIX (default
#              DIR/prefix; `make gpu-session` unpacks outside the tree) and built against
#              (needs SEGTRAIN_TORCH_PYTHON).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CUDA=${SEGTRAIN_CUDA:-0}
if [[ $CUDA == 1 ]]; then
  TORCH_VERSION=${TORCH_VERSION:-2.14.1}
  BUILD_DIR=${BUILD_DIR:-build-cuda}
  VENV=${SEGTRAIN_VENV:-$ROOT/.venv-cuda}
else
  TORCH_VERSION=${TORCH_VERSION:-2.13.0}
  BUILD_DIR=${BUILD_DIR:-build}
  VENV=${SEGTRAIN_VENV:-$ROOT/.venv}
fi
BUILD_TYPE=${BUILD_TYPE:-Release}
PYTHON=${PYTHON:-python3}
OFFLINE=${SEGTRAIN_OFFLINE:-}
TORCH_PYTHON=${SEGTRAIN_TORCH_PYTHON:-}

say() { printf '[setup] %s\n' "$*" >&2; }
# A missing piece of the CUDA configuration: what is missing and the fix, exit 2.
missing() { printf '[setup] error: %s\n' "$*" >&2; exit 2; }

if [[ $CUDA == 1 ]]; then
  NVCC=${CUDACXX:-}
  [[ -z $NVCC ]] && NVCC=$(command -v nvcc || true)
  for prefix in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    [[ -z $NVCC && -n $prefix && -x $prefix/bin/nvcc ]] && NVCC=$prefix/bin/nvcc
  done
  [[ -n $NVCC && -x $NVCC ]] || missing "SEGTRAIN_CUDA=1 needs nvcc (CUDA 12 or 13): install the CUDA toolkit and put nvcc on PATH, or set CUDACXX=/path/to/nvcc"
  export CUDACXX=$NVCC
fi

# --- offline: the packed packages, unpacked into DIR/prefix (or SEGTRAIN_OFFLINE_PREFIX) ---
cmake_offline=()
if [[ -n $OFFLINE ]]; then
  [[ -f $OFFLINE/manifest.txt ]] || missing "SEGTRAIN_OFFLINE=$OFFLINE has no manifest.txt: pack it with scripts/pack_offline.sh $OFFLINE"
  [[ -n $TORCH_PYTHON ]] || missing "SEGTRAIN_OFFLINE needs SEGTRAIN_TORCH_PYTHON=/path/to/python3 (a Python with torch installed): nothing can be pip-installed offline"
  OFFLINE=$(cd "$OFFLINE" && pwd)
  prefix=$(realpath -m "${SEGTRAIN_OFFLINE_PREFIX:-$OFFLINE/prefix}")
  if [[ "$(cat "$prefix/.segtrain-stamp" 2>/dev/null)" != "$(sha256sum "$OFFLINE/manifest.txt")" ]]; then
    # A package damaged or missing in the copy is named before anything is unpacked.
    while read -r package _ sum file; do
      [[ -f $OFFLINE/debs/$file ]] || missing "$OFFLINE/debs/$file ($package) is missing: copy the packed folder again"
      [[ $(sha256sum "$OFFLINE/debs/$file" | cut -d' ' -f1) == "$sum" ]] ||
        missing "$OFFLINE/debs/$file ($package) does not match its sha256 in $OFFLINE/manifest.txt: copy it again"
    done <"$OFFLINE/manifest.txt"
    say "unpacking $(wc -l <"$OFFLINE/manifest.txt") packages of $OFFLINE/debs into $prefix"
    # Only a folder this script unpacked (or is unpacking) is replaced, never a user's own.
    if [[ -d $prefix && -n $(ls -A "$prefix") && ! -e $prefix/.segtrain-stamp && ! -e $prefix/.segtrain-unpacking ]]; then
      missing "SEGTRAIN_OFFLINE_PREFIX=$prefix holds files that setup.sh did not unpack: name a new or empty folder"
    fi
    rm -rf "$prefix"
    mkdir -p "$prefix" || missing "cannot make $prefix (SEGTRAIN_OFFLINE_PREFIX)"
    touch "$prefix/.segtrain-unpacking"
    if command -v dpkg-deb >/dev/null; then
      for deb in "$OFFLINE"/debs/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
    else
      # No dpkg (a RHEL-like cluster, a minimal image): a .deb is an ar archive holding data.tar.*.
      "$TORCH_PYTHON" scripts/unpack_deb.py "$prefix" "$OFFLINE"/debs/*.deb
    fi
    # Absolute links (libz.so -> /lib/...) and pkg-config files name /usr; point them at the prefix.
    find "$prefix" -type l -lname '/*' | while read -r link; do
      target=$(readlink "$link")
      [[ -e $prefix$target ]] && ln -sfn "$prefix$target" "$link"
    done
    find "$prefix" -name '*.pc' -exec sed -i "s|=/usr|=$prefix/usr|" {} +
    # pkgconf finds its library in the prefix.
    cat >"$prefix/pkg-config" <<EOS
#!/bin/sh
LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec $prefix/usr/bin/pkgconf "\$@"
EOS
    chmod +x "$prefix/pkg-config"
    sha256sum "$OFFLINE/manifest.txt" >"$prefix/.segtrain-stamp"
    rm -f "$prefix/.segtrain-unpacking"
  fi
  export PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  # DT_RPATH rather than RUNPATH: the prefix's libraries find their own (libicuuc its
  # libicudata, libspdlog its libfmt) through the binary's path too.
  cmake_offline=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DPKG_CONFIG_EXECUTABLE="$prefix/pkg-config"
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags)
  SEGTRAIN_SKIP_APT=1
fi

# --- apt --------------------------------------------------------------------
if [[ "${SEGTRAIN_SKIP_APT:-0}" != 1 ]]; then
  read -r -a lists <<<"${SEGTRAIN_APT_LISTS:-scripts/apt-packages.txt}"
  mapfile -t packages < <(cat "${lists[@]}" | grep -v '^\s*#' | grep -v '^\s*$')
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
want="torch==$TORCH_VERSION $(cat scripts/requirements.txt scripts/requirements-transformers4.txt | sha256sum | cut -c1-16)"
if [[ -n $TORCH_PYTHON ]]; then
  # The venv sees the packages of that Python (torch, transformers where it has them).
  TORCH_VERSION=$("$TORCH_PYTHON" -c "import torch; print(torch.__version__)" 2>/dev/null) ||
    missing "SEGTRAIN_TORCH_PYTHON=$TORCH_PYTHON cannot import torch"
  want="torch $TORCH_VERSION of $TORCH_PYTHON"
  [[ $("$TORCH_PYTHON" -c "import os, sys; print(os.path.realpath(sys.prefix))") != $(realpath -m "$VENV") ]] ||
    missing "SEGTRAIN_TORCH_PYTHON=$TORCH_PYTHON is the venv this setup makes ($VENV): name the Python whose torch it should use"
  if [[ "$(cat "$VENV/.segtrain-stamp" 2>/dev/null)" != "$want" ]]; then
    say "creating $VENV over $TORCH_PYTHON (torch $TORCH_VERSION)"
    rm -rf "$VENV"
    "$TORCH_PYTHON" -m venv --system-site-packages --without-pip "$VENV"
    # That Python may itself be a venv, whose packages --system-site-packages does not see.
    "$TORCH_PYTHON" -c "import sys; print('\n'.join(p for p in sys.path if p.endswith('-packages')))" \
      >"$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/segtrain-torch-python.pth"
    echo "$want" >"$VENV/.segtrain-stamp"
  fi
elif [[ ! -x $VENV/bin/python || ! -x $VENV/bin/pip ]]; then
  # (no pip: a venv made over SEGTRAIN_TORCH_PYTHON before, which this one replaces)
  say "creating $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [[ "$(cat "$VENV/.segtrain-stamp" 2>/dev/null)" != "$want" ]]; then
  say "installing torch==$TORCH_VERSION and test packages into $VENV"
  pip() { "$VENV/bin/pip" "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
  pip install -q --upgrade pip >/dev/null
  pip install -q "torch==$TORCH_VERSION"
  # torch is pinned above; a later unpinned requirement must not replace it.
  pip install -q -r scripts/requirements.txt "torch==$TORCH_VERSION"
  # transformers 4.x beside the venv's 5.x, for the export tests (PYTHONPATH overlay).
  rm -rf "$VENV/transformers4"
  pip install -q --target "$VENV/transformers4" -r scripts/requirements-transformers4.txt
  echo "$want" >"$VENV/.segtrain-stamp"
fi
if [[ $CUDA == 1 ]]; then
  "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null ||
    missing "torch==$TORCH_VERSION in $VENV is not a CUDA build: pick a CUDA release with TORCH_VERSION=2.x.y (the CPU wheel has no CUDA)"
  "$VENV/bin/python" -c "import nvidia.nccl, os, sys; sys.exit(0 if any(os.path.exists(os.path.join(p, 'include', 'nccl.h')) for p in nvidia.nccl.__path__) else 1)" 2>/dev/null ||
    missing "no nccl.h beside torch in $VENV: install the NCCL headers that match it (pip install nvidia-nccl-cu13, or -cu12 for a CUDA 12 torch)"
fi

# --- configure and build ----------------------------------------------------
[[ "${SEGTRAIN_SKIP_BUILD:-0}" == 1 ]] && exit 0
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]] || ! grep -q "CMAKE_BUILD_TYPE:STRING=$BUILD_TYPE\$" "$BUILD_DIR/CMakeCache.txt"; then
  say "configuring $BUILD_DIR ($BUILD_TYPE$([[ $CUDA == 1 ]] && echo ", CUDA with $NVCC"))"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DPython3_EXECUTABLE="$VENV/bin/python" "${cmake_offline[@]}" >/dev/null
fi
say "building"
read -r -a targets <<<"${SEGTRAIN_BUILD_TARGETS:-all}"
cmake --build "$BUILD_DIR" --target "${targets[@]}" -- -j"${JOBS:-$(nproc)}"
