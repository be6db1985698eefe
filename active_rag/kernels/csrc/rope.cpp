// A decode step's rotary position embedding of the query and key heads in one op (active_rag.decoding.lean_step).
//
// Per layer the step turned the projections' output into heads (views and transposes) and rotated them as
// `x * cos + roll(x, half) * sin_signed` (lean_step._Rotary: four ops a tensor): about fifteen small ops a layer, each
// a few microseconds. Here each output element is the same two products and their sum, in that order (float32, no
// fused multiply-add: the build's -ffp-contract=off), so the op gives those ops' bits; the caller checks that once and
// keeps them otherwise.

#include "kernels.h"

#include <torch/library.h>

#include <tuple>

namespace active_rag_kernels {

// x [rows, 1, heads * dim] (each row's values contiguous, any row stride: a view of a wider projection output);
// cos, sin [rows, 1, 1, dim] -> [rows, heads, 1, dim]: out[r, h, 0, i] = x[r, 0, h dim + i] cos[r, i] +
// x[r, 0, h dim + (i + dim / 2) % dim] sin[r, i].
static at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t dim) {
  TORCH_CHECK(x.dim() == 3 && x.size(1) == 1 && x.stride(2) == 1 && dim > 0 && dim % 2 == 0 && x.size(2) % dim == 0,
              "rope_heads: x must be [rows, 1, heads * head_dim] with contiguous rows and an even head_dim");
  const int64_t rows = x.size(0), heads = x.size(2) / dim, half = dim / 2, row_stride = x.stride(0);
  at::Tensor out = at::empty({rows, heads, 1, dim}, x.options());
  const float* px = x.data_ptr<float>();
  const float* pc = cos.data_ptr<float>();
  const float* ps = sin.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = pc + r * dim;
    const float* s = ps + r * dim;
    for (int64_t h = 0; h < heads; ++h) {
      const float* in = px + r * row_stride + h * dim;
      float* o = po + (r * heads + h) * dim;
      for (int64_t i = 0; i < dim; ++i) {
        const float a = in[i] * c[i];
        const float b = in[i < half ? i + half : i - half] * s[i];
        o[i] = a + b;
      }
    }
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> rope_heads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos_in,
                                              const at::Tensor& sin_in, int64_t dim) {
  for (const at::Tensor* t : {&q, &k, &cos_in, &sin_in})
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat, "rope_heads: float32 CPU tensors");
  TORCH_CHECK(q.size(0) == k.size(0) && cos_in.numel() == q.size(0) * dim && sin_in.numel() == q.size(0) * dim,
              "rope_heads: cos and sin must hold head_dim values for each row of q and k");
  const at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
  return {rotate(q, cos, sin, dim), rotate(k, cos, sin, dim)};
}

}  // namespace active_rag_kernels

TORCH_LIBRARY_FRAGMENT(active_rag, m) {
  m.def("rope_heads(Tensor q, Tensor k, Tensor cos, Tensor sin, int head_dim) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(active_rag, CPU, m) { m.impl("rope_heads", &active_rag_kernels::rope_heads); }
