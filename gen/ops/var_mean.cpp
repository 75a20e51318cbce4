// var_mean over the last dim, population variance (correction 0): var = M2/N.
#include "gen/gen.hpp"
#include "gen/blocks/row.hpp"
#include "gen/blocks/warp.hpp"

namespace ordo::gen {

using namespace ordo::ir;

Kernel build_var_mean(const Request& r, const Order& o) {
  Kernel k;
  k.name = "var_mean";
  const bool warp = warp_layout(r, o);  // the CUDA targets: one warp per row (gen/blocks/warp.hpp)
  if (warp) k.team = kWarpThreads;
  Builder b(k);
  const Length n = row_length(b, r);
  const int x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  const int var_out = b.buffer("var", r.x_dtype, true, Extent::rows);
  const int mean_out = b.buffer("mean", r.x_dtype, true, Extent::rows);
  Row row(b, n);
  const ScalarType acc = o.moments.acc;
  const Arith stats = stats_arith(o, acc, r.x_dtype);
  const LoadFn load_x = [&](ExprRef col, int lanes) { return row.load_as(x, col, lanes, acc); };
  Moments m = warp ? emit_warp_moments(b, o.moments, stats, r.cols, load_x)
                   : emit_moments(b, o.moments, stats, n, load_x, /*passes_as_loop=*/cuda_target(r));
  in_team_if(b, warp, [&](ExprRef tid) {
    on_one_thread(b, tid, [&] {
      store_stat(b, var_out, to_f32(m.var));
      store_stat(b, mean_out, to_f32(m.mean));
    });
  });
  return k;
}

}  // namespace ordo::gen
