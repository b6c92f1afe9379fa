// Row softmax, one block of 512 threads per row, two passes: pass 1 keeps a per-thread online
// max m and sum s of exp(x - m) (rescaling s whenever m grows) and merges the (m, s) pairs across
// the block; pass 2 writes exp(x - m) / s. float4 loads and stores when every row starts 16-byte
// aligned, else scalar. Hand-written for kforge's scripted demo (no model wrote it).
#include "kforge.h"
#include <cfloat>
#include <climits>
#include <cstdint>

constexpr int kThreads = 512;

// A running max and the sum of exp(x - m) over the elements seen so far.
struct MaxSum {
  float m, s;
};

// Merges two pairs: both sums are rescaled to the larger max.
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  float m = fmaxf(a.m, b.m);
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_combine(MaxSum v) {
  for (int o = 16; o > 0; o >>= 1)
    v = combine(v, {__shfl_xor_sync(0xffffffff, v.m, o), __shfl_xor_sync(0xffffffff, v.s, o)});
  return v;
}

// Merges the pairs of the block; every thread gets warp 0's result. Ends with a barrier, so the
// scratch arrays may be reused at once.
__device__ MaxSum block_combine(MaxSum v, float *scratch_m, float *scratch_s) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_combine(v);
  if (lane == 0) {
    scratch_m[warp] = v.m;
    scratch_s[warp] = v.s;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x / 32) ? MaxSum{scratch_m[lane], scratch_s[lane]}
                                      : MaxSum{-FLT_MAX, 0.f};
    v = warp_combine(v);
    if (lane == 0) {
      scratch_m[0] = v.m;
      scratch_s[0] = v.s;
    }
  }
  __syncthreads();
  v = {scratch_m[0], scratch_s[0]};
  __syncthreads();
  return v;
}

// Adds four elements to the running pair: one rescale per float4, not per element.
__device__ __forceinline__ void online_add4(MaxSum &acc, float4 v) {
  float m = fmaxf(fmaxf(acc.m, fmaxf(v.x, v.y)), fmaxf(v.z, v.w));
  acc.s = acc.s * __expf(acc.m - m) + (__expf(v.x - m) + __expf(v.y - m)) +
          (__expf(v.z - m) + __expf(v.w - m));
  acc.m = m;
}

__device__ __forceinline__ void online_add(MaxSum &acc, float v) {
  float m = fmaxf(acc.m, v);
  acc.s = acc.s * __expf(acc.m - m) + __expf(v - m);
  acc.m = m;
}

// kVec4: the row is read and written as cols / 4 float4s (the host checked alignment).
template <bool kVec4>
__global__ void __launch_bounds__(kThreads, 4)
    softmax_block_online_vec4(const float *__restrict__ x, float *__restrict__ y, int64_t rows,
                              int64_t cols) {
  __shared__ float scratch_m[32], scratch_s[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float *in = x + row * cols;
    float *out = y + row * cols;
    MaxSum acc{-FLT_MAX, 0.f};
    if constexpr (kVec4) {
      const float4 *in4 = reinterpret_cast<const float4 *>(in);
      float4 *out4 = reinterpret_cast<float4 *>(out);
      int64_t n4 = cols / 4;
      for (int64_t c = threadIdx.x; c < n4; c += kThreads) online_add4(acc, in4[c]);
      acc = block_combine(acc, scratch_m, scratch_s);
      float m = acc.m, inv = 1.f / acc.s;
      for (int64_t c = threadIdx.x; c < n4; c += kThreads) {
        float4 v = in4[c];
        out4[c] = make_float4(__expf(v.x - m) * inv, __expf(v.y - m) * inv,
                              __expf(v.z - m) * inv, __expf(v.w - m) * inv);
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += kThreads) online_add(acc, in[c]);
      acc = block_combine(acc, scratch_m, scratch_s);
      float m = acc.m, inv = 1.f / acc.s;
      for (int64_t c = threadIdx.x; c < cols; c += kThreads) out[c] = __expf(in[c] - m) * inv;
    }
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
  bool vec4 = cols % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0 &&
              reinterpret_cast<uintptr_t>(y.data) % 16 == 0;
  if (vec4)
    softmax_block_online_vec4<true><<<grid, kThreads, 0, stream>>>(
        kf_ptr<const float>(x), kf_ptr<float>(y), rows, cols);
  else
    softmax_block_online_vec4<false><<<grid, kThreads, 0, stream>>>(
        kf_ptr<const float>(x), kf_ptr<float>(y), rows, cols);
  KF_CHECK_LAUNCH();
  return 0;
}
