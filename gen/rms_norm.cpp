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
  // y has x's type, or with `round_before_weight` the type torch promotes x's and the weight's
  // to (Llama's weight * h.to(x.dtype)): the wider of the two, f32 when they differ.
  const bool promote = o.affine.round_before_weight && w >= 0 && r.weight_type() != r.x_dtype;
  const int y = b.buffer("y", promote ? ScalarType::f32 : r.x_dtype, true, Extent::rows_by_cols);
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
