#pragma once
// Per-element arithmetic that a CUDA kernel and its host test share (kernels/*_element.h):
// compiled for both sides by nvcc, for the host alone by the C++ compiler.
#if defined(__CUDACC__)
#define SEGTRAIN_HOST_DEVICE __host__ __device__
#else
#define SEGTRAIN_HOST_DEVICE
#endif
