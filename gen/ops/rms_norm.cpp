// rms_norm forward over the last dim: rstd = 1/sqrt(mean(x*x) + eps); y = (x*rstd)*weight.
#include <fmt/format.h>

#include <algorithm>

#include "gen/gen.hpp"
#include "gen/ops/rms_norm.hpp"
#include "gen/blocks/row.hpp"
#include "gen/blocks/warp.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {
constexpr int64_t kGrain = 32768;  // at::internal::GRAIN_SIZE
}  // namespace

// PyTorch's sum of one row as its parallel_reduce runs it on `threads` = T threads (measured,
// docs/research/torch2.15-rms-norm.md): only when the launch is that single row and N > 32768,
// the row is cut into nt = min(T, ceil(N / 32768)) chunks of c = ceil(N / nt), each summed by the
// order on its own (indices from the chunk's start) into slot t, the other T - nt slots +0; the
// T slots are then summed by the same order as a row of T terms. Any other launch sums each row
// whole, as with one thread.
// torch_threaded_sum for a length n given at launch: the same chunks, their bounds computed from n.
ExprRef torch_threaded_sum_at_launch(Builder& b, const SumOrder& order, int threads, const Arith& ar, const ExprRef& n, const TermFn& term,
                                     const std::string& label) {
  const int total = b.local(label, Type{ar.t, 1});
  const int64_t T = threads;
  if (T == 1) {
    b.assign(total, emit_sum(b, order, ar, Length::launch(n), term, label));
    return b.get(total);
  }
  const int slots = b.buffer("thread_slots", ar.t, true, Extent::scratch, T);
  // Split only a single-row launch of more than a grain (both uniform; not bound: a bool local counts as varying).
  ExprRef split = binary(Op::And, binary(Op::Lt, index_const(kGrain), n), binary(Op::Eq, grid_extent(0), index_const(1)));
  b.if_else(split, [&] {
    ExprRef nt = b.let("threads.used", binary(Op::Min, index_const(T), div(add(n, index_const(kGrain - 1)), index_const(kGrain))));
    ExprRef c = b.let("chunk", div(sub(add(n, nt), index_const(1)), nt));
    for (int64_t t = 0; t < T; ++t) {
      ExprRef first = b.let("chunk.first", mul(index_const(t), c));
      ExprRef len = b.let("chunk.len", select(binary(Op::Lt, index_const(t), nt), sub(binary(Op::Min, n, add(first, c)), first), index_const(0)));
      int slot = b.local("slot", Type{ar.t, 1});
      b.if_else(binary(Op::Lt, index_const(0), len), [&] {
        b.assign(slot, emit_sum(b, order, ar, Length::launch(len), [&](ExprRef i, int lanes) { return term(add(i, first), lanes); },
                                fmt::format("{} of thread {}'s chunk", label, t)));
      }, [&] { b.assign(slot, ar.constant(0.0)); });
      b.store(slots, index_const(t), b.get(slot));
    }
    b.assign(total, emit_sum(b, order, ar, T, [&](ExprRef i, int lanes) { return Term{load(b.kernel(), slots, i, lanes), nullptr}; },
                             "sum of the thread slots"));
  }, [&] { b.assign(total, emit_sum(b, order, ar, Length::launch(n), term, label)); });
  return b.get(total);
}

ExprRef torch_threaded_sum(Builder& b, const SumOrder& order, int threads, const Arith& ar, const Length& length, const TermFn& term,
                           const std::string& label) {
  if (!length.is_fixed()) return torch_threaded_sum_at_launch(b, order, threads, ar, length.at_launch, term, label);
  const int64_t n = length.fixed;
  const int total = b.local(label, Type{ar.t, 1});
  const int64_t T = threads;
  const int64_t nt = std::min<int64_t>(T, (n + kGrain - 1) / kGrain), c = (n + nt - 1) / nt;
  auto whole = [&] { b.assign(total, emit_sum(b, order, ar, n, term, label)); };
  if (n <= kGrain || T == 1) {
    whole();
    return b.get(total);
  }
  const int slots = b.buffer("thread_slots", ar.t, true, Extent::scratch, T);
  b.if_else(
      binary(Op::Eq, grid_extent(0), index_const(1)),
      [&] {
        for (int64_t t = 0; t < T; ++t) {
          const int64_t first = t * c, len = t < nt ? std::min(n, first + c) - first : 0;
          ExprRef slot = len > 0 ? emit_sum(b, order, ar, len,
                                            [&](ExprRef i, int lanes) { return term(add(i, index_const(first)), lanes); },
                                            fmt::format("{} of thread {}'s chunk", label, t))
                                 : ar.constant(0.0);
          b.store(slots, index_const(t), slot);
        }
        b.assign(total, emit_sum(b, order, ar, T,
                                 [&](ExprRef i, int lanes) { return Term{load(b.kernel(), slots, i, lanes), nullptr}; },
                                 "sum of the thread slots"));
      },
      whole);
  return b.get(total);
}

