# ccache, where installed (scripts/apt-packages.txt installs it; an offline or GPU machine may lack
# it and builds the same without): a rebuild reuses the object of every translation unit whose
# preprocessed input and flags are unchanged. Most of segtrain's compile time is LibTorch's
# headers (about 20 s a unit on the 2-core CI machine), so CI's fresh clone, `make demo` after a
# `git pull` and the CPU/CUDA/fuzz configurations each rebuild only what a change touched.
# CCACHE_BASEDIR makes the paths under the checkout relative in the cache key, so a second
# clone of the repository (CI's) hits what the first one compiled; CCACHE_NOHASHDIR keeps the build
# folder's path out of the key of units compiled with debug information (the fuzz build's
# -gline-tables-only: their line tables then name the folder of the clone that compiled them first).
# SEGTRAIN_CCACHE=OFF turns it off.
option(SEGTRAIN_CCACHE "Compile through ccache when it is installed" ON)
if(SEGTRAIN_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(SEGTRAIN_CCACHE_PROGRAM ccache)
  if(SEGTRAIN_CCACHE_PROGRAM)
    set(segtrain_launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=1
        ${SEGTRAIN_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${segtrain_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${segtrain_launcher})
    message(STATUS "Compiling through ${SEGTRAIN_CCACHE_PROGRAM} (base directory ${CMAKE_SOURCE_DIR})")
  endif()
endif()
