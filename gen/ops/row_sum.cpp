// sum and mean over the last dim: s = x_0 + ... + x_(N-1) summed as the order's row_sum, in its
// accumulation type (the terms are x converted to it); mean = s / N, one division by N as a value
// of that type. The result is rounded once, to x's type.
//
// PyTorch 2.15's x.sum(-1) and x.mean(-1) for f32 x are SumKernel's cascade over the row, on a
// single row longer than 32768 split between its threads (torch_threaded_sum), and x.mean(-1) is
// that sum divided by N. For 16-bit x, x.mean(-1) sums x.float() the same way and rounds the
// quotient (measured against torch 2.15.0: bf16 and f16, 261 shapes each); x.sum(-1) of 16-bit x
// is not this (PyTorch rounds its per-thread partial sums to the 16-bit output), so the torch2.15
// orders refuse it (gen/resolve.cpp).
#include "gen/gen.hpp"
#include "gen/blocks/row.hpp"
#include "gen/blocks/warp.hpp"
#include "gen/ops/rms_norm.hpp"

namespace ordo::gen {

using namespace ordo::ir;

Kernel build_row_sum(const Request& r, const Order& o) {
  Kernel k;
  const bool mean = r.op == OpKind::mean;
  k.name = mean ? "mean" : "sum";
  const bool warp = warp_layout(r, o);  // the CUDA targets: one warp per row (gen/blocks/warp.hpp)
  if (warp) k.team = kWarpThreads;
  Builder b(k);
  const Length n = row_length(b, r);
  const int x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  const int out = b.buffer(mean ? "mean" : "sum", r.x_dtype, true, Extent::rows);
  Row row(b, n);
  const ScalarType acc = o.moments.acc;
  const Arith stats = stats_arith(o, acc, r.x_dtype);
  const TermFn term = [&](ExprRef col, int lanes) { return Term{row.load_as(x, col, lanes, acc), nullptr}; };
  const int sum_at = warp ? emit_warp_sum(b, o.row_sum, stats, r.cols, term, nullptr, "sum(x)") : -1;
  ExprRef sum_once;
  if (!warp) {
    // PyTorch eager's thread split (torch_threaded_sum); a ChunkStack sum carries Inductor's own (its parts).
    sum_once = o.threads > 1 && o.row_sum.kind != SumOrder::Kind::ChunkStack
                   ? torch_threaded_sum(b, o.row_sum, o.threads, stats, row.length, term, "sum(x)")
                   : emit_sum(b, o.row_sum, stats, row.length, term, "sum(x)");
  }
  in_team_if(b, warp, [&](ExprRef tid) {
    ExprRef s = warp ? load(k, sum_at, index_const(0)) : sum_once;
    if (mean) s = b.let("mean", stats.div(s, stats.count(n.expr())));
    // An f64 sum (acc=f64) reaches a 16-bit output through f32, as var_mean's statistics do.
    on_one_thread(b, tid, [&] { store_stat(b, out, to_f32(s)); });
  });
  return k;
}

}  // namespace ordo::gen
