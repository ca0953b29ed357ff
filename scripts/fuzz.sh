#!/usr/bin/env bash
# `make fuzz`: coverage-guided fuzzing of every reader of outside input (tests/fuzz/README.md).
#   1. installs what is missing (scripts/setup.sh with scripts/apt-packages-fuzz.txt: clang 16 and
#      its libFuzzer/ASan/UBSan runtimes; the CPU torch venv is reused), without building build/;
#   2. builds the targets in build-fuzz (clang, -fsanitize=fuzzer,address,undefined), nothing else;
#   3. runs each target for FUZZ_SECONDS on a scratch copy of its seed corpus and regression
#      inputs, and prints one line per target:  fuzz <target>: <N> executions, <K> crashes
# Exits 1 when any target crashed (an ASan/UBSan report, an uncaught exception other than
# InputError, a timeout or running out of memory), naming the crashing input kept for it.
# Environment: FUZZ_SECONDS (default 60 per target), FUZZ_TARGETS (space-separated subset),
#   FUZZ_BUILD_DIR (build-fuzz), FUZZ_WORK (FUZZ_BUILD_DIR/fuzz-work: corpora, crashes, logs),
#   FUZZ_TIMEOUT (seconds one input may take, default 10), FUZZ_RSS_MB (default 2048),
#   FUZZ_JOBS (build parallelism, default 2), FUZZ_SKIP_SETUP=1, FUZZ_SKIP_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SECONDS_EACH=${FUZZ_SECONDS:-60}
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
CLANG=clang++-16

say() { printf '[fuzz] %s\n' "$*" >&2; }

if [[ "${FUZZ_SKIP_SETUP:-0}" != 1 ]]; then
  SEGTRAIN_APT_LISTS="scripts/apt-packages.txt scripts/apt-packages-fuzz.txt" SEGTRAIN_SKIP_BUILD=1 \
    bash scripts/setup.sh
fi

if [[ "${FUZZ_SKIP_BUILD:-0}" != 1 ]]; then
  if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    say "configuring $BUILD (clang, ASan + UBSan + libFuzzer)"
    configure_log=$(mktemp)
    if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER="$CLANG" -DSEGTRAIN_FUZZ=ON \
         -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" >"$configure_log" 2>&1; then
      cat "$configure_log" >&2
      say "error: configuring $BUILD failed"
      exit 2
    fi
    rm -f "$configure_log"
  fi
  say "building the fuzz targets in $BUILD (log: $BUILD/fuzz-build.log)"
  if ! nice cmake --build "$BUILD" --target fuzz_targets -- -j"${FUZZ_JOBS:-2}" >"$BUILD/fuzz-build.log" 2>&1; then
    tail -n 60 "$BUILD/fuzz-build.log" >&2
    say "error: the fuzz build failed (whole log: $BUILD/fuzz-build.log)"
    exit 2
  fi
fi

WORK=${FUZZ_WORK:-$BUILD/fuzz-work}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
rm -rf "$WORK/corpus" "$WORK/run" "$WORK/logs"
mkdir -p "$WORK/corpus" "$WORK/run" "$WORK/logs" "$WORK/crashes" "$WORK/tmp"

mapfile -t targets <"$BUILD/fuzz/targets.txt"
if [[ -n ${FUZZ_TARGETS:-} ]]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
fi

failed=0
for t in "${targets[@]}"; do
  bin=$ROOT/$BUILD/fuzz/fuzz_$t
  [[ -x $bin ]] || { say "no target $t in $BUILD/fuzz (targets: $(tr '\n' ' ' <"$BUILD/fuzz/targets.txt"))"; exit 2; }
  # The repository's seeds and regression inputs, copied: libFuzzer adds what it finds to the copy.
  corpus=$WORK/corpus/$t
  mkdir -p "$corpus"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/
  if [[ -d tests/fuzz/regressions/$t ]]; then
    find "tests/fuzz/regressions/$t" -type f ! -name README.md -exec cp {} "$corpus"/ \;
  fi
  crashes=$WORK/crashes/$t
  rm -rf "$crashes"
  mkdir -p "$crashes"
  # The working directory has a store and an HF folder beside each other, so that
  # configs naming `store` or `hf:model` get past the path checks to the rest.
  run=$WORK/run/$t
  mkdir -p "$run/store" "$run/model"
  cp tests/fuzz/corpus/store_meta/meta.json "$run/store/meta.json"
  cp tests/fuzz/corpus/hf_config/transformers_gpt_neox_default.json "$run/model/config.json"
  log=$WORK/logs/$t.log
  rc=0
  dict=(); [[ -f tests/fuzz/dict/$t.dict ]] && dict=(-dict="$ROOT/tests/fuzz/dict/$t.dict")
  (cd "$run" && TMPDIR=$WORK/tmp OMP_NUM_THREADS=1 \
     ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-16/bin/llvm-symbolizer} ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
     nice "$bin" -max_total_time="$SECONDS_EACH" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
       -artifact_prefix="$crashes/" -print_final_stats=1 "${dict[@]}" "$corpus" >"$log" 2>&1) || rc=$?
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  [[ -z $executions ]] && executions=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  mapfile -t found < <(find "$crashes" -type f | sort)
  if ((rc != 0 && ${#found[@]} == 0)); then
    found=("(no input saved; exit code $rc)")
  fi
  echo "fuzz $t: ${executions:-0} executions, ${#found[@]} crashes"
  if ((${#found[@]})); then
    failed=1
    for f in "${found[@]}"; do echo "  crashing input: $f"; done
    echo "  log: $log"
    grep -m3 -E 'ERROR: |runtime error: |finding: ' "$log" | sed 's/^/  /' || true
  fi
done
exit $failed
