// A decode step's attention for one sequence: one query position over the cached keys, the query heads that share a
// key/value head reading it together (active_rag.decoding.one_token_attention).
//
// torch's fused CPU kernel (scaled_dot_product_attention, the query heads grouped) took 120 us a layer of
// qwen2.5-coder-0.5b's shape over 1,000 keys read from memory and 234 us of the 1.5B's on 2 threads (this op: 77 and
// 155, results/bench/decode-attention-op): it blocks the few query rows as a GEMM would and wakes OpenMP's sleeping
// workers at each call. Here the keys are split into blocks
// of kBlockKeys; each (key/value head, block) is one item of the kernels' own pool (pool.h), which streams the block's
// keys once for all the heads that share them, then its values once, keeping a running maximum, sum and weighted sum
// per head (the softmax of flash-decoding); the blocks are then combined per head. The blocks do not depend on the
// thread count, so the output does not either. It differs from torch's kernels by float32 rounding (its own order of
// sums and its own exp, below): the tests bound it (tests/unit_tests/test_decode_attention.py).

#include "kernels.h"
#include "pool.h"

#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace active_rag_kernels {

constexpr int64_t kBlockKeys = 256;

// One (key/value head, block of keys) item: `r` query heads q[r][d], keys/values rows k + j * row (j < keys), into
// per head: the block's maximum score m, its sum of exp(score - m) l and its weighted values o[d]
// (part = [r][d + 2]: o, m, l). `scores` holds r * kBlockKeys floats.
#define AR_SCORES_BODY                                                                               \
  for (int64_t j = first; j < keys; ++j) {                                                           \
    const float* kj = k + j * row;                                                                   \
    for (int64_t h = 0; h < r; ++h) {                                                                \
      const float* qh = q + h * d;                                                                   \
      float s = 0.0f;                                                                                \
      _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < d; ++i) s += qh[i] * kj[i];      \
      scores[h * kBlockKeys + j] = s * scale;                                                        \
    }                                                                                                \
  }

#define AR_ATTEND_BODY(SCORES, VALUES)                                                                       \
  {                                                                                                  \
    const int64_t first = SCORES(q, k, v, row, keys, r, d, scale, scores);                              \
    AR_SCORES_BODY                                                                                   \
  }                                                                                                  \
  for (int64_t h = 0; h < r; ++h) {                                                                  \
    float* sh = scores + h * kBlockKeys;                                                             \
    float m = -std::numeric_limits<float>::infinity();                                               \
    for (int64_t j = 0; j < keys; ++j) m = std::max(m, sh[j]);                                       \
    float l = 0.0f;                                                                                  \
    _Pragma("omp simd reduction(+ : l)") for (int64_t j = 0; j < keys; ++j) {                       \
      const float x = sh[j] - m;                                                                     \
      AR_EXP_BODY(x)                                                                                 \
      sh[j] = e;                                                                                     \
      l += e;                                                                                        \
    }                                                                                                \
    float* oh = part + h * (d + 2);                                                                  \
    for (int64_t i = 0; i < d; ++i) oh[i] = 0.0f;                                                    \
    oh[d] = m;                                                                                       \
    oh[d + 1] = l;                                                                                   \
  }                                                                                                  \
  VALUES(v, row, keys, r, d, scores, part);

#define AR_ATTEND_ARGS                                                                               \
  const float *q, const float *k, const float *v, int64_t row, int64_t keys, int64_t r, int64_t d, float scale, \
      float *scores, float *part

// The scores of the keys a vector path computes (its whole blocks of keys): how many it did, from the first key.
static inline int64_t no_scores(const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, float,
                                float*) {
  return 0;
}

// The weighted values: part[h][i] += sum_j scores[h][j] * v[j][i].
static inline void values_scalar(const float* v, int64_t row, int64_t keys, int64_t r, int64_t d, const float* scores,
                                 float* part) {
  for (int64_t j = 0; j < keys; ++j) {
    const float* vj = v + j * row;
    for (int64_t h = 0; h < r; ++h) {
      const float w = scores[h * kBlockKeys + j];
      float* oh = part + h * (d + 2);
      for (int64_t i = 0; i < d; ++i) oh[i] += w * vj[i];
    }
  }
}

