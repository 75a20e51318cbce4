// rms_norm forward over the last dim: rstd = 1/sqrt(mean(x*x) + eps); y = (x*rstd)*weight.
#include "gen/gen.hpp"
#include "gen/row.hpp"
#include "gen/warp.hpp"

namespace ordo::gen {

using namespace ordo::ir;

Kernel build_rms_norm(const Request& r, const Order& o) {
  Kernel k;
  k.name = "rms_norm";
  const bool warp = warp_layout(r, o);  // the CUDA targets: one warp per row (gen/warp.hpp)
  if (warp) k.team = kWarpThreads;
  Builder b(k);
  const int x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  const int w = r.has_weight ? b.buffer("weight", r.weight_type(), false, Extent::cols) : -1;
  const int y = b.buffer("y", r.x_dtype, true, Extent::rows_by_cols);
  const int rstd_out = b.buffer("rstd", r.x_dtype, true, Extent::rows);

  Row row(b, r.cols);
  const ScalarType acc = o.moments.acc;
  const Arith stats = stats_arith(o, acc, r.x_dtype);
  const TermFn square = [&](ExprRef col, int lanes) {
    ExprRef v = row.load_as(x, col, lanes, acc);
    return Term{v, v};
  };
  const int squares_at = warp ? emit_warp_sum(b, o.square_sum, stats, r.cols, square, nullptr, "sum(x*x)") : -1;
  ExprRef squares_once = warp ? nullptr : emit_sum(b, o.square_sum, stats, r.cols, square, "sum(x*x)");
  // The rest on every thread of the warp, or on the one thread.
  in_team_if(b, warp, [&](ExprRef tid) {
    ExprRef squares = warp ? load(k, squares_at, index_const(0)) : squares_once;
    const Arith ar = stats_arith(o, ScalarType::f32, r.x_dtype);
    ExprRef ms = b.let("mean_sq", ar.r(to_f32(stats.div(squares, stats.count(index_const(r.cols))))));
    ExprRef rstd = b.let("rstd", ar.div(ar.constant(1.0), ar.sqrt(ar.add(ms, ar.constant(r.eps)))));
    on_one_thread(b, tid, [&] { store_stat(b, rstd_out, rstd); });

    const Arith f32{ScalarType::f32, std::nullopt};
    row.for_each(elementwise_lanes(o, tid, r.x_dtype), tid, k.team, [&](ExprRef col, int lanes) {
      ExprRef t = f32.mul(row.load_as(x, col, lanes, ScalarType::f32), lanes > 1 ? broadcast(rstd, lanes) : rstd);
      if (w >= 0) t = f32.mul(t, row.load_as(w, col, lanes, ScalarType::f32));
      row.store_as(y, col, t);
    });
  });
  return k;
}

}  // namespace ordo::gen
