// Helpers for ops that work row by row: one program instance per row of N columns.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gen/reductions.hpp"
#include "ordo/request.hpp"

namespace ordo::gen {

struct Row {
  ir::Builder& b;
  int64_t N;
  ir::ExprRef base;  // index of the row's first element

  Row(ir::Builder& builder, int64_t n)
      : b(builder), N(n), base(builder.let("row", ir::mul(ir::program_id(0), ir::index_const(n)))) {}
  // A row that starts at element `first` (attention's score rows in scratch).
  Row(ir::Builder& builder, int64_t n, ir::ExprRef first) : b(builder), N(n), base(std::move(first)) {}

  ir::ExprRef at(ir::ExprRef col) const { return ir::add(base, std::move(col)); }
  // Elements [col, col+lanes) of this row of `buffer` (or of a per-column buffer such as
  // weight), converted to `t` (exact: storage types widen).
  ir::ExprRef load_as(int buffer, ir::ExprRef col, int lanes, ScalarType t) const {
    const bool per_column = b.kernel().buffers[size_t(buffer)].extent == ir::Extent::cols;
    ir::ExprRef v = ir::load(b.kernel(), buffer, per_column ? std::move(col) : at(std::move(col)), lanes);
    return v->type.scalar == t ? v : ir::cast(v, t);
  }
  // Rounds `v` (f32) to `storage` and stores it at `col`.
  void store_as(int buffer, ir::ExprRef col, ir::ExprRef v) const {
    ScalarType st = b.kernel().buffers[size_t(buffer)].elem;
    b.store(buffer, at(std::move(col)), v->type.scalar == st ? v : ir::cast(v, st));
  }
  // body(col, lanes) over the row: vectors of `lanes`, then the tail one by one.
  template <class F>
  void for_each(int lanes, F&& body) const {
    const int64_t full = N - N % lanes;
    if (full > 0) b.for_range("col", ir::index_const(0), ir::index_const(full), lanes, [&](ir::ExprRef c) { body(c, lanes); });
    if (full < N) b.for_range("col", ir::index_const(full), ir::index_const(N), 1, [&](ir::ExprRef c) { body(c, 1); });
  }
};

struct SoftmaxStats {
  ir::ExprRef max, sum;  // f32
};
// softmax over one row of `row.N` values in buffer x (any storage type), written to y (which may
// be x): the SoftmaxOrder's reductions and output pass exactly as the softmax op runs them.
SoftmaxStats softmax_row(ir::Builder& b, const ir::SoftmaxOrder& o, const Row& row, int x, int y);
// The softmax op's pieces, for reductions laid out differently (attention's query lanes):
// PyTorch's vectorized max (keeps b when a == b; NaN when a is NaN), and folding values by a
// LaneFold, each combination bound to a local.
ir::ExprRef softmax_max(ir::ExprRef a, ir::ExprRef b);
// std::max(m, x) as PyTorch's scalar tails use it: m < x ? x : m (a NaN x is skipped).
ir::ExprRef softmax_scalar_max(ir::ExprRef m, ir::ExprRef x);
ir::ExprRef fold_lanes(ir::Builder& b, std::vector<ir::ExprRef> v, ir::LaneFold f,
                       const std::function<ir::ExprRef(ir::ExprRef, ir::ExprRef)>& op, const std::string& name);

// layer_norm's arguments, declared in the order every layer_norm kernel takes them (x, weight,
// bias, y, mean, rstd); weight and bias are -1 when the request has none.
struct LayerNormBuffers {
  int x, weight, bias, y, mean, rstd;
};
inline LayerNormBuffers layer_norm_buffers(ir::Builder& b, const Request& r) {
  const ScalarType wt = r.weight_type();
  LayerNormBuffers out;
  out.x = b.buffer("x", r.x_dtype, false, ir::Extent::rows_by_cols);
  out.weight = r.has_weight ? b.buffer("weight", wt, false, ir::Extent::cols) : -1;
  out.bias = r.has_bias ? b.buffer("bias", wt, false, ir::Extent::cols) : -1;
  out.y = b.buffer("y", r.x_dtype, true, ir::Extent::rows_by_cols);
  out.mean = b.buffer("mean", r.x_dtype, true, ir::Extent::rows);
  out.rstd = b.buffer("rstd", r.x_dtype, true, ir::Extent::rows);
  return out;
}

// Stores a per-row statistic (f32 value) into element `row` of `buffer`.
inline void store_stat(ir::Builder& b, int buffer, ir::ExprRef v) {
  ScalarType st = b.kernel().buffers[size_t(buffer)].elem;
  b.store(buffer, ir::program_id(0), v->type.scalar == st ? v : ir::cast(v, st));
}

// Statistics leave the reduction in the accumulation type and continue in f32.
inline ir::ExprRef to_f32(ir::ExprRef v) {
  return v->type.scalar == ScalarType::f32 ? v : ir::cast(v, ScalarType::f32);
}

// Rounding to a 16-bit storage type applies to f32 arithmetic; a reduction accumulated in f64
// (torch.var_mean) is rounded only at its results, which are f32 by then.
inline Arith stats_arith(const ir::Order& o, ScalarType compute, ScalarType storage) {
  Arith a{compute, std::nullopt};
  if (o.round_stats_to_storage && compute == ScalarType::f32 && (storage == ScalarType::bf16 || storage == ScalarType::f16))
    a.round_to = storage;
  return a;
}

// How many 32-bit words of reduction state an expansion may keep live for one instance on
// target t, or 0 for no bound. The CUDA targets run an instance as one thread; cuda-emu gets
// the same IR, because it runs the source NVRTC compiles. That thread's state must fit in its
// 255 registers, or ptxas spills to local memory. A CPU gets no bound: a spill there is an L1
// access, and the CPU needs the wide state, whose independent lanes hide the latency of each
// step of a Welford chain. Lane groups of the cascade on the CPU cost 24-37% of layer_norm's
// time (AVX-512 bf16 N = 4096, AVX2 bf16 N = 16384, AVX-512 f32 N = 8192 and 16384).
//
// 160 was measured with ptxas at sm_90 on the lane Welford cascade at full width, one thread
// per row. The registers on top of the state (a chunk's x and d, the 1/(j+1) constants,
// addresses, bf16 rounding) came to 60-95:
//   state 128 words: 221 registers         (AVX-512 bf16 N = 1024)
//   state 160 words: 245-246 registers     (AVX-512 f32 N = 4096, AVX2 f32 N = 65536)
//   state 192 words: 254-255, no spill yet (AVX-512 f32 N = 8192, AVX-512 bf16 N = 2048, AVX2 bf16 N = 8192)
//   state 208 words and more: spills       (AVX2 f32 N = 2^19, AVX-512 f32 N = 16384, AVX-512 bf16 N = 4096)
// 160 is the largest of these that still left a margin below 255.
inline int64_t register_words(Target t) { return t == Target::cuda || t == Target::cuda_emu ? 160 : 0; }

}  // namespace ordo::gen
