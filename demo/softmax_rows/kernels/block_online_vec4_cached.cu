// Row softmax as in block_online_vec4 (fused online max+sum pass, then a write pass), arranged so
// the second read of each row comes from L2, not DRAM: one persistent 1024-thread block per SM,
// pass 1 loads with an L2 evict_last policy, pass 2's loads and the stores stream (evict-first).
// Hand-written for kforge's scripted demo (no model wrote it).
#include "kforge.h"
#include <cfloat>
#include <cstdint>

constexpr int kThreads = 1024;

// Why: at 65536 columns a row is 256 KB, and pass 2 re-reads it right after pass 1. Everything
// the GPU reads in the meantime competes for the 60 MB L2, so the fewer rows in flight, the more
// of each row is still there. One block per SM (the grid is the SM count; blocks stride over the
// rows) keeps 132 rows, 34 MB, in flight, where one block per row at 512 threads has 528 (135 MB).
// Pass 1 tags its lines evict_last; pass 2 reads them for the last time as evict-first
// (ld.global.cs) and the output is stored evict-first (st.global.cs), so neither the output
// stream nor used-up lines push out rows still waiting for their second read. At half occupancy,
// 1024 threads with unrolled float4 loads still keep enough bytes in flight. The hints and the
// grid size only steer the cache and the schedule: the results do not depend on them.

// An L2 access policy that keeps the lines it touches ahead of normal ones (sm_80+).
__device__ __forceinline__ uint64_t l2_evict_last_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Read-only loads that tag their L2 lines with `policy`.
__device__ __forceinline__ float4 load_keep(const float4 *p, uint64_t policy) {
  float4 v;
  asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "l"(p), "l"(policy));
  return v;
}
__device__ __forceinline__ float load_keep(const float *p, uint64_t policy) {
  float v;
  asm("ld.global.nc.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(policy));
  return v;
}

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
__global__ void __launch_bounds__(kThreads, 1)
    softmax_block_online_vec4_cached(const float *__restrict__ x, float *__restrict__ y,
                                     int64_t rows, int64_t cols) {
  __shared__ float scratch_m[32], scratch_s[32];
  const uint64_t keep = l2_evict_last_policy();
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float *in = x + row * cols;
    float *out = y + row * cols;
    MaxSum acc{-FLT_MAX, 0.f};
    if constexpr (kVec4) {
      const float4 *in4 = reinterpret_cast<const float4 *>(in);
      float4 *out4 = reinterpret_cast<float4 *>(out);
      int64_t n4 = cols / 4;
      for (int64_t c = threadIdx.x; c < n4; c += kThreads)
        online_add4(acc, load_keep(in4 + c, keep));
      acc = block_combine(acc, scratch_m, scratch_s);
      float m = acc.m, inv = 1.f / acc.s;
      for (int64_t c = threadIdx.x; c < n4; c += kThreads) {
        float4 v = __ldcs(in4 + c);
        __stcs(out4 + c, make_float4(__expf(v.x - m) * inv, __expf(v.y - m) * inv,
                                     __expf(v.z - m) * inv, __expf(v.w - m) * inv));
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += kThreads)
        online_add(acc, load_keep(in + c, keep));
      acc = block_combine(acc, scratch_m, scratch_s);
      float m = acc.m, inv = 1.f / acc.s;
      for (int64_t c = threadIdx.x; c < cols; c += kThreads)
        __stcs(out + c, __expf(__ldcs(in + c) - m) * inv);
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
  int device = 0, sms = 0;
  KF_CHECK(cudaGetDevice(&device));
  KF_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (sms < 1) return -1;
  unsigned grid = (unsigned)(rows < sms ? rows : sms);
  bool vec4 = cols % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0 &&
              reinterpret_cast<uintptr_t>(y.data) % 16 == 0;
  if (vec4)
    softmax_block_online_vec4_cached<true><<<grid, kThreads, 0, stream>>>(
        kf_ptr<const float>(x), kf_ptr<float>(y), rows, cols);
  else
    softmax_block_online_vec4_cached<false><<<grid, kThreads, 0, stream>>>(
        kf_ptr<const float>(x), kf_ptr<float>(y), rows, cols);
  KF_CHECK_LAUNCH();
  return 0;
}
