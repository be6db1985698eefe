// active-rag's dequantisation of packed weights for the dense prefill (where a prefill multiplies densely: AMX, or
// ACTIVE_RAG_PREFILL=dense): the weight [n, K] the kernels multiply by, in float32 or bfloat16, written into `out`, with
// the scalar reference's values and rounding (the layout: decode_kernel.cpp).

#include "kernels.h"
#include "pool.h"

#include <torch/library.h>

namespace active_rag_kernels {

// Each output row is written in order, from values looked up in a small table (16 per int4 group, 256 for int8) that
// is computed once: the tile's bytes are re-read from cache per lane, the rows are streamed once. On AVX-512 a lane's
// values are computed 16 at a time instead (simd_avx512.cpp, the same bits; int4 1.5B: 0.97 s of a 939-token prefill before).
// K: the tiles' scales are Q4_K's (k_step_zero).
template <typename T, bool F, bool K = false>
static void int4_dequant_into(const uint8_t* tiles, const uint16_t* sc, int64_t n, int64_t k, T* out) {
  const int64_t count = (n + kTile - 1) / kTile, groups = k / kGroup, group_bytes = (F ? 5 : 4) * kChunk;
  const int64_t tile_scales = K ? groups * (kSuperBytes / kSuperGroups / 2) : groups * 32;  // in 16-bit units
  constexpr int levels = F ? 32 : 16, offset = F ? 16 : 8;
  const bool avx512 = AR_X86 && resolve_isa(kAuto) == kAvx512Vnni;
  SpinPool::parallel_for(count, 1, [&](int64_t begin, int64_t end) {
    T table[levels];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t valid = std::min<int64_t>(kTile, n - t * kTile);
      const uint8_t* tile = tiles + t * groups * group_bytes;
      for (int64_t l = 0; l < valid; ++l) {
        T* row = out + (t * kTile + l) * k;
#if AR_X86
        if (avx512) {
          if (K) {
            int4k_row_avx512(tile, sc + t * tile_scales, groups, l, row);
          } else {
            int4_row_avx512(tile, sc + t * tile_scales, groups, l, F, row);
          }
          continue;
        }
#endif
        for (int64_t g = 0; g < groups; ++g) {
          float step, zero;
          if (K) {
            k_step_zero(sc + t * tile_scales, g, l, step, zero);
          } else {
            const uint16_t* s = sc + (t * groups + g) * 32;
            step = bf16_to_float(s[l]);
            zero = bf16_to_float(s[16 + l]);
          }
          for (int q = 0; q < levels; ++q) table[q] = T(float(q - offset) * step + zero);
          const uint8_t* group = tile + g * group_bytes;
          for (int64_t c = 0; c < 4; ++c) {
            const uint8_t* w = group + c * kChunk + l * 4;
            T* o = row + g * kGroup + c * 8;
            for (int i = 0; i < 4; ++i) {
              int lo = w[i] & 15, hi = w[i] >> 4;
              if (F) {
                lo |= fifth_bit(group, 2 * c, 4 * l + i);
                hi |= fifth_bit(group, 2 * c + 1, 4 * l + i);
              }
              o[i] = table[lo];
              o[4 + i] = table[hi];
            }
          }
        }
      }
    }
  });
}

template <typename T>
static void int8_unpack_into(const uint8_t* tiles, int64_t n, int64_t k, int64_t kp, T* out) {
  const int64_t count = (n + kTile - 1) / kTile, chunks = kp / 4, full = k / 4;
  T table[256];
  for (int b = 0; b < 256; ++b) table[b] = T(float(b - 128));
  const bool avx512 = AR_X86 && resolve_isa(kAuto) == kAvx512Vnni;
  SpinPool::parallel_for(count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t valid = std::min<int64_t>(kTile, n - t * kTile);
      const uint8_t* tile = tiles + t * chunks * kChunk;
      for (int64_t l = 0; l < valid; ++l) {
        T* row = out + (t * kTile + l) * k;
        const uint8_t* w = tile + l * 4;
#if AR_X86
        if (avx512) {
          int8_row_avx512(w, k, row);
          continue;
        }
#endif
        for (int64_t c = 0; c < full; ++c) {
          for (int i = 0; i < 4; ++i) row[c * 4 + i] = table[w[c * kChunk + i]];
        }
        for (int64_t i = full * 4; i < k; ++i) row[i] = table[w[(i / 4) * kChunk + i % 4]];
      }
    }
  });
}

static void check_out(const at::Tensor& out, const char* op) {
  TORCH_CHECK(out.dim() == 2 && out.is_contiguous() && out.device().is_cpu() &&
                  (out.scalar_type() == at::kFloat || out.scalar_type() == at::kBFloat16),
              op, ": out must be a contiguous float32 or bfloat16 [out_features, in_features] CPU tensor");
}

