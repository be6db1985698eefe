// Every decoder layer of a CPU decode step in one op (active_rag.decoding.kernel_layers).
//
// After the step's small ops moved into this library, a 0.5B step still made about 1,800 op calls and ran the
// lean step's Python around them (active_rag.decoding.lean_step): per layer the projections' bound calls, the
// heads' views, the cache's update for each sequence, the attention's checks, the MLP's activation. Measured on the
// 2-core EPYC (qwen2.5-coder-0.5b `mixed`, batch 1), a replay of the same ops in a bare Python loop took 3-5 ms a step
// less than the engine's step: time outside the kernels that llama.cpp does not spend.
//
// Here the loop over the layers is C++, calling the same functions the lean step's op calls reach, in the same
// order, on tensors of the same shapes and strides: the packed projections (decode_kernel.cpp's int*_linear, fused
// where the step fuses them), add_rms_norm, rope_heads, each sequence's new key and value copied into its cache
// buffer, decode_attention over each sequence's keys, torch's own silu and mul. So its outputs are the lean step's
// bits (tests/unit_tests/test_kernel_layers.py). The plan (which tensors, kinds and sizes) is built once in Python and
// read here in order; the cache buffers and the position each sequence writes are given each step, the buffers' room
// made beforehand by the caller (GrowingLayer.step_slot).
//
// Plan, per layer: ints heads, kv_heads, head_dim, post_lanes, next_lanes, then four groups of projections (q/k/v,
// o, gate/up, down), each: count, then per packed layer: kind (4, 5, 8), n, isa, has_bias, parts, parts' sizes;
// reals scaling, post_eps, next_eps; tensors post-attention norm weight, next norm weight (the next layer's input
// norm, after the last layer the final norm), then per packed layer its tiles, scales and bias (when it has one).
// The ints start with the number of layers.

#include "kernels.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace active_rag_kernels {

namespace {

struct PlanReader {
  at::TensorList tensors;
  at::IntArrayRef ints;
  at::ArrayRef<double> reals;
  size_t t = 0, i = 0, r = 0;

  const at::Tensor& tensor() {
    TORCH_CHECK(t < tensors.size(), "decode_layers: the plan holds fewer tensors than it names");
    return tensors[t++];
  }
  int64_t integer() {
    TORCH_CHECK(i < ints.size(), "decode_layers: the plan holds fewer integers than it names");
    return ints[i++];
  }
  double real() {
    TORCH_CHECK(r < reals.size(), "decode_layers: the plan holds fewer reals than it names");
    return reals[r++];
  }
};

// One group of packed layers reading `x` [rows, 1, in]: each layer's output [rows, 1, n] and its parts' views, in
// order (the lean step's fused call, split_with_sizes, or a layer's own call).
std::vector<at::Tensor> run_group(PlanReader& plan, const at::Tensor& x) {
  const int64_t layers = plan.integer(), rows = x.size(0), in = x.size(-1);
  const at::Tensor x2 = x.reshape({rows, in});
  std::vector<at::Tensor> parts;
  for (int64_t j = 0; j < layers; ++j) {
    const int64_t kind = plan.integer(), n = plan.integer(), isa = plan.integer();
    const bool has_bias = plan.integer() != 0;
    const int64_t count = plan.integer();
    const at::Tensor& tiles = plan.tensor();
    const at::Tensor& scales = plan.tensor();
    c10::optional<at::Tensor> bias;
    if (has_bias) bias = plan.tensor();
    const at::Tensor out = packed_linear(kind, x2, tiles, scales, n, bias, isa).view({rows, 1, n});
    int64_t start = 0;
    for (int64_t p = 0; p < count; ++p) {
      const int64_t size = plan.integer();
      parts.push_back(out.narrow(2, start, size));
      start += size;
    }
    TORCH_CHECK(start == n, "decode_layers: a packed layer's parts do not add up to its ", n, " outputs");
  }
  return parts;
}

}  // namespace