static void attend_scalar(AR_ATTEND_ARGS) { AR_ATTEND_BODY(no_scores, values_scalar) }

#if AR_X86
#define AR_ATT_AVX2 __attribute__((target("avx2,fma")))
#define AR_ATT_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw")))

// The keys' rows of the next few keys and the values' rows of these, asked for while these keys are scored: a block
// read from memory once otherwise waits on each row (hardware prefetch alone read the cold keys at about 11 GB/s).
static inline void prefetch_rows(const float* k, const float* v, int64_t row, int64_t j, int64_t count, int64_t d) {
  for (int64_t m = 0; m < count; ++m) {
    for (int64_t i = 0; i < d; i += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(k + (j + count + m) * row + i), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(v + (j + m) * row + i), _MM_HINT_T1);
    }
  }
}

// Scores of 8 keys at a time for each head: each key's products summed in 8 lanes, the 8 keys' lanes then summed
// together (two rounds of hadd and one of 128-bit halves), so no key pays a horizontal sum of its own.
AR_ATT_AVX2 static int64_t scores_avx2(const float* q, const float* k, const float* v, int64_t row, int64_t keys,
                                       int64_t r, int64_t d, float scale, float* scores) {
  if (d % 8 != 0) return 0;
  const int64_t whole = keys / 8 * 8;
  for (int64_t j0 = 0; j0 < whole; j0 += 8) {
    prefetch_rows(k, v, row, j0, 8, d);
    for (int64_t h = 0; h < r; ++h) {
      const float* qh = q + h * d;
      __m256 acc[8];
      for (int m = 0; m < 8; ++m) acc[m] = _mm256_setzero_ps();
      for (int64_t c = 0; c < d; c += 8) {
        const __m256 qc = _mm256_loadu_ps(qh + c);
        for (int m = 0; m < 8; ++m) acc[m] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + (j0 + m) * row + c), acc[m]);
      }
      const __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
      const __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
      const __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
      _mm256_storeu_ps(scores + h * kBlockKeys + j0, _mm256_mul_ps(sums, _mm256_set1_ps(scale)));
    }
  }
  return whole;
}

// AVX-512: 16 keys at a time, their lanes summed by a transposing tree (32-bit, 64-bit, then 128-bit interleaves).
// A head size of 64 or 128 (NC = 4 or 8 vectors) keeps the head's query in registers and walks the keys one row at a
// time (one address a key: the loop over 16 rows' addresses spilled them to the stack and reloaded one a multiply-add);
// each key's lanes are still summed over the vectors in order, so the scores are the same bits.
template <int NC>
AR_ATT_AVX512 static inline void key_sums_avx512(const float* qh, const float* k, int64_t row, __m512* acc) {
  __m512 qv[NC];
  for (int c = 0; c < NC; ++c) qv[c] = _mm512_loadu_ps(qh + 16 * c);
  for (int m = 0; m < 16; ++m) {
    const float* km = k + m * row;
    __m512 a = _mm512_setzero_ps();
    for (int c = 0; c < NC; ++c) a = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(km + 16 * c), a);
    acc[m] = a;
  }
}

// Two heads over the same 16 keys: each key row loaded once for both (the loads, not the multiply-adds, bounded the
// loop above when a head read the rows alone), each (head, key) summed over the vectors in the same order.
template <int NC>
AR_ATT_AVX512 static inline void key_sums2_avx512(const float* q0, const float* q1, const float* k, int64_t row,
                                                 __m512* acc0, __m512* acc1) {
  __m512 a[NC], b[NC];
  for (int c = 0; c < NC; ++c) {
    a[c] = _mm512_loadu_ps(q0 + 16 * c);
    b[c] = _mm512_loadu_ps(q1 + 16 * c);
  }
  for (int m = 0; m < 16; ++m) {
    const float* km = k + m * row;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (int c = 0; c < NC; ++c) {
      const __m512 kc = _mm512_loadu_ps(km + 16 * c);
      s0 = _mm512_fmadd_ps(a[c], kc, s0);
      s1 = _mm512_fmadd_ps(b[c], kc, s1);
    }
    acc0[m] = s0;
    acc1[m] = s1;
  }
}

