#!/usr/bin/env bash
# Compiles the CUDA configuration's device-specific translation units against the headers of
# another torch release: the one GPU images run (torch 2.11.0+cu130 on the machines this project
# is lent), where CI builds against 2.14.1. A LibTorch API that moved between the two breaks here,
# not on a GPU allocation. Only what differs by device is compiled: the sources that name CUDA or
# NCCL (SEGTRAIN_WITH_CUDA, SEGTRAIN_WITH_NCCL, c10/cuda, ATen/cuda, torch/cuda.h) and those that
# call the fused ATen ops whose signatures moved between releases (_fused_rms_norm, _fused_adamw_,
# scaled_dot_product_attention, _fused_sdp_choice), each with its
# own command from BUILD_DIR's compile_commands.json, torch's include folders swapped for the
# release's (from its PyPI wheel: only torch/include is unpacked, cached) and -fsyntax-only (the
# project's CUDA kernels, kernels/*.cu, are compiled by nvcc into a dropped object).
# usage: scripts/compile_against_torch.sh VERSION [BUILD_DIR]    (e.g. 2.11.0 build-cuda)
# Environment: SEGTRAIN_CACHE (default ~/.cache/segtrain) holds the unpacked headers; JOBS.
# Exit 0 every unit compiles; 1 one does not (its first errors are printed); 2 bad usage, no
# configured CUDA build, or the wheel cannot be had.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/compile_against_torch.sh VERSION [BUILD_DIR]}
build=${2:-build-cuda}
say() { printf '[compile-against-torch %s] %s\n' "$version" "$*" >&2; }
die() { say "error: $1"; exit "${2:-2}"; }
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "VERSION '$version': expected a release such as 2.11.0"
commands=$build/compile_commands.json
[[ -f $commands ]] || die "$commands does not exist: configure the CUDA build first (SEGTRAIN_CUDA=1 make build)"
grep -q "SEGTRAIN_WITH_CUDA=1" "$commands" || die "$build is not a CUDA configuration (no SEGTRAIN_WITH_CUDA=1 in $commands)"

# The build's own Python (the venv setup.sh made, with pip): a fresh Debian's python3 has no pip module.
python=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
[[ -x $python ]] || die "$build/CMakeCache.txt names no Python3_EXECUTABLE that runs ('$python'): reconfigure the CUDA build"
cache=${SEGTRAIN_CACHE:-$HOME/.cache/segtrain}/torch-$version
headers=$cache/torch/include
if [[ ! -f $cache/.complete ]]; then
  rm -rf "$cache"
  mkdir -p "$cache/wheel"
  say "downloading torch==$version (its wheel, for the headers alone) into $cache"
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
    -d "$cache/wheel" "torch==$version" 2> >(grep -v "is ignored: it is neither" >&2) ||
    die "pip could not download torch==$version"
  "$python" - "$cache" <<'EOF'
import pathlib, sys, zipfile
cache = pathlib.Path(sys.argv[1])
(wheel,) = (cache / "wheel").glob("torch-*.whl")
with zipfile.ZipFile(wheel) as z:
    z.extractall(cache, [n for n in z.namelist() if n.startswith("torch/include/")])
EOF
  rm -rf "$cache/wheel"
  touch "$cache/.complete"
fi
[[ -f $headers/torch/csrc/api/include/torch/version.h ]] || die "$headers has no torch/version.h"
found=$(sed -n 's/^#define TORCH_VERSION "\(.*\)"/\1/p' "$headers/torch/csrc/api/include/torch/version.h")
[[ -z $found || $found == "$version"* ]] || die "$headers is torch $found, not $version"
[[ -f $headers/c10/cuda/CUDAFunctions.h ]] || die "torch==$version's wheel has no CUDA headers (a CPU build?)"

# The units that differ by device, and their commands with torch's include folders swapped.
mapfile -t units < <(git ls-files -z '*.cpp' '*.cu' |
  xargs -0 grep -lE 'SEGTRAIN_WITH_CUDA|SEGTRAIN_WITH_NCCL|c10/cuda|ATen/cuda|torch/cuda\.h|_fused_rms_norm|_fused_adamw_|scaled_dot_product_attention|_fused_sdp_choice' | sort)
((${#units[@]})) || die "no source names CUDA: nothing to compile"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" - "$commands" "$headers" "$work" "${units[@]}" <<'EOF'
import json, os, pathlib, re, shlex, sys
commands, headers, work, units = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), sys.argv[4:]
by_file = {os.path.realpath(e["file"]): e for e in json.load(open(commands))}
for i, unit in enumerate(units):
    entry = by_file.get(os.path.realpath(unit))
    if entry is None:
        print(f"[compile-against-torch] error: {unit} is not in {commands}: reconfigure the CUDA build", file=sys.stderr)
        sys.exit(2)
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a.startswith(("-MD", "-MF", "-MT")):
            continue
        # .../site-packages/torch/include[/...]: the other release's folder of the same name.
        out.append(re.sub(r"^(-I|-isystem)?(.*?/site-packages/torch/include)", lambda m: (m.group(1) or "") + headers, a))
    swapped = [a for a in out if headers in a]
    left = [a for a in out if re.search(r"/site-packages/torch/include", a) and headers not in a]
    if not swapped or left:
        print(f"[compile-against-torch] error: {unit}: torch's include folders not swapped ({left or 'none found'})",
              file=sys.stderr)
        sys.exit(2)
    # nvcc has no -fsyntax-only: a CUDA unit is compiled (its device code for the listed architectures) and dropped.
    out += ["-o", str(work / f"{i:03d}.o")] if unit.endswith(".cu") else ["-fsyntax-only"]
    (work / f"{i:03d}.sh").write_text(f"cd {shlex.quote(entry['directory'])} && exec {shlex.join(out)}\n")
    (work / f"{i:03d}.name").write_text(unit)
EOF
say "compiling ${#units[@]} units against $headers: ${units[*]}"
failed=0
find "$work" -name '*.sh' -print0 | xargs -0 -P "${JOBS:-$(nproc)}" -I{} sh -c 'sh "$1" >"$1.log" 2>&1 || echo failed >"$1.failed"' _ {}
for script in "$work"/*.sh; do
  name=$(cat "${script%.sh}.name")
  if [[ -f $script.failed ]]; then
    failed=1
    say "FAILED: $name against torch $version:"
    grep -m 12 -E 'error|note: candidate' "$script.log" >&2 || tail -12 "$script.log" >&2
  else
    say "ok: $name"
  fi
done
((failed == 0)) || exit 1
say "every device-specific unit (${#units[@]}) compiles against torch $version's headers"