ExprRef rms_norm_square_sum(Builder& b, const Request& r, const Order& o, const Row& row, int x) {
  const ScalarType acc = o.moments.acc;
  const TermFn square = [&](ExprRef col, int lanes) {
    ExprRef v = row.load_as(x, col, lanes, acc);
    return Term{v, v};
  };
  const Arith stats = stats_arith(o, acc, r.x_dtype);
  // PyTorch eager's thread split (torch_threaded_sum); a ChunkStack sum carries Inductor's own (its parts).
  if (o.threads > 1 && o.row_sum.kind != SumOrder::Kind::ChunkStack)
    return torch_threaded_sum(b, o.row_sum, o.threads, stats, row.length, square, "sum(x*x)");
  return emit_sum(b, o.row_sum, stats, row.length, square, "sum(x*x)");
}

ExprRef rms_norm_rstd(Builder& b, const Request& r, const Order& o, ExprRef squares, const Length& n) {
  const Arith stats = stats_arith(o, o.moments.acc, r.x_dtype);
  const Arith ar = stats_arith(o, ScalarType::f32, r.x_dtype);
  ExprRef ms = b.let("mean_sq", ar.r(to_f32(stats.div(std::move(squares), stats.count(n.expr())))));
  return b.let("rstd", ar.div(ar.constant(1.0), ar.sqrt(ar.add(ms, ar.constant(r.eps)))));
}

Kernel build_rms_norm(const Request& r, const Order& o) {
  Kernel k;
  k.name = "rms_norm";
  const bool warp = warp_layout(r, o);  // the CUDA targets: one warp per row (gen/blocks/warp.hpp)
  if (warp) k.team = kWarpThreads;
  Builder b(k);
  const Length n = row_length(b, r);
  const int x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  const int w = r.has_weight ? b.buffer("weight", r.weight_type(), false, Extent::cols) : -1;
  // y has x's type, or with `round_before_weight` the type torch promotes x's and the weight's
  // to (Llama's weight * h.to(x.dtype)): the wider of the two, f32 when they differ.
  const bool promote = o.affine.round_before_weight && w >= 0 && r.weight_type() != r.x_dtype;
  const int y = b.buffer("y", promote ? ScalarType::f32 : r.x_dtype, true, Extent::rows_by_cols);
  const int rstd_out = b.buffer("rstd", r.x_dtype, true, Extent::rows);

  Row row(b, n);
  const ScalarType acc = o.moments.acc;
  const Arith stats = stats_arith(o, acc, r.x_dtype);
  const TermFn square = [&](ExprRef col, int lanes) {
    ExprRef v = row.load_as(x, col, lanes, acc);
    return Term{v, v};
  };
  const int squares_at = warp ? emit_warp_sum(b, o.row_sum, stats, r.cols, square, nullptr, "sum(x*x)") : -1;
  ExprRef squares_once = warp ? nullptr : rms_norm_square_sum(b, r, o, row, x);
  // The rest on every thread of the warp, or on the one thread.
  in_team_if(b, warp, [&](ExprRef tid) {
    ExprRef rstd = rms_norm_rstd(b, r, o, warp ? load(k, squares_at, index_const(0)) : squares_once, n);
    on_one_thread(b, tid, [&] { store_stat(b, rstd_out, rstd); });

    const Arith f32{ScalarType::f32, std::nullopt};
    row.for_each(elementwise_lanes(o, tid, r.x_dtype), tid, k.team, [&](ExprRef col, int lanes) {
      ExprRef t = f32.mul(row.load_as(x, col, lanes, ScalarType::f32), lanes > 1 ? broadcast(rstd, lanes) : rstd);
      if (o.affine.round_before_weight && r.x_dtype != ScalarType::f32) t = cast(cast(t, r.x_dtype), ScalarType::f32);
      if (w >= 0) {
        ExprRef weight = row.load_as(w, col, lanes, ScalarType::f32);
        if (o.affine.one_plus_weight) weight = f32.add(f32.constant(1.0, lanes), weight);
        t = f32.mul(t, weight);
      }
      row.store_as(y, col, t);
    });
  });
  return k;
}

}  // namespace ordo::gen