// The 16 keys' sums of their lanes, by a transposing tree (32-bit, 64-bit, then 128-bit interleaves).
AR_ATT_AVX512 static inline __m512 key_tree_avx512(const __m512* acc) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit block: (a0+a2, b0+b2, a1+a3, b1+b3)
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * i], acc[2 * i + 1]), _mm512_unpackhi_ps(acc[2 * i], acc[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // per 128-bit block: the block's sums of keys 4i .. 4i + 3
    const __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 x0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 x1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(3, 1, 3, 1)));
}

AR_ATT_AVX512 static int64_t scores_avx512(const float* q, const float* k, const float* v, int64_t row, int64_t keys,
                                           int64_t r, int64_t d, float scale, float* scores) {
  if (d % 16 != 0) return 0;
  const int64_t whole = keys / 16 * 16;
  const __m512 scaling = _mm512_set1_ps(scale);
  for (int64_t j0 = 0; j0 < whole; j0 += 16) {
    prefetch_rows(k, v, row, j0, 16, d);
    const float* kb = k + j0 * row;
    for (int64_t h = 0; h < r;) {
      const float* qh = q + h * d;
      __m512 acc[16], acc2[16];
      if ((d == 128 || d == 64) && h + 1 < r) {
        if (d == 128) key_sums2_avx512<8>(qh, qh + d, kb, row, acc, acc2);
        else key_sums2_avx512<4>(qh, qh + d, kb, row, acc, acc2);
        _mm512_storeu_ps(scores + h * kBlockKeys + j0, _mm512_mul_ps(key_tree_avx512(acc), scaling));
        _mm512_storeu_ps(scores + (h + 1) * kBlockKeys + j0, _mm512_mul_ps(key_tree_avx512(acc2), scaling));
        h += 2;
        continue;
      }
      if (d == 128) {
        key_sums_avx512<8>(qh, kb, row, acc);
      } else if (d == 64) {
        key_sums_avx512<4>(qh, kb, row, acc);
      } else {
        for (int m = 0; m < 16; ++m) acc[m] = _mm512_setzero_ps();
        for (int64_t c = 0; c < d; c += 16) {
          const __m512 qc = _mm512_loadu_ps(qh + c);
          for (int m = 0; m < 16; ++m) acc[m] = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kb + m * row + c), acc[m]);
        }
      }
      _mm512_storeu_ps(scores + h * kBlockKeys + j0, _mm512_mul_ps(key_tree_avx512(acc), scaling));
      h += 1;
    }
  }
  return whole;
}

// The weighted values a few keys at a time: each head's sums over 16 keys (8 with AVX2) are kept in a register per
// vector of the head's values and written once, where one write a key and head made the loop wait on its stores.
#define AR_VALUES_BODY(VEC, LANES, KEYS, LOAD, STORE, FMA, SET1)                                      \
  if (d % LANES != 0) return values_scalar(v, row, keys, r, d, scores, part);                         \
  for (int64_t j0 = 0; j0 < keys; j0 += KEYS) {                                                       \
    const int64_t count = std::min<int64_t>(KEYS, keys - j0);                                         \
    for (int64_t h = 0; h < r; ++h) {                                                                 \
      const float* w = scores + h * kBlockKeys + j0;                                                  \
      float* oh = part + h * (d + 2);                                                                 \
      for (int64_t c = 0; c < d; c += LANES) {                                                        \
        VEC acc = LOAD(oh + c);                                                                       \
        for (int64_t m = 0; m < count; ++m) acc = FMA(SET1(w[m]), LOAD(v + (j0 + m) * row + c), acc);   \
        STORE(oh + c, acc);                                                                           \
      }                                                                                               \
    }                                                                                                 \
  }

