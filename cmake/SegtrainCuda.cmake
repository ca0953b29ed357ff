# What a CUDA build of the torch wheel needs before find_package(Torch) on a
# machine with the CUDA compiler but not the whole toolkit (README, "CUDA build").
# Included by SegtrainTorch.cmake only when torch.version.cuda is set.
#  1. nvcc: CMAKE_CUDA_COMPILER, else $CUDACXX, else nvcc on PATH or in $CUDA_HOME /
#     /usr/local/cuda. The toolkit root comes from nvcc itself (`--dryrun` prints
#     TOP), so a wrapper script on PATH still leads to the real toolkit.
#  2. TORCH_CUDA_ARCH_LIST: Caffe2's own detection needs a visible GPU (and fails
#     with CMake 3.25 + nvcc 13); without one, SEGTRAIN_CUDA_ARCH_LIST (8.0;9.0).
#  3. The CUDA libraries' headers and shared objects (cusparse.h, libnvrtc.so.13,
#     nccl.h, ...) come with the nvidia-* pip packages beside torch, not with the
#     toolkit, and only under versioned names that find_library cannot see; they
#     are linked under their plain names in the build tree and put on the search path.

if(NOT CMAKE_CUDA_COMPILER)
  if(DEFINED ENV{CUDACXX})
    set(_nvcc "$ENV{CUDACXX}")
  else()
    find_program(_nvcc nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH PATH_SUFFIXES bin PATHS /usr/local/cuda/bin)
  endif()
  if(NOT _nvcc)
    message(FATAL_ERROR "segtrain: this torch is a CUDA build but no nvcc was found: install the CUDA toolkit, "
                        "put nvcc on PATH or set CUDACXX=/path/to/nvcc")
  endif()
  execute_process(COMMAND ${_nvcc} --dryrun -c -x cu /dev/null -o /dev/null
                  ERROR_VARIABLE _nvcc_dryrun OUTPUT_QUIET RESULT_VARIABLE _nvcc_rc)
  string(REGEX MATCH "TOP=([^\n]*)" _top "${_nvcc_dryrun}")
  if(NOT _nvcc_rc EQUAL 0 OR NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "segtrain: '${_nvcc}' does not run as nvcc (--dryrun printed no toolkit root)")
  endif()
  get_filename_component(_cuda_root "${CMAKE_MATCH_1}" REALPATH)
  set(CMAKE_CUDA_COMPILER "${_cuda_root}/bin/nvcc" CACHE FILEPATH "CUDA compiler")
  set(CUDA_TOOLKIT_ROOT_DIR "${_cuda_root}" CACHE PATH "CUDA toolkit root")
endif()
get_filename_component(_cuda_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
get_filename_component(_cuda_root "${_cuda_bin}" DIRECTORY)
set(CUDA_TOOLKIT_ROOT_DIR "${_cuda_root}" CACHE PATH "CUDA toolkit root")
set(CUDAToolkit_ROOT "${_cuda_root}")

set(SEGTRAIN_CUDA_ARCH_LIST "8.0;9.0" CACHE STRING "GPU architectures to build for when no TORCH_CUDA_ARCH_LIST is set")
if("$ENV{TORCH_CUDA_ARCH_LIST}" STREQUAL "" AND NOT TORCH_CUDA_ARCH_LIST)
  set(ENV{TORCH_CUDA_ARCH_LIST} "${SEGTRAIN_CUDA_ARCH_LIST}")
endif()

# The nvidia-* packages: site-packages/nvidia/<name>/{include,lib}.
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c "import nvidia, os; print(';'.join(os.path.join(p, d) for p in nvidia.__path__ for d in sorted(os.listdir(p))))"
  OUTPUT_VARIABLE _nvidia_dirs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
set(SEGTRAIN_CUDA_INCLUDE_DIRS "")
set(_shim "${CMAKE_BINARY_DIR}/cuda-pip-libs")
file(MAKE_DIRECTORY "${_shim}")
foreach(_dir ${_nvidia_dirs})
  if(IS_DIRECTORY "${_dir}/include")
    list(APPEND SEGTRAIN_CUDA_INCLUDE_DIRS "${_dir}/include")
  endif()
  file(GLOB _libs "${_dir}/lib/lib*.so.*")
  foreach(_lib ${_libs})
    get_filename_component(_name "${_lib}" NAME)
    string(REGEX REPLACE "\\.so\\..*$" ".so" _plain "${_name}")
    if(NOT EXISTS "${_shim}/${_plain}")
      file(CREATE_LINK "${_lib}" "${_shim}/${_plain}" SYMBOLIC)
    endif()
  endforeach()
endforeach()
list(APPEND CMAKE_LIBRARY_PATH "${_shim}")
if(EXISTS "${_shim}/libnvrtc.so")
  # Caffe2 caches the nvrtc path before it searches; give it the wheel's.
  set(CUDA_nvrtc_LIBRARY "${_shim}/libnvrtc.so" CACHE FILEPATH "nvrtc from the nvidia pip package")
  set(CUDA_NVRTC_LIB "${_shim}/libnvrtc.so" CACHE FILEPATH "nvrtc from the nvidia pip package")
endif()
message(STATUS "segtrain: CUDA toolkit ${_cuda_root}; TORCH_CUDA_ARCH_LIST=$ENV{TORCH_CUDA_ARCH_LIST}; "
               "CUDA libraries from ${_nvidia_dirs}")
