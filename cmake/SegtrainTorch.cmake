# LibTorch comes from the pip wheel installed by scripts/setup.sh. The prefix is
# asked from that Python so a CUDA wheel on a GPU machine is picked up unchanged.
if(NOT Torch_DIR AND NOT CMAKE_PREFIX_PATH MATCHES "torch")
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _torch_rc ERROR_QUIET)
  if(NOT _torch_rc EQUAL 0)
    message(FATAL_ERROR "torch is not importable from ${Python3_EXECUTABLE}; run scripts/setup.sh "
                        "or pass -DPython3_EXECUTABLE=<python with torch>")
  endif()
  list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
endif()
# A CUDA build of torch needs nvcc, a GPU architecture list and the CUDA
# libraries of the nvidia-* pip packages found before Caffe2 looks for them.
find_package(Python3 COMPONENTS Interpreter)
set(_torch_cuda "")
if(Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch; print(torch.version.cuda or '')"
                  OUTPUT_VARIABLE _torch_cuda OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(_torch_cuda)
  include(SegtrainCuda)
endif()
find_package(Torch REQUIRED)

# The wheel's TorchConfig appends its flags to CMAKE_CXX_FLAGS; keep only the ABI
# define, which must match the wheel.
set(SEGTRAIN_TORCH_CXX_FLAGS "${TORCH_CXX_FLAGS}")

set(SEGTRAIN_WITH_CUDA OFF)
if(TARGET torch_cuda OR TORCH_LIBRARIES MATCHES "torch_cuda|c10_cuda")
  set(SEGTRAIN_WITH_CUDA ON)
endif()
# NCCL: c10d's ProcessGroupNCCL is compiled in only for a CUDA LibTorch that was
# itself built with it (torch.distributed.is_nccl_available()) and whose nccl.h
# is at hand (CUDA wheels depend on nvidia-nccl-cu*, which ships it). Elsewhere,
# this CPU machine included, the NCCL branch of trainer/train/c10d_group.cpp compiles
# away and `distributed.backend: nccl` is refused. -DSEGTRAIN_NCCL=OFF forces that.
option(SEGTRAIN_NCCL "Use c10d's ProcessGroupNCCL when LibTorch has it" ON)
set(SEGTRAIN_WITH_NCCL OFF)
if(SEGTRAIN_WITH_CUDA AND SEGTRAIN_NCCL)
  find_package(Python3 COMPONENTS Interpreter)
  set(_nccl_in_torch 0)
  set(_nccl_hint "")
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import torch.distributed as d; print(int(d.is_available() and d.is_nccl_available()))"
      OUTPUT_VARIABLE _nccl_in_torch OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], 'include'))"
      OUTPUT_VARIABLE _nccl_hint OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  find_path(SEGTRAIN_NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hint} ENV NCCL_INCLUDE_DIR)
  find_file(_pg_nccl torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
  if(_nccl_in_torch STREQUAL "1" AND SEGTRAIN_NCCL_INCLUDE_DIR AND _pg_nccl)
    set(SEGTRAIN_WITH_NCCL ON)
  endif()
endif()

# Torch headers as SYSTEM so our warnings stay about our code.
add_library(segtrain_torch INTERFACE)
# Some torch wheels (2.11.0, the one GPU images ship) export from libtorch.so a copy of
# libstdc++'s std::filesystem (64 symbols) whose remove_all calls a function that older
# libstdc++ releases lack: a binary that binds to that copy jumps to address 0. Naming the C++
# runtime on the link line before torch makes it the copy bound, whether the toolchain links
# libstdc++ as a shared library (listed before libtorch.so among the needed libraries) or
# statically (the archive's members are taken before libtorch.so can satisfy the references).
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_link_libraries(segtrain_torch INTERFACE stdc++)
endif()
target_link_libraries(segtrain_torch INTERFACE ${TORCH_LIBRARIES})
get_target_property(_torch_inc torch INTERFACE_INCLUDE_DIRECTORIES)
if(_torch_inc)
  target_include_directories(segtrain_torch SYSTEM INTERFACE ${_torch_inc})
endif()
if(SEGTRAIN_WITH_NCCL)
  target_include_directories(segtrain_torch SYSTEM INTERFACE ${SEGTRAIN_NCCL_INCLUDE_DIR})
endif()
if(SEGTRAIN_CUDA_INCLUDE_DIRS)
  # ATen/cuda headers include cusparse.h, cublas_v2.h, ... from the nvidia-* packages.
  target_include_directories(segtrain_torch SYSTEM INTERFACE ${SEGTRAIN_CUDA_INCLUDE_DIRS})
endif()
target_compile_definitions(segtrain_torch INTERFACE
  SEGTRAIN_WITH_CUDA=$<BOOL:${SEGTRAIN_WITH_CUDA}>
  SEGTRAIN_WITH_NCCL=$<BOOL:${SEGTRAIN_WITH_NCCL}>)
message(STATUS "segtrain: LibTorch ${Torch_VERSION} from ${Torch_DIR}; CUDA=${SEGTRAIN_WITH_CUDA} NCCL=${SEGTRAIN_WITH_NCCL}")