AR_ATT_AVX2 static void values_avx2(const float* v, int64_t row, int64_t keys, int64_t r, int64_t d,
                                    const float* scores, float* part) {
  AR_VALUES_BODY(__m256, 8, 16, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps, _mm256_set1_ps)
}

// AVX-512, a head size that is a multiple of 64: per 64 values of a row (4 vectors), up to 6 heads at once, their 24
// sums in registers over all the block's keys; each key's 4 vectors are loaded once for the heads instead of once a
// head (the loop above loads a value vector and a weight per multiply-add, and at batch 8 after 1,600-token prompts
// ran at 12 GB/s from memory). Each (head, vector) is summed over the keys in the same order as above, with the same
// fused multiply-adds, so the sums are the same bits.
template <int HB>
AR_ATT_AVX512 static void values_heads_avx512(const float* v, int64_t row, int64_t keys, int64_t d, const float* w,
                                              float* part) {
  for (int64_t c = 0; c < d; c += 64) {
    __m512 acc[HB][4];
    for (int h = 0; h < HB; ++h)
      for (int x = 0; x < 4; ++x) acc[h][x] = _mm512_loadu_ps(part + h * (d + 2) + c + 16 * x);
    for (int64_t j = 0; j < keys; ++j) {
      const float* vj = v + j * row + c;
      const __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16), v2 = _mm512_loadu_ps(vj + 32),
                   v3 = _mm512_loadu_ps(vj + 48);
      for (int h = 0; h < HB; ++h) {
        const __m512 wh = _mm512_set1_ps(w[h * kBlockKeys + j]);
        acc[h][0] = _mm512_fmadd_ps(wh, v0, acc[h][0]);
        acc[h][1] = _mm512_fmadd_ps(wh, v1, acc[h][1]);
        acc[h][2] = _mm512_fmadd_ps(wh, v2, acc[h][2]);
        acc[h][3] = _mm512_fmadd_ps(wh, v3, acc[h][3]);
      }
    }
    for (int h = 0; h < HB; ++h)
      for (int x = 0; x < 4; ++x) _mm512_storeu_ps(part + h * (d + 2) + c + 16 * x, acc[h][x]);
  }
}

AR_ATT_AVX512 static void values_avx512(const float* v, int64_t row, int64_t keys, int64_t r, int64_t d,
                                        const float* scores, float* part) {
  if (d % 64 != 0) {
    AR_VALUES_BODY(__m512, 16, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_fmadd_ps, _mm512_set1_ps)
    return;
  }
  for (int64_t h = 0; h < r; h += 6) {
    const float* w = scores + h * kBlockKeys;
    float* p = part + h * (d + 2);
    switch (std::min<int64_t>(6, r - h)) {
      case 6: values_heads_avx512<6>(v, row, keys, d, w, p); break;
      case 5: values_heads_avx512<5>(v, row, keys, d, w, p); break;
      case 4: values_heads_avx512<4>(v, row, keys, d, w, p); break;
      case 3: values_heads_avx512<3>(v, row, keys, d, w, p); break;
      case 2: values_heads_avx512<2>(v, row, keys, d, w, p); break;
      default: values_heads_avx512<1>(v, row, keys, d, w, p); break;
    }
  }
}

AR_ATT_AVX2 static void attend_avx2(AR_ATTEND_ARGS) { AR_ATTEND_BODY(scores_avx2, values_avx2) }
AR_ATT_AVX512 static void attend_avx512(AR_ATTEND_ARGS) { AR_ATTEND_BODY(scores_avx512, values_avx512) }
#endif

using AttendFn = void (*)(AR_ATTEND_ARGS);

static AttendFn attend_function(int64_t isa) {
#if AR_X86
  if (isa >= kAvx512Vnni) return attend_avx512;
  if (isa >= kAvx2) return attend_avx2;
#endif
  (void)isa;
  return attend_scalar;
}

