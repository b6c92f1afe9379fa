// Row softmax, one thread per row: three passes over the row (max, sum of exp, write).
// Hand-written for kforge's scripted demo (no model wrote it): the naive starting point.
#include "kforge.h"
#include <cfloat>
#include <climits>
#include <cstdint>

constexpr int kThreads = 128;

__global__ void softmax_thread_per_row(const float *__restrict__ x, float *__restrict__ y,
                                       int64_t rows, int64_t cols) {
  for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < rows;
       row += (int64_t)gridDim.x * blockDim.x) {
    const float *in = x + row * cols;
    float *out = y + row * cols;
    float m = -FLT_MAX;
    for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, in[c]);
    float s = 0.f;
    for (int64_t c = 0; c < cols; ++c) s += __expf(in[c] - m);
    float inv = 1.f / s;
    for (int64_t c = 0; c < cols; ++c) out[c] = __expf(in[c] - m) * inv;
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
  int64_t blocks = (rows + kThreads - 1) / kThreads;
  unsigned grid = (unsigned)(blocks < INT_MAX ? blocks : INT_MAX);
  softmax_thread_per_row<<<grid, kThreads, 0, stream>>>(kf_ptr<const float>(x), kf_ptr<float>(y),
                                                       rows, cols);
  KF_CHECK_LAUNCH();
  return 0;
}
