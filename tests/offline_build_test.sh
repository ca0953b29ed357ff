#!/usr/bin/env bash
# The offline build (scripts/pack_offline.sh, then scripts/setup.sh with SEGTRAIN_OFFLINE) in a
# network namespace with no route: packs the Debian packages (here, with the network), then
# configures a fresh build directory against them and the venv's torch (SEGTRAIN_TORCH_PYTHON)
# with no registry reachable, builds the torch-free binaries (config_test: yaml-cpp and gtest;
# log_test: spdlog and fmt) and runs them. Every dependency must resolve inside the unpacked
# prefix, not in /usr (where this machine also has them).
# Exit 77 (ctest: skipped) without root's unshare or without apt-get.
# usage: offline_build_test.sh SEGTRAIN_ROOT TORCH_PYTHON
set -uo pipefail
root=$1
torch_python=$2
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }
command -v apt-get >/dev/null || skip "no apt-get to pack the Debian packages with"
unshare -n true 2>/dev/null || skip "unshare -n (a network namespace) needs root"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash "$root/scripts/pack_offline.sh" "$work/pack" || fail "pack_offline.sh exited $?"
[[ -s $work/pack/manifest.txt ]] || fail "no manifest.txt"

# No network inside: apt-get or pip would fail; setup.sh must not call them.
unshare -n env SEGTRAIN_OFFLINE="$work/pack" SEGTRAIN_TORCH_PYTHON="$torch_python" SEGTRAIN_VENV="$work/venv" \
  BUILD_DIR="$work/build" SEGTRAIN_BUILD_TARGETS="config_test log_test" JOBS=2 \
  bash "$root/scripts/setup.sh" >"$work/setup.log" 2>&1 || { tail -30 "$work/setup.log"; fail "offline setup.sh exited non-zero"; }
unshare -n sh -c "ip route 2>/dev/null | grep -q ." && fail "the namespace has a route"

prefix=$work/pack/prefix
cache=$work/build/CMakeCache.txt
for entry in yaml-cpp_DIR spdlog_DIR fmt_DIR GTest_DIR CLI11_DIR nlohmann_json_DIR ICU_INCLUDE_DIR ICU_UC_LIBRARY_RELEASE \
  GLOO_INCLUDE_DIR pkgcfg_lib_SENTENCEPIECE_sentencepiece ZLIB_LIBRARY_RELEASE; do
  value=$(sed -n "s/^$entry:[A-Z]*=//p" "$cache")
  [[ $value == "$prefix"/* ]] || fail "$entry is '$value', not inside $prefix"
done
echo "every dependency resolved inside $prefix"

yaml=$(ldd "$work/build/tests/config_test" | awk '/libyaml-cpp/ {print $3}')
[[ $yaml == "$prefix"/* ]] || fail "config_test loads libyaml-cpp from '$yaml'"
fmt=$(ldd "$work/build/tests/log_test" | awk '/libfmt/ {print $3}')
[[ $fmt == "$prefix"/* ]] || fail "log_test loads libfmt from '$fmt' (spdlog's dependency, found through the binary's RPATH)"
"$work/build/tests/config_test" --gtest_brief=1 >"$work/config_test.log" 2>&1 || { tail -20 "$work/config_test.log"; fail "config_test"; }
"$work/build/tests/log_test" --gtest_brief=1 >"$work/log_test.log" 2>&1 || { tail -20 "$work/log_test.log"; fail "log_test"; }
echo "PASSED: built offline from $(wc -l <"$work/pack/manifest.txt") packed packages; config_test and log_test pass"
