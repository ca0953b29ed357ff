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
find_package(Torch REQUIRED)

# The wheel's TorchConfig appends its flags to CMAKE_CXX_FLAGS; keep only the ABI
# define, which must match the wheel.
set(SEGTRAIN_TORCH_CXX_FLAGS "${TORCH_CXX_FLAGS}")

set(SEGTRAIN_WITH_CUDA OFF)
if(TARGET torch_cuda OR TORCH_LIBRARIES MATCHES "torch_cuda|c10_cuda")
  set(SEGTRAIN_WITH_CUDA ON)
endif()
# NCCL is part of every CUDA wheel of torch on Linux; c10d's NCCL process group is
# only compiled when LibTorch itself was built with it.
set(SEGTRAIN_WITH_NCCL ${SEGTRAIN_WITH_CUDA})

# Torch headers as SYSTEM so our warnings stay about our code.
add_library(segtrain_torch INTERFACE)
target_link_libraries(segtrain_torch INTERFACE ${TORCH_LIBRARIES})
get_target_property(_torch_inc torch INTERFACE_INCLUDE_DIRECTORIES)
if(_torch_inc)
  target_include_directories(segtrain_torch SYSTEM INTERFACE ${_torch_inc})
endif()
target_compile_definitions(segtrain_torch INTERFACE
  SEGTRAIN_WITH_CUDA=$<BOOL:${SEGTRAIN_WITH_CUDA}>
  SEGTRAIN_WITH_NCCL=$<BOOL:${SEGTRAIN_WITH_NCCL}>)
message(STATUS "segtrain: LibTorch ${Torch_VERSION} from ${Torch_DIR}; CUDA=${SEGTRAIN_WITH_CUDA} NCCL=${SEGTRAIN_WITH_NCCL}")