// hidden, x [rows, 1, width] float32: the residual stream and the first layer's normed input; cos, sin [rows, 1, 1,
// head_dim] (sin with its first half negated: lean_step._Rotary.prepare); keys, values [layers * rows] (layer-major):
// sequence b's cache buffers [1, kv_heads, capacity, head_dim] of each layer, lengths the position it writes.
// Returns the residual stream and the final norm's output after the last layer.
std::tuple<at::Tensor, at::Tensor> decode_layers(const at::Tensor& hidden_in, const at::Tensor& x_in,
                                                 const at::Tensor& cos, const at::Tensor& sin, at::TensorList weights,
                                                 at::IntArrayRef ints, at::ArrayRef<double> reals, at::TensorList keys,
                                                 at::TensorList values, at::IntArrayRef lengths) {
  TORCH_CHECK(hidden_in.device().is_cpu() && hidden_in.scalar_type() == at::kFloat && hidden_in.dim() == 3 &&
                  hidden_in.size(1) == 1 && x_in.sizes() == hidden_in.sizes() && x_in.scalar_type() == at::kFloat,
              "decode_layers: hidden and x must be float32 CPU tensors [rows, 1, width]");
  PlanReader plan{weights, ints, reals};
  const int64_t layers = plan.integer(), rows = hidden_in.size(0);
  const size_t slots = size_t(layers * rows);
  TORCH_CHECK(keys.size() == slots && values.size() == slots && lengths.size() == slots,
              "decode_layers: keys, values and lengths need one entry for each layer and sequence (", slots, ")");
  at::Tensor hidden = hidden_in, x = x_in;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t heads = plan.integer(), kv_heads = plan.integer(), dim = plan.integer();
    const int64_t post_lanes = plan.integer(), next_lanes = plan.integer();
    const double scaling = plan.real(), post_eps = plan.real(), next_eps = plan.real();
    const at::Tensor& post_weight = plan.tensor();
    const at::Tensor& next_weight = plan.tensor();

    const std::vector<at::Tensor> qkv = run_group(plan, x);
    TORCH_CHECK(qkv.size() == 3, "decode_layers: the query, key and value projections must give three parts");
    at::Tensor query, key;
    std::tie(query, key) = rope_heads(qkv[0], qkv[1], cos, sin, dim);
    const at::Tensor value = qkv[2].view({rows, 1, -1, dim}).transpose(1, 2);
    TORCH_CHECK(query.size(1) == heads && key.size(1) == kv_heads, "decode_layers: the projections' heads are not "
                "the plan's");
    std::vector<at::Tensor> attended;
    attended.reserve(size_t(rows));
    for (int64_t b = 0; b < rows; ++b) {
      const size_t slot = size_t(l * rows + b);
      const at::Tensor &kb = keys[slot], &vb = values[slot];
      const int64_t length = lengths[slot];
      TORCH_CHECK(kb.dim() == 4 && kb.size(0) == 1 && kb.size(1) == kv_heads && kb.size(3) == dim &&
                      vb.sizes() == kb.sizes() && kb.scalar_type() == at::kFloat && vb.scalar_type() == at::kFloat &&
                      length >= 0 && length < kb.size(2),
                  "decode_layers: a cache buffer is not [1, kv_heads, capacity, head_dim] float32 with room for the "
                  "position written");
      kb.narrow(2, length, 1).copy_(key.narrow(0, b, 1));
      vb.narrow(2, length, 1).copy_(value.narrow(0, b, 1));
      attended.push_back(decode_attention(query.narrow(0, b, 1), kb.narrow(2, 0, length + 1),
                                          vb.narrow(2, 0, length + 1), scaling, 0));
    }
    const at::Tensor heads_out = attended.size() == 1 ? attended[0] : at::cat(attended, 0);
    const std::vector<at::Tensor> o = run_group(plan, heads_out.reshape({rows, 1, -1}).contiguous());
    TORCH_CHECK(o.size() == 1, "decode_layers: the output projection must give one part");
    std::tie(hidden, x) = add_rms_norm(hidden, o[0], post_weight, post_eps, post_lanes);

    const std::vector<at::Tensor> gate_up = run_group(plan, x);
    TORCH_CHECK(gate_up.size() == 2, "decode_layers: the gate and up projections must give two parts");
    const std::vector<at::Tensor> down = run_group(plan, at::mul(at::silu(gate_up[0]), gate_up[1]));
    TORCH_CHECK(down.size() == 1, "decode_layers: the down projection must give one part");
    std::tie(hidden, x) = add_rms_norm(hidden, down[0], next_weight, next_eps, next_lanes);
  }
  TORCH_CHECK(plan.t == weights.size() && plan.i == ints.size() && plan.r == reals.size(),
              "decode_layers: the plan holds more than its layers read");
  return {hidden, x};
}

}  // namespace active_rag_kernels

TORCH_LIBRARY_FRAGMENT(active_rag, m) {
  m.def(
      "decode_layers(Tensor hidden, Tensor x, Tensor cos, Tensor sin, Tensor[] weights, int[] ints, float[] reals, "
      "Tensor[] keys, Tensor[] values, int[] lengths) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(active_rag, CPU, m) { m.impl("decode_layers", &active_rag_kernels::decode_layers); }