template <bool F>
static void dequant_op(const at::Tensor& tiles, const at::Tensor& scales, at::Tensor out) {
  const char* op = F ? "int5_dequant" : "int4_dequant";
  check_out(out, op);
  const int64_t n = out.size(0), k = out.size(1), count = (n + kTile - 1) / kTile;
  const bool q4k = !F && scales.scalar_type() == at::kByte;  // Q4_K's scales (layout.pack_int4k)
  const int64_t scale_count = q4k ? count * (k / (kGroup * kSuperGroups)) * kSuperBytes : count * k;
  TORCH_CHECK(k % (q4k ? kGroup * kSuperGroups : kGroup) == 0 && tiles.scalar_type() == at::kByte &&
                  tiles.is_contiguous() && tiles.numel() == count * k * (F ? 10 : 8) &&
                  (q4k || scales.scalar_type() == at::kBFloat16) && scales.is_contiguous() &&
                  scales.numel() == scale_count,
              op, ": tiles/scales do not match out's shape");
  const uint16_t* sc = reinterpret_cast<const uint16_t*>(scales.data_ptr());
  if (out.scalar_type() == at::kFloat) {
    if (q4k) {
      int4_dequant_into<float, false, true>(tiles.data_ptr<uint8_t>(), sc, n, k, out.data_ptr<float>());
    } else {
      int4_dequant_into<float, F>(tiles.data_ptr<uint8_t>(), sc, n, k, out.data_ptr<float>());
    }
  } else if (q4k) {
    int4_dequant_into<at::BFloat16, false, true>(tiles.data_ptr<uint8_t>(), sc, n, k, out.data_ptr<at::BFloat16>());
  } else {
    int4_dequant_into<at::BFloat16, F>(tiles.data_ptr<uint8_t>(), sc, n, k, out.data_ptr<at::BFloat16>());
  }
}

static void int4_dequant(const at::Tensor& tiles, const at::Tensor& scales, at::Tensor out) {
  dequant_op<false>(tiles, scales, out);
}

static void int5_dequant(const at::Tensor& tiles, const at::Tensor& scales, at::Tensor out) {
  dequant_op<true>(tiles, scales, out);
}

// int6 (layout.pack_int6k): each output row from its lane of the tiles, float(q - 32) * step.
static void int6_dequant(const at::Tensor& tiles, const at::Tensor& scales, at::Tensor out) {
  check_out(out, "int6_dequant");
  const int64_t n = out.size(0), k = out.size(1), count = (n + kTile - 1) / kTile, groups = k / kGroup;
  TORCH_CHECK(k % (kGroup * kSuperGroups) == 0 && tiles.scalar_type() == at::kByte && tiles.is_contiguous() &&
                  tiles.numel() == count * groups * kInt6GroupBytes && scales.scalar_type() == at::kByte &&
                  scales.is_contiguous() && scales.numel() == count * (groups / kSuperGroups) * kInt6SuperBytes,
              "int6_dequant: tiles/scales do not match out's shape");
  const uint8_t* tl = tiles.data_ptr<uint8_t>();
  const uint16_t* sc = reinterpret_cast<const uint16_t*>(scales.data_ptr<uint8_t>());
  const int64_t tile_scales = groups / kSuperGroups * kInt6SuperBytes / 2;
  const bool is_float = out.scalar_type() == at::kFloat;
  SpinPool::parallel_for(count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t l = 0; l < std::min<int64_t>(kTile, n - t * kTile); ++l) {
        const uint8_t* tile = tl + t * groups * kInt6GroupBytes;
        if (is_float) {
          int6_row(tile, sc + t * tile_scales, groups, l, out.data_ptr<float>() + (t * kTile + l) * k);
        } else {
          int6_row(tile, sc + t * tile_scales, groups, l, out.data_ptr<at::BFloat16>() + (t * kTile + l) * k);
        }
      }
    }
  });
}

static void int8_unpack(const at::Tensor& tiles, at::Tensor out) {
  check_out(out, "int8_unpack");
  const int64_t n = out.size(0), k = out.size(1), count = (n + kTile - 1) / kTile;
  const int64_t kp = (k + kGroup - 1) / kGroup * kGroup;
  TORCH_CHECK(tiles.scalar_type() == at::kByte && tiles.is_contiguous() && tiles.numel() == count * kp * kTile,
              "int8_unpack: tiles do not match out's shape");
  if (out.scalar_type() == at::kFloat) {
    int8_unpack_into(tiles.data_ptr<uint8_t>(), n, k, kp, out.data_ptr<float>());
  } else {
    int8_unpack_into(tiles.data_ptr<uint8_t>(), n, k, kp, out.data_ptr<at::BFloat16>());
  }
}

}  // namespace active_rag_kernels

TORCH_LIBRARY_FRAGMENT(active_rag, m) {
  m.def("int4_dequant(Tensor tiles, Tensor scales, Tensor(a!) out) -> ()");
  m.def("int8_unpack(Tensor tiles, Tensor(a!) out) -> ()");
  m.def("int5_dequant(Tensor tiles, Tensor scales, Tensor(a!) out) -> ()");
  m.def("int6_dequant(Tensor tiles, Tensor scales, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(active_rag, CPU, m) {
  m.impl("int4_dequant", &active_rag_kernels::int4_dequant);
  m.impl("int8_unpack", &active_rag_kernels::int8_unpack);
  m.impl("int5_dequant", &active_rag_kernels::int5_dequant);
  m.impl("int6_dequant", &active_rag_kernels::int6_dequant);
}
