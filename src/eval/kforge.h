// kforge.h: the candidate ABI (version 1). The header every kforge candidate includes.
//
// A candidate is ONE .cu file: device kernels plus this host entry point with C linkage:
//
//   extern "C" int kforge_forward(const kf_tensor *inputs,  int num_inputs,
//                                 const kf_tensor *params,  int num_params,
//                                 kf_tensor *outputs,       int num_outputs,
//                                 cudaStream_t stream);
//
// - inputs:  the model's forward() tensor arguments, in order.
// - params:  the model's parameters and buffers, in state_dict() order.
// - outputs: preallocated by kforge with the reference's shapes and dtypes (contiguous); the
//            candidate must write every element. They hold garbage (NaN) on entry.
// - stream:  launch every kernel on this stream and do not synchronize the device; work on any
//            other stream is flagged and fails verification.
// - return:  0 on success; any other value is an error (return the cudaError_t of a failed
//            launch: KF_CHECK does this).
// Inputs must not be modified. All pointers are device pointers. Strides are in elements.
// No PyTorch headers: only the CUDA toolkit (cuda_runtime.h, cuda_fp16.h, cuda_bf16.h, CUB,
// cuBLAS is NOT linked). Compiled as: nvcc -shared -Xcompiler -fPIC -O3 -lineinfo
// -gencode=arch=compute_XX,code=sm_XX candidate.cu
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

#define KFORGE_ABI_VERSION 1
#define KF_MAX_DIMS 8

// Element types (values are stable across versions).
typedef enum {
  KF_FLOAT32 = 0,
  KF_FLOAT16 = 1,
  KF_BFLOAT16 = 2,
  KF_FLOAT64 = 3,
  KF_INT64 = 4,
  KF_INT32 = 5,
  KF_INT16 = 6,
  KF_INT8 = 7,
  KF_UINT8 = 8,
  KF_BOOL = 9,
} kf_dtype;

// A tensor descriptor: a device pointer, its element type, rank, sizes and strides.
typedef struct {
  void *data;                    // device pointer to the first element
  int32_t dtype;                 // a kf_dtype
  int32_t ndim;                  // 0..KF_MAX_DIMS
  int64_t sizes[KF_MAX_DIMS];    // sizes[0..ndim)
  int64_t strides[KF_MAX_DIMS];  // in elements, not bytes
  int64_t numel;                 // product of sizes
} kf_tensor;

// Returns the error of the last launch from this translation unit (use after <<<...>>>).
#define KF_CHECK(expr)                                  \
  do {                                                  \
    cudaError_t kf_err_ = (expr);                       \
    if (kf_err_ != cudaSuccess) return (int)kf_err_;    \
  } while (0)
#define KF_CHECK_LAUNCH() KF_CHECK(cudaGetLastError())

// Typed data pointer: kf_ptr<float>(inputs[0]).
template <typename T>
__host__ __device__ inline T *kf_ptr(const kf_tensor &t) {
  return static_cast<T *>(t.data);
}

// Whether t is contiguous in row-major order.
inline bool kf_is_contiguous(const kf_tensor &t) {
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.sizes[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

// kforge checks this symbol to refuse a candidate built against another ABI version.
extern "C" int kforge_abi_version(void) { return KFORGE_ABI_VERSION; }

extern "C" int kforge_forward(const kf_tensor *inputs, int num_inputs,
                              const kf_tensor *params, int num_params,
                              kf_tensor *outputs, int num_outputs,
                              cudaStream_t stream);
