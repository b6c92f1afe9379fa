// Row softmax, one block of 1024 threads per row: three passes (max, sum of exp, write), each
// reduction a warp shuffle followed by a shared-memory step across the 32 warps.
// Hand-written for kforge's scripted demo (no model wrote it).
#include "kforge.h"
#include <cfloat>
#include <climits>
#include <cstdint>

constexpr int kThreads = 1024;

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

// Reduces over the block; every thread gets the result. Ends with a barrier, so scratch may be
// reused at once.
template <bool kMax>
__device__ float block_reduce(float v, float *scratch) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x / 32) ? scratch[lane] : (kMax ? -FLT_MAX : 0.f);
    v = kMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  v = scratch[0];
  __syncthreads();
  return v;
}

__global__ void __launch_bounds__(kThreads, 2)
    softmax_block_3pass(const float *__restrict__ x, float *__restrict__ y, int64_t rows,
                        int64_t cols) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float *in = x + row * cols;
    float *out = y + row * cols;
    float m = -FLT_MAX;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, in[c]);
    m = block_reduce<true>(m, scratch);
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(in[c] - m);
    s = block_reduce<false>(s, scratch);
    float inv = 1.f / s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __expf(in[c] - m) * inv;
  }
}

extern "C" int kforge_forward(const kf_tensor *inputs, int num_inputs, const kf_tensor *params,
                              int num_params, kf_tensor *outputs, int num_outputs,
                              cudaStream_t stream) {
  if (num_inputs != 1 || num_outputs != 1) return -1;
  const kf_tensor &x = inputs[0];
  const kf_tensor &y = outputs[0];
  if (x.ndim != 2 || x.dtype != KF_FLOAT32 || !kf_is_contiguous(x)) return -1;
  if (y.ndim != 2 || y.dtype != KF_FLOAT32 || !kf_is_contiguous(y) || y.sizes[0] != x.sizes[0] ||
      y.sizes[1] != x.sizes[1])
    return -1;
  int64_t rows = x.sizes[0], cols = x.sizes[1];
  if (rows == 0 || cols == 0) return 0;
  unsigned grid = (unsigned)(rows < INT_MAX ? rows : INT_MAX);
  softmax_block_3pass<<<grid, kThreads, 0, stream>>>(kf_ptr<const float>(x), kf_ptr<float>(y),
                                                    rows, cols);
  KF_CHECK_LAUNCH();
  return 0;
}
