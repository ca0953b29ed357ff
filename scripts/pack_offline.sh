#!/usr/bin/env bash
# Packs what a machine without a package registry needs to build segtrain against a torch
# that is already installed there (a GPU image's Python with its CUDA torch, a cluster's
# module): the headers and libraries of every other dependency, as Debian 12 packages.
#   DIR/debs/*.deb     every -dev package of scripts/apt-packages.txt, pkg-config, and the
#                      libraries they depend on (not the C/C++ runtime every Linux has);
#   DIR/manifest.txt   package, version, sha256 and file, one a line (setup.sh checks them).
# Nothing is installed system-wide on the target: scripts/setup.sh unpacks the packages into
# DIR/prefix (dpkg-deb -x, no root) and builds against them:
#   SEGTRAIN_OFFLINE=DIR SEGTRAIN_TORCH_PYTHON=/path/to/python3 make build
#   SEGTRAIN_OFFLINE=DIR SEGTRAIN_TORCH_PYTHON=python3 SEGTRAIN_CUDA=1 make gpu-check
# The target needs a C++17 compiler, CMake >= 3.22, ninja, dpkg-deb and that Python with
# torch (and, for SEGTRAIN_CUDA=1, nvcc and the nvidia-nccl package beside the CUDA torch).
# Usage: scripts/pack_offline.sh DIR      (here: Debian 12 with apt; about 25 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# == 1 ]] || { echo "usage: scripts/pack_offline.sh DIR" >&2; exit 2; }
out=$1
command -v apt-get >/dev/null || { echo "pack_offline: needs apt-get (Debian 12), which is not on PATH" >&2; exit 2; }

# Runtime pieces of every glibc system (never unpacked over the target's own; zlib1g is packed,
# as zlib1g-dev's libz.so links to it), and packages
# a -dev package pulls in that the build does not use: spdlog's test framework, gtest's
# sources, ICU's command-line tools, and what libgloo-dev's library needs (segtrain takes only
# its headers, for c10d's ProcessGroupGloo.hpp; torch carries gloo compiled in).
base='^(libc6|libc6-dev|libc-dev|libgcc-s1|libstdc\+\+6|libstdc\+\+-.*-dev|gcc-.*|libcrypt.*|libnsl.*|libtirpc.*|rpcsvc-proto|linux-libc-dev|catch2|googletest|icu-devtools|libgloo0|libhiredis.*|libibverbs.*|ibverbs-providers|libnl-.*)$'
mapfile -t roots < <(grep -v '^\s*#' scripts/apt-packages.txt | awk 'NF' | grep -E -- '-dev$|^pkg-config$')
# No package lists yet (a fresh image): read them once.
if ! apt-cache show "${roots[0]}" >/dev/null 2>&1; then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
fi
declare -A wanted=()
queue=("${roots[@]}")
while ((${#queue[@]})); do
  p=${queue[0]}
  queue=("${queue[@]:1}")
  [[ -n ${wanted[$p]:-} || $p =~ $base ]] && continue
  wanted[$p]=1
  # Depends only: the first of each alternative, which apt-cache prints unindented by '|'.
  mapfile -t deps < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$p" | awk '$1 == "Depends:" { print $2 }' | grep -v '^<')
  queue+=("${deps[@]}")
done

mkdir -p "$out/debs"
rm -f "$out"/debs/*.deb
(cd "$out/debs" && apt-get download -q "${!wanted[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" >&2 || true)
count=$(find "$out/debs" -name '*.deb' | wc -l)
((count == ${#wanted[@]})) || { echo "pack_offline: downloaded $count of ${#wanted[@]} packages into $out/debs" >&2; exit 1; }
for deb in "$out"/debs/*.deb; do
  printf '%s %s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
    "$(sha256sum "$deb" | cut -d' ' -f1)" "$(basename "$deb")"
done >"$out/manifest.txt"
echo "pack_offline: $count packages ($(du -sh "$out/debs" | cut -f1)) in $out/debs; on the target:" >&2
echo "  SEGTRAIN_OFFLINE=$out SEGTRAIN_TORCH_PYTHON=/path/to/python3 make build" >&2
