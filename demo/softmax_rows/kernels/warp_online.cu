// Row softmax, one warp per row: a single online pass keeps a running max m and a running sum s
// of exp(x - m) per lane, the warp merges the (m, s) pairs, and a second pass writes the output.
// Hand-written for kforge's scripted demo (no model wrote it): warp_online_buggy, repaired.
#include "kforge.h"
#include <cfloat>
#include <climits>
#include <cstdint>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Merges the running pair (m, s) with (m2, s2): both sums are rescaled to the larger max.
__device__ __forceinline__ void combine(float &m, float &s, float m2, float s2) {
  float mn = fmaxf(m, m2);
  s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
  m = mn;
}

__global__ void softmax_warp_online(const float *__restrict__ x, float *__restrict__ y,
                                    int64_t rows, int64_t cols) {
  int lane = threadIdx.x % 32;
  for (int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32; row < rows;
       row += (int64_t)gridDim.x * kWarps) {
    const float *in = x + row * cols;
    float *out = y + row * cols;
    float m = -FLT_MAX, s = 0.f;
    for (int64_t c = lane; c < cols; c += 32) {
      float v = in[c];
      float mn = fmaxf(m, v);
      s = s * __expf(m - mn) + __expf(v - mn);
      m = mn;
    }
    for (int o = 16; o > 0; o >>= 1)
      combine(m, s, __shfl_xor_sync(0xffffffff, m, o), __shfl_xor_sync(0xffffffff, s, o));
    // Every lane holds the same max; take lane 0's sum so all lanes scale alike.
    s = __shfl_sync(0xffffffff, s, 0);
    float inv = 1.f / s;
    for (int64_t c = lane; c < cols; c += 32) out[c] = __expf(in[c] - m) * inv;
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
  int64_t blocks = (rows + kWarps - 1) / kWarps;
  unsigned grid = (unsigned)(blocks < INT_MAX ? blocks : INT_MAX);
  softmax_warp_online<<<grid, kThreads, 0, stream>>>(kf_ptr<const float>(x), kf_ptr<float>(y),
                                                    rows, cols);
  KF_CHECK_LAUNCH();
  return 0;
}