// query [1, H, 1, D] float32; key, value [1, KV, L, D] float32 with each row of D values contiguous (any head and
// row strides: views of a cache with room to grow); H a multiple of KV. Returns [1, 1, H, D] float32:
// softmax(q k^T * scale) v per query head h over key/value head h / (H / KV).
at::Tensor decode_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, double scale,
                            int64_t isa) {
  TORCH_CHECK(query.device().is_cpu() && key.device().is_cpu() && value.device().is_cpu(),
              "decode_attention: CPU tensors only");
  TORCH_CHECK(query.scalar_type() == at::kFloat && key.scalar_type() == at::kFloat && value.scalar_type() == at::kFloat,
              "decode_attention: float32 query, key and value");
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4 && query.size(0) == 1 && query.size(2) == 1 &&
                  key.size(0) == 1 && key.sizes() == value.sizes() && key.size(3) == query.size(3),
              "decode_attention: query [1, heads, 1, dim], key and value [1, kv_heads, keys, dim]");
  const int64_t heads = query.size(1), kv_heads = key.size(1), keys = key.size(2), d = query.size(3);
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, "decode_attention: ", heads, " query heads do not share ",
              kv_heads, " key/value heads evenly");
  TORCH_CHECK(key.stride(3) == 1 && value.stride(3) == 1 && key.stride(2) == value.stride(2) &&
                  key.stride(1) == value.stride(1),
              "decode_attention: key and value rows must be contiguous, with the same strides");
  at::Tensor out = at::empty({1, 1, heads, d}, query.options());
  if (heads == 0 || d == 0) return out;
  TORCH_CHECK(keys > 0, "decode_attention: no keys to attend to");
  const at::Tensor q = query.contiguous();
  const int64_t r = heads / kv_heads, blocks = (keys + kBlockKeys - 1) / kBlockKeys;
  const int64_t row = key.stride(2), head_stride = key.stride(1);
  at::Tensor parts = at::empty({kv_heads, blocks, r, d + 2}, query.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = key.data_ptr<float>();
  const float* vp = value.data_ptr<float>();
  float* pp = parts.data_ptr<float>();
  const AttendFn attend = attend_function(resolve_isa(isa));
  const float s = float(scale);
  SpinPool::parallel_for(kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(size_t(r * kBlockKeys));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t g = item / blocks, b = item % blocks, first = b * kBlockKeys;
      const int64_t count = std::min(kBlockKeys, keys - first);
      attend(qp + g * r * d, kp + g * head_stride + first * row, vp + g * head_stride + first * row, row, count, r, d,
             s, scores.data(), pp + item * r * (d + 2));
    }
  });
  // each head's blocks combined: weights exp(m_b - M) on their sums and weighted values
  float* op = out.data_ptr<float>();
  for (int64_t g = 0; g < kv_heads; ++g) {
    for (int64_t h = 0; h < r; ++h) {
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t b = 0; b < blocks; ++b) top = std::max(top, pp[((g * blocks + b) * r + h) * (d + 2) + d]);
      float* o = op + (g * r + h) * d;
      std::fill(o, o + d, 0.0f);
      float total = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const float* part = pp + ((g * blocks + b) * r + h) * (d + 2);
        const float w = std::exp(part[d] - top);
        total += w * part[d + 1];
        for (int64_t i = 0; i < d; ++i) o[i] += w * part[i];
      }
      for (int64_t i = 0; i < d; ++i) o[i] /= total;
    }
  }
  return out;
}

}  // namespace active_rag_kernels

TORCH_LIBRARY_FRAGMENT(active_rag, m) {
  m.def("decode_attention(Tensor query, Tensor key, Tensor value, float scale, int isa=0) -> Tensor");
}

TORCH_LIBRARY_IMPL(active_rag, CPU, m) { m.impl("decode_attention", &active_rag_kernels::decode_attention); }
