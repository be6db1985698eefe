// A decode step's RMS norms in one op each, with torch's own bits (active_rag.decoding.lean_step).
//
// torch's float32 `rms_norm` on the CPU runs seven ops (pow, a sum and a division for the mean, add, rsqrt and two
// products), 28 us a call inside a decode step of qwen2.5-coder-0.5b: 1.4 ms of its 49 norms a step. Here the same
// arithmetic runs in one pass of the row: the squares summed in the order of torch's cascade sum
// (aten/src/ATen/native/cpu/SumKernel.cpp: `vectorized_inner_sum`, its `row_sum` over vectors of `lanes` floats with 4
// accumulators and levels of 16), then mean = sum / n, r = 1 / sqrt(mean + eps), y = (x * r) * w, each a correctly
// rounded float32 operation as torch's. `lanes` is the width of torch's float vector on this CPU (16 with AVX-512, 8
// with AVX2); the caller checks once that the op gives torch's bits and keeps torch's norm otherwise. `add_rms_norm`
// first adds a residual (x + delta, as torch's add), returning the sum and its norm.

#include "kernels.h"

#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <vector>

namespace active_rag_kernels {

constexpr int64_t kMaxLanes = 16;

static int64_t ceil_log2(int64_t x) { return x <= 2 ? 1 : 64 - __builtin_clzll(uint64_t(x - 1)); }

using Lanes = std::array<float, kMaxLanes>;

// torch's multi_row_sum<Vectorized<float>, 4>: `size` rows of 4 vectors (vector k of row i at v + (4 i + k) lanes).
template <int64_t lanes>
static std::array<Lanes, 4> multi_row_sum(const float* v, int64_t size) {
  constexpr int64_t levels = 4;
  const int64_t power = std::max<int64_t>(4, ceil_log2(size) / levels), step = int64_t(1) << power, mask = step - 1;
  std::array<std::array<Lanes, 4>, levels> acc{};
  auto add_row = [&](int64_t i) {
    for (int64_t k = 0; k < 4; ++k) {
      const float* p = v + (4 * i + k) * lanes;
      for (int64_t l = 0; l < lanes; ++l) acc[0][size_t(k)][size_t(l)] += p[l];
    }
  };
  int64_t i = 0;
  while (i + step <= size) {
    for (int64_t j = 0; j < step; ++j, ++i) add_row(i);
    for (int64_t j = 1; j < levels; ++j) {
      for (size_t k = 0; k < 4; ++k) {
        for (int64_t l = 0; l < lanes; ++l) {
          acc[size_t(j)][k][size_t(l)] += acc[size_t(j - 1)][k][size_t(l)];
          acc[size_t(j - 1)][k][size_t(l)] = 0.0f;
        }
      }
      if ((i & (mask << (j * power))) != 0) break;
    }
  }
  for (; i < size; ++i) add_row(i);
  for (size_t j = 1; j < size_t(levels); ++j)
    for (size_t k = 0; k < 4; ++k)
      for (int64_t l = 0; l < lanes; ++l) acc[0][k][size_t(l)] += acc[j][k][size_t(l)];
  return acc[0];
}

// torch's sum of a contiguous float32 row of n values (lanes > 1: `vectorized_inner_sum` where n >= lanes;
// otherwise `scalar_inner_sum`, the same row_sum over single values).
template <int64_t lanes>
static float cascade_sum(const float* x, int64_t n) {
  if (lanes > 1 && n < lanes) return cascade_sum<1>(x, n);
  const int64_t vectors = n / lanes, rows = vectors / 4;
  std::array<Lanes, 4> partial = multi_row_sum<lanes>(x, rows);
  for (int64_t i = rows * 4; i < vectors; ++i)
    for (int64_t l = 0; l < lanes; ++l) partial[0][size_t(l)] += x[i * lanes + l];
  for (size_t k = 1; k < 4; ++k)
    for (int64_t l = 0; l < lanes; ++l) partial[0][size_t(l)] += partial[k][size_t(l)];
  if (lanes == 1) return 0.0f + partial[0][0];  // scalar_inner_sum's row_sum, accumulated into the 0 output
  float total = 0.0f;
  for (int64_t t = vectors * lanes; t < n; ++t) total += x[t];
  for (int64_t l = 0; l < lanes; ++l) total += partial[0][size_t(l)];
  return 0.0f + total;  // the output, filled with 0, accumulates the row's sum
}

static void norm_row(const float* x, const float* w, int64_t n, float eps, int64_t lanes, float* squares, float* y) {
  for (int64_t i = 0; i < n; ++i) squares[i] = x[i] * x[i];
  const float sum = lanes == 16 ? cascade_sum<16>(squares, n) : lanes == 8 ? cascade_sum<8>(squares, n)
                    : lanes == 4 ? cascade_sum<4>(squares, n) : cascade_sum<1>(squares, n);
  const float mean = sum / float(n);
  const float r = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * r) * w[i];
}

static void check(const at::Tensor& x, const at::Tensor& weight, int64_t lanes) {
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu(), "rms_norm: CPU tensors only");
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat, "rms_norm: float32 tensors");
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), "rms_norm: weight must have ",
              "the last dimension's size");
  TORCH_CHECK(lanes == 1 || lanes == 4 || lanes == 8 || lanes == 16, "rms_norm: lanes must be 1, 4, 8 or 16");
}

static void norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps, int64_t lanes, at::Tensor& y) {
  const int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  const float* px = x.data_ptr<float>();
  const float* pw = weight.data_ptr<float>();
  float* py = y.data_ptr<float>();
  std::vector<float> squares(size_t(std::max<int64_t>(n, 1)));
  for (int64_t r = 0; r < rows; ++r) norm_row(px + r * n, pw, n, float(eps), lanes, squares.data(), py + r * n);
}

at::Tensor rms_norm(const at::Tensor& x_in, const at::Tensor& weight_in, double eps, int64_t lanes) {
  check(x_in, weight_in, lanes);
  const at::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
  at::Tensor y = at::empty_like(x);
  norm_rows(x, weight, eps, lanes, y);
  return y;
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x_in, const at::Tensor& delta_in,
                                                const at::Tensor& weight_in, double eps, int64_t lanes) {
  check(x_in, weight_in, lanes);
  TORCH_CHECK(delta_in.sizes() == x_in.sizes() && delta_in.scalar_type() == at::kFloat && delta_in.device().is_cpu(),
              "add_rms_norm: delta must be a float32 CPU tensor of x's shape");
  const at::Tensor x = x_in.contiguous(), delta = delta_in.contiguous(), weight = weight_in.contiguous();
  at::Tensor sum = at::empty_like(x);
  const float* px = x.data_ptr<float>();
  const float* pd = delta.data_ptr<float>();
  float* ps = sum.data_ptr<float>();
  const int64_t count = x.numel();
  for (int64_t i = 0; i < count; ++i) ps[i] = px[i] + pd[i];
  at::Tensor y = at::empty_like(x);
  norm_rows(sum, weight, eps, lanes, y);
  return {sum, y};
}

}  // namespace active_rag_kernels

TORCH_LIBRARY_FRAGMENT(active_rag, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps, int lanes) -> Tensor");
  m.def("add_rms_norm(Tensor x, Tensor delta, Tensor weight, float eps, int lanes) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(active_rag, CPU, m) {
  m.impl("rms_norm", &active_rag_kernels::rms_norm);
  m.impl("add_rms_norm", &active_rag_kernels::add_rms_norm);
}
