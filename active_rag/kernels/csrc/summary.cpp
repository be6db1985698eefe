// A greedy decode step's summary of each sequence's next-token logits in one op: the token, its log-probability and
// the distribution's entropy (DRAGIN Eq. 1), which a greedy session reads (active_rag.decoding.step_summary).
//
// torch computes them in about ten ops over the vocabulary (log_softmax, argmax, then exp, a comparison, a product,
// a where and a sum for the entropy): 0.5-1.5 ms a step of qwen2.5-coder-0.5b's 151,936 logits. Here: one pass for
// the maximum m, a scan for its first index (torch.argmax's token), and one pass summing s = sum exp(x - m) and
// t = sum exp(x - m) (x - m) (blocks of 256 in float32, their sums in double); the log-probability is
// (x_token - m) - log s, the entropy log s - t / s. The token is argmax's; the two numbers differ from torch's by
// float32 rounding (their own exp and order of sums: closer to a float64 computation than torch's on random logits;
// a logit more than 87 below the maximum, -inf included, counts as 87 below it: e^-87 = 1.6e-38, where torch counts
// 0). NaN or infinite logits give a NaN entropy, which the session refuses.

#include "kernels.h"
#include "pool.h"

#include <torch/library.h>

#include <cmath>
#include <limits>

namespace active_rag_kernels {

// s and t in blocks of 256 values summed in float32 (a vector's lanes), the blocks' sums added in double
#define AR_SUMMARY_BODY                                                                              \
  float m = -std::numeric_limits<float>::infinity();                                                 \
  _Pragma("omp simd reduction(max : m)") for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);      \
  double s = 0.0, t = 0.0;                                                                           \
  for (int64_t start = 0; start < n; start += 256) {                                                 \
    const int64_t stop = std::min<int64_t>(n, start + 256);                                          \
    float bs = 0.0f, bt = 0.0f;                                                                      \
    _Pragma("omp simd reduction(+ : bs, bt)") for (int64_t i = start; i < stop; ++i) {              \
      const float d = std::max(x[i] - m, -87.0f);                                                    \
      AR_EXP_BODY(d)                                                                                 \
      bs += e;                                                                                       \
      bt += e * d;                                                                                   \
    }                                                                                                \
    s += bs;                                                                                         \
    t += bt;                                                                                         \
  }                                                                                                  \
  sums[0] = m;                                                                                       \
  sums[1] = s;                                                                                       \
  sums[2] = t;

// sums = (m, s, t) of the row x[0 .. n), s and t summed in double
static void row_sums_scalar(const float* x, int64_t n, double* sums) { AR_SUMMARY_BODY }
#if AR_X86
// AVX2: GCC leaves AR_SUMMARY_BODY's exp loop scalar for AVX2 (4x slower than torch's), so the same operations, in
// the same order, are written out 8 lanes at a time (lanes summed in float32 within each block of 256).
// AR_EXP_BODY of 8 values
__attribute__((target("avx2,fma"))) static inline __m256 exp8(__m256 d) {
  const __m256 n8 = _mm256_round_ps(_mm256_mul_ps(d, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_add_ps(_mm256_sub_ps(d, _mm256_mul_ps(n8, _mm256_set1_ps(0.693359375f))),
                                 _mm256_mul_ps(n8, _mm256_set1_ps(2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n8), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

__attribute__((target("avx2,fma"))) static void row_sums_avx2(const float* x, int64_t n, double* sums) {
  float m = -std::numeric_limits<float>::infinity();
  _Pragma("omp simd reduction(max : m)") for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  const __m256 vm = _mm256_set1_ps(m), floor87 = _mm256_set1_ps(-87.0f);
  double s = 0.0, t = 0.0;
  for (int64_t start = 0; start < n; start += 256) {
    const int64_t stop = std::min<int64_t>(n, start + 256), whole = start + (stop - start) / 8 * 8;
    __m256 bs = _mm256_setzero_ps(), bt = _mm256_setzero_ps();
    for (int64_t i = start; i < whole; i += 8) {
      // maxps returns its second operand where one is NaN: a NaN logit stays NaN (and makes s NaN)
      const __m256 d = _mm256_max_ps(floor87, _mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
      const __m256 e = exp8(d);
      bs = _mm256_add_ps(bs, e);
      bt = _mm256_add_ps(bt, _mm256_mul_ps(e, d));
    }
    alignas(32) float ls[8], lt[8];
    _mm256_store_ps(ls, bs);
    _mm256_store_ps(lt, bt);
    float fs = 0.0f, ft = 0.0f;
    for (int l = 0; l < 8; ++l) {
      fs += ls[l];
      ft += lt[l];
    }
    for (int64_t i = whole; i < stop; ++i) {
      const float d = std::max(x[i] - m, -87.0f);
      AR_EXP_BODY(d)
      fs += e;
      ft += e * d;
    }
    s += fs;
    t += ft;
  }
  sums[0] = m;
  sums[1] = s;
  sums[2] = t;
}
__attribute__((target("avx2,fma,avx512f,avx512bw"))) static void row_sums_avx512(const float* x, int64_t n, double* sums) {
  AR_SUMMARY_BODY
}
#endif

// logits [rows, vocab] float32 -> [rows, 3] float32: (argmax, its log-probability, entropy) per row.
at::Tensor greedy_summary(const at::Tensor& logits_in, int64_t isa) {
  TORCH_CHECK(logits_in.device().is_cpu() && logits_in.scalar_type() == at::kFloat && logits_in.dim() == 2 &&
                  logits_in.size(1) > 0,
              "greedy_summary: logits must be float32 [rows, vocab] on the CPU");
  const at::Tensor logits = logits_in.contiguous();
  const int64_t rows = logits.size(0), n = logits.size(1);
  at::Tensor out = at::empty({rows, 3}, logits.options());
  const float* px = logits.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const int64_t code = resolve_isa(isa);
  void (*sums_of)(const float*, int64_t, double*) = row_sums_scalar;
#if AR_X86
  if (code >= kAvx512Vnni) sums_of = row_sums_avx512;
  else if (code >= kAvx2) sums_of = row_sums_avx2;
#endif
  (void)code;
  SpinPool::parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = px + r * n;
      double sums[3];
      sums_of(x, n, sums);
      const float m = float(sums[0]);
      const double s = sums[1], t = sums[2];
      // torch.argmax's token: the first maximum; in a row with NaN (then s is NaN), the first NaN, which it takes
      // for the maximum (a row with +inf and no NaN: its first +inf)
      int64_t token = 0;
      if (std::isnan(s)) {
        while (token < n && !std::isnan(x[token])) ++token;
        if (token == n) token = 0;
        while (token < n && !(x[token] == m) && !std::isnan(x[token])) ++token;
      } else {
        while (token < n - 1 && !(x[token] == m)) ++token;
      }
      const double log_s = std::log(s);
      po[r * 3] = float(token);
      po[r * 3 + 1] = float(double(x[token] - m) - log_s);
      po[r * 3 + 2] = float(log_s - t / s);
    }
  });
  return out;
}

}  // namespace active_rag_kernels

TORCH_LIBRARY_FRAGMENT(active_rag, m) { m.def("greedy_summary(Tensor logits, int isa=0) -> Tensor"); }

TORCH_LIBRARY_IMPL(active_rag, CPU, m) { m.impl("greedy_summary", &active_rag_kernels::greedy_summary); }
