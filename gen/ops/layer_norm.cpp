// layer_norm forward over the last dim: y, mean, rstd = 1/sqrt(var + eps).
#include <fmt/format.h>

#include "gen/gen.hpp"
#include "gen/blocks/row.hpp"
#include "gen/blocks/warp.hpp"

namespace ordo::gen {

using namespace ordo::ir;

Kernel build_layer_norm(const Request& r, const Order& o) {
  if (o.moments.kind == MomentsOrder::Kind::BlockWelford || o.moments.kind == MomentsOrder::Kind::BlockReduceWelford)
    return build_layer_norm_team(r, o);
  Kernel k;
  k.name = "layer_norm";
  const bool warp = warp_layout(r, o);  // the CUDA targets: one warp per row (gen/blocks/warp.hpp)
  if (warp) k.team = kWarpThreads;
  Builder b(k);
  const Length n = row_length(b, r);
  const auto [x, w, bias, y, mean_out, rstd_out] = layer_norm_buffers(b, r);

  Row row(b, n);
  const ScalarType acc = o.moments.acc;
  const Arith stats = stats_arith(o, acc, r.x_dtype);
  const LoadFn load_x = [&](ExprRef col, int lanes) { return row.load_as(x, col, lanes, acc); };
  Moments m = warp ? emit_warp_moments(b, o.moments, stats, r.cols, load_x)
                   : emit_moments(b, o.moments, stats, n, load_x, /*passes_as_loop=*/cuda_target(r));
  // The rest on every thread of the warp, or on the one thread.
  in_team_if(b, warp, [&](ExprRef tid) {
    const Arith ar = stats_arith(o, ScalarType::f32, r.x_dtype);
    ExprRef mean = b.let("mean", ar.r(to_f32(m.mean)));
    ExprRef var = b.let("var", ar.r(to_f32(m.var)));
    ExprRef var_eps = b.let("var_eps", ar.add(var, ar.constant(r.eps)));
    ExprRef rstd, denom;
    if (o.affine.form == AffineOrder::Form::CenterDivide) {
      denom = b.let("denom", ar.sqrt(var_eps));
      rstd = b.let("rstd", ar.div(ar.constant(1.0), denom));
    } else {
      ExprRef two_roundings = ar.div(ar.constant(1.0), ar.sqrt(var_eps));
      if (const int V = o.affine.rsqrt_vector_rows; V > 0 && ar.round_to) {
        ExprRef one_rounding = ar.div(ar.constant(1.0), unary(Op::Sqrt, var_eps));
        ExprRef vector_rows = mul(div(grid_extent(0), index_const(V)), index_const(V));
        rstd = b.let("rstd", select(binary(Op::Lt, program_id(0), vector_rows), one_rounding, two_roundings));
      } else {
        rstd = b.let("rstd", two_roundings);
      }
    }
    on_one_thread(b, tid, [&] {
      store_stat(b, mean_out, mean);
      store_stat(b, rstd_out, rstd);
    });

    // The output pass is elementwise in f32 and rounded once to the storage type.
    const Arith f32 = o.affine.round_each_op ? Arith{ScalarType::f32, r.x_dtype == ScalarType::f32 ? std::nullopt : std::optional(r.x_dtype)}
                                             : Arith{ScalarType::f32, std::nullopt};
    const bool fuse = o.affine.fma;
    ExprRef shift;
    if (o.affine.form == AffineOrder::Form::ScaleBias) shift = b.let("shift", ar.mul(unary(Op::Neg, rstd), mean));
    row.for_each(elementwise_lanes(o, tid, r.x_dtype), tid, k.team, [&](ExprRef col, int lanes) {
      auto bc = [&](ExprRef s) { return lanes > 1 ? broadcast(s, lanes) : s; };
      ExprRef xv = row.load_as(x, col, lanes, ScalarType::f32);
      ExprRef gamma = w >= 0 ? row.load_as(w, col, lanes, ScalarType::f32) : nullptr;
      ExprRef beta = bias >= 0 ? row.load_as(bias, col, lanes, ScalarType::f32) : nullptr;
      ExprRef out;
      if (o.affine.form == AffineOrder::Form::ScaleBias) {
        // PyTorch CPU keeps gamma = 1 and beta = 0 in the formula when they are absent.
        if (!gamma) gamma = f32.constant(1.0, lanes);
        if (!beta) beta = f32.constant(0.0, lanes);
        ExprRef t = f32.mul_add(xv, bc(rstd), bc(shift), fuse);
        out = f32.mul_add(t, gamma, beta, fuse);
      } else {
        ExprRef centered = f32.sub(xv, bc(mean));
        ExprRef t = o.affine.form == AffineOrder::Form::CenterDivide ? f32.div(centered, bc(denom)) : f32.mul(centered, bc(rstd));
        if (o.affine.missing_as_identity) {
          if (!gamma) gamma = f32.constant(1.0, lanes);
          if (!beta) beta = f32.constant(0.0, lanes);
        }
        if (!beta && o.affine.missing_bias_as_zero) beta = f32.constant(0.0, lanes);
        if (gamma && beta) out = f32.mul_add(t, gamma, beta, fuse);
        else if (gamma) out = f32.mul(t, gamma);
        // GammaCentered without a weight: (rstd*(x - mean)) + beta, one fma when fused.
        else if (beta) out = o.affine.form == AffineOrder::Form::GammaCentered ? f32.mul_add(centered, bc(rstd), beta, fuse) : f32.add(t, beta);
        else out = t;
      }
      row.store_as(y, col, out);
    });
  });
  return k;
}

}  // namespace ordo::gen
