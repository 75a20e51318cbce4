// Helpers for ops that work row by row: one program instance per row of N columns.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "gen/blocks/reductions.hpp"
#include "ir/error.hpp"
#include "ordo/request.hpp"

namespace ordo::gen {

struct Row {
  ir::Builder& b;
  Length length;  // N, fixed or given at launch
  int64_t N;      // N when fixed; 0 when given at launch (code that reads N fixes it)
  ir::ExprRef base;  // index of the row's first element

  Row(ir::Builder& builder, const Length& n)
      : b(builder), length(n), N(n.fixed), base(builder.let("row", ir::mul(ir::program_id(0), n.expr()))) {}
  // A row that starts at element `first` (attention's score rows in scratch).
  Row(ir::Builder& builder, int64_t n, ir::ExprRef first) : b(builder), length(n), N(n), base(std::move(first)) {}

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
    if (!length.is_fixed()) {
      const ir::ExprRef& n = length.at_launch;
      ir::ExprRef full = lanes > 1 ? b.let("full", ir::sub(n, ir::binary(ir::Op::Rem, n, ir::index_const(lanes)))) : n;
      if (lanes > 1) b.for_range("col", ir::index_const(0), full, lanes, [&](ir::ExprRef c) { body(c, lanes); });
      b.for_range("col", full, n, 1, [&](ir::ExprRef c) { body(c, 1); });
      return;
    }
    const int64_t full = N - N % lanes;
    if (full > 0) b.for_range("col", ir::index_const(0), ir::index_const(full), lanes, [&](ir::ExprRef c) { body(c, lanes); });
    if (full < N) b.for_range("col", ir::index_const(full), ir::index_const(N), 1, [&](ir::ExprRef c) { body(c, 1); });
  }
  // The same columns shared by the threads of a team statement (`tid` its thread_id, of
  // `threads`): thread t takes vectors t, t + threads, ..., and the tail columns likewise. With
  // a null tid, one thread takes them all (for_each above).
  template <class F>
  void for_each(int lanes, ir::ExprRef tid, int threads, F&& body) const {
    if (!tid) return for_each(lanes, body);
    if (!length.is_fixed()) throw Error("internal: a team's row loop over a length given at launch");
    const int64_t full = N - N % lanes;
    if (full > 0)
      b.for_range("col", ir::mul(tid, ir::index_const(lanes)), ir::index_const(full), int64_t(lanes) * threads,
                  [&](ir::ExprRef c) { body(c, lanes); });
    if (full < N)
      b.for_range("col", ir::add(ir::index_const(full), tid), ir::index_const(N), threads, [&](ir::ExprRef c) { body(c, 1); });
  }
};

// N of a row op's kernel: r.cols, or (Request::cols_at_launch) the kernel's size argument "N",
// which this declares (call it before the buffers, and once).
inline Length row_length(ir::Builder& b, const Request& r) {
  if (!r.cols_at_launch) return r.cols;
  b.kernel().sizes = {"N"};
  return Length::launch(ir::launch_size(0));
}

struct SoftmaxStats {
  ir::ExprRef max, sum;  // f32
};
// softmax (log: log_softmax) over one row of `row.N` values in buffer x (any storage type), written
// to y (which may be x): the SoftmaxOrder's reductions and output pass exactly as the op runs them.
SoftmaxStats softmax_row(ir::Builder& b, const ir::SoftmaxOrder& o, const Row& row, int x, int y, bool log = false);
// The softmax op's pieces, for reductions laid out differently (attention's query lanes):
// PyTorch's vectorized max (keeps b when a == b; NaN when a is NaN), and folding values by a
// LaneFold, each combination bound to a local.
ir::ExprRef softmax_max(ir::ExprRef a, ir::ExprRef b);
// std::max(m, x) as PyTorch's scalar tails use it: m < x ? x : m (a NaN x is skipped).
ir::ExprRef softmax_scalar_max(ir::ExprRef m, ir::ExprRef x);
ir::ExprRef fold_lanes(ir::Builder& b, std::vector<ir::ExprRef> v, ir::LaneFold f,
                       const std::function<ir::ExprRef(ir::ExprRef, ir::ExprRef)>& op, const std::string& name);
// A binary combination of two f32 values (or vectors), and the values of a reduced sequence at
// columns [col, col + lanes), f32.
using Combine = std::function<ir::ExprRef(ir::ExprRef, ir::ExprRef)>;
using ValueFn = std::function<ir::ExprRef(ir::ExprRef col, int lanes)>;
// PyTorch's reduce_all / map_reduce_all / map2_reduce_all over n 16-bit values (two float vectors
// of V per 2V elements, accumulators A and B; gen/ops/softmax.cpp states the order). The softmax op's
// bf16 max and sum, and the bf16 attention backward's dsum, whose value is a product.
ir::ExprRef reduce_all_pairs(ir::Builder& b, const Length& n, int V, ir::LaneFold f, const ValueFn& value, const Combine& op,
                             const std::string& name);

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
  // PyTorch's mixed-type layer_norm (16-bit x, f32 weight) returns f32 statistics; otherwise
  // they have x's type.
  const bool mixed = size_bytes(r.x_dtype) == 2 && wt == ScalarType::f32;
  const ScalarType stats = mixed ? ScalarType::f32 : r.x_dtype;
  out.mean = b.buffer("mean", stats, true, ir::Extent::rows);
  out.rstd = b.buffer("rstd", stats, true, ir::Extent::rows);
  return out;
}

// The vector width of an elementwise pass (Order::elementwise_lanes, which has no numerical
// effect: every element gets the same operations). A thread of a team (`tid` set: a CUDA warp
// or block) takes 16 bytes of `storage` per access, one 128-bit load, and no more than the
// order's width: wider vectors only add lanes for NVRTC to compile.
inline int elementwise_lanes(const ir::Order& o, const ir::ExprRef& tid, ScalarType storage) {
  if (!tid) return o.elementwise_lanes;
  return std::max(1, std::min(o.elementwise_lanes, 16 / size_bytes(storage)));
}

// Runs `body` on one thread: thread 0 of a team statement (`tid` its thread_id), or the only
// thread when tid is null.
template <class F>
void on_one_thread(ir::Builder& b, const ir::ExprRef& tid, F&& body) {
  if (tid) b.if_(ir::binary(ir::Op::Eq, tid, ir::index_const(0)), body);
  else body();
}

// Runs `body(tid)` as one team statement when `team`, else as plain statements with a null tid.
template <class F>
void in_team_if(ir::Builder& b, bool team, F&& body) {
  if (team) b.team([&](ir::ExprRef tid) { body(tid); });
  else body(ir::ExprRef());
}

// Stores a per-row statistic (f32 value) into element `row_index` of `buffer`: this instance's
// row, or a row of an instance's block of rows.
inline void store_stat(ir::Builder& b, int buffer, ir::ExprRef v, ir::ExprRef row_index = ir::program_id(0)) {
  ScalarType st = b.kernel().buffers[size_t(buffer)].elem;
  b.store(buffer, std::move(row_index), v->type.scalar == st ? v : ir::cast(v, st));
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

}  // namespace ordo::gen
