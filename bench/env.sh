# Sourced by bench/*.sh (not run): the build directory and the Python of the
# configuration, as scripts/setup.sh makes them. SEGTRAIN_CUDA=1 is the CUDA
# configuration (build-cuda, .venv-cuda), otherwise the CPU one (build, .venv).
# BUILD_DIR and BENCH_PYTHON override either. (Not PYTHON: scripts/setup.sh reads
# that as the interpreter that creates the venv.)
if [[ ${SEGTRAIN_CUDA:-0} == 1 ]]; then
  BUILD_DIR=${BUILD_DIR:-build-cuda}
  BENCH_PYTHON=${BENCH_PYTHON:-.venv-cuda/bin/python}
else
  BUILD_DIR=${BUILD_DIR:-build}
  BENCH_PYTHON=${BENCH_PYTHON:-.venv/bin/python}
fi
if [[ ! -x $BENCH_PYTHON ]]; then
  echo "bench: $BENCH_PYTHON does not exist: run $([[ ${SEGTRAIN_CUDA:-0} == 1 ]] && echo 'SEGTRAIN_CUDA=1 ')make build first (or set BENCH_PYTHON)" >&2
  exit 2
fi
export BUILD_DIR BENCH_PYTHON
