// The CUDA-native orders: kernels whose program instance (a row) is a team of threads, as the
// GPU kernels they reproduce run a row with a thread block or a warp. The IR states every
// thread's work, every shuffle and every exchange through team memory, so the interpreter, the
// CPU backend and cuda-emu compute exactly what the GPU does (ir/ir.hpp, "Teams").
#include <fmt/format.h>

#include <limits>

#include "gen/gen.hpp"
#include "gen/blocks/math.hpp"
#include "gen/blocks/row.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr ScalarType f32 = ScalarType::f32;
constexpr int kWarp = 32;

ExprRef c32(double v) { return constant(Type{f32, 1}, v); }
ExprRef as_f32(ExprRef v) { return v->type.scalar == f32 ? v : cast(std::move(v), f32); }
ExprRef lt(ExprRef a, ExprRef b) { return binary(Op::Lt, std::move(a), std::move(b)); }
ExprRef eq(ExprRef a, ExprRef b) { return binary(Op::Eq, std::move(a), std::move(b)); }
ExprRef both(ExprRef a, ExprRef b) { return binary(Op::And, std::move(a), std::move(b)); }

// One Welford stream of a thread: count, mean and M2, all f32 per-thread locals.
struct Welford {
  int n, mean, m2;
};

// PyTorch's cuWelfordCombine(B = own, A = other) as compiled (MomentsOrder::BlockWelford),
// assigned to `own`. The count > 0 test is a select: both arms are computed, and the taken one
// has the same bits as the branch.
void combine(Builder& b, const Welford& own, ExprRef a_mean, ExprRef a_m2, ExprRef a_n) {
  ExprRef b_mean = b.get(own.mean), b_m2 = b.get(own.m2), b_n = b.get(own.n);
  ExprRef delta = b.let("merge.delta", sub(b_mean, a_mean));
  ExprRef count = b.let("merge.n", add(a_n, b_n));
  ExprRef coef = b.let("merge.coef", div(c32(1.0), count));
  ExprRef share_a = b.let("merge.nA", mul(a_n, coef));
  ExprRef share_b = b.let("merge.nB", mul(b_n, coef));
  ExprRef mean = fma(a_mean, share_a, mul(b_mean, share_b));
  ExprRef m2 = fma(mul(mul(delta, delta), a_n), share_b, add(a_m2, b_m2));
  ExprRef nonempty = lt(c32(0.0), count);
  b.assign(own.mean, select(nonempty, mean, c32(0.0)));
  b.assign(own.m2, select(nonempty, m2, c32(0.0)));
  b.assign(own.n, count);
}

// PyTorch's WelfordOps::combine(A = own, B = other) as compiled (MomentsOrder::BlockReduceWelford),
// assigned to `own`. Its two empty-stream returns are selects over the merged value.
void combine_block_reduce(Builder& b, const Welford& own, ExprRef b_mean, ExprRef b_m2, ExprRef b_n) {
  ExprRef a_mean = b.let("own.mean", b.get(own.mean)), a_m2 = b.let("own.m2", b.get(own.m2));
  ExprRef a_n = b.let("own.n", b.get(own.n));
  ExprRef delta = b.let("merge.delta", sub(b_mean, a_mean));
  ExprRef count = b.let("merge.n", add(a_n, b_n));
  ExprRef share_b = b.let("merge.c", div(b_n, count));
  ExprRef mean = fma(delta, share_b, a_mean);
  ExprRef m2 = fma(mul(mul(delta, delta), a_n), share_b, add(a_m2, b_m2));
  ExprRef a_empty = b.let("own.empty", eq(a_n, c32(0.0))), b_empty = b.let("other.empty", eq(b_n, c32(0.0)));
  b.assign(own.mean, select(a_empty, b_mean, select(b_empty, a_mean, mean)));
  b.assign(own.m2, select(a_empty, b_m2, select(b_empty, a_m2, m2)));
  b.assign(own.n, select(a_empty, b_n, select(b_empty, a_n, count)));
}

// A shuffle-down tree over every warp (offsets 16, 8, 4, 2, 1): each step reads the other
// thread's state as the step began and merges it into `own` with `merge(own, other)`.
using Merge = void (*)(Builder&, const Welford& own, ExprRef other_mean, ExprRef other_m2, ExprRef other_n);
void shuffle_down_tree(Builder& b, const Welford& own, Merge merge) {
  for (int offset = kWarp / 2; offset >= 1; offset /= 2)
    b.team([&](ExprRef) {
      ExprRef mean = b.let("other.mean", shuffle_down(b.kernel(), own.mean, offset));
      ExprRef m2 = b.let("other.m2", shuffle_down(b.kernel(), own.m2, offset));
      ExprRef n = b.let("other.n", shuffle_down(b.kernel(), own.n, offset));
      merge(b, own, mean, m2, n);
    });
}

// rstd from the row's variance: CUDA's rsqrtf (device-only) or 1/sqrt.
ExprRef rstd_of(Builder& b, const Request& r, const Order& o, ExprRef var) {
  ExprRef var_eps = b.let("var_eps", add(var, c32(static_cast<float>(r.eps))));
  return b.let("rstd", o.affine.device_rsqrt ? call(MathFn::device_rsqrtf, var_eps) : div(c32(1.0), unary(Op::Sqrt, var_eps)));
}

// PyTorch's two-kernel CUDA layer_norm as one team kernel (MomentsOrder::BlockReduceWelford): the
// statistics kernel's block, then the same row's elementwise kernel. That kernel's own block size
// (256) only decides which thread writes an element, never its value, so the team writes it.
Kernel build_layer_norm_block_reduce(const Request& r, const Order& o) {
  const MomentsOrder& mo = o.moments;
  const int T = mo.team, warps = T / kWarp;
  const int64_t N = r.cols;
  if (T % kWarp || warps > kWarp || o.affine.form != AffineOrder::Form::CenterScale)
    throw Error(fmt::format("internal: block_reduce_welford team {}", T));
  Kernel k;
  k.name = "layer_norm";
  k.team = T;
  Builder b(k);
  const auto [x, w, bias, y, mean_out, rstd_out] = layer_norm_buffers(b, r);
  // Team memory: (mean, M2, n) of each warp, then the row's mean and variance.
  const int64_t stats_at = 3 * warps;
  const int shared = b.buffer("block_stats", f32, true, Extent::scratch, stats_at + 2);
  ExprRef row = b.let("row", mul(program_id(0), index_const(N)));
  const Type f1{f32, 1};
  const Welford own{b.local("welford.n", f1), b.local("welford.mean", f1), b.local("welford.m2", f1)};
  auto for_thread_columns = [&](ExprRef tid, auto&& body) { b.for_range("col", tid, index_const(N), T, body); };

  b.region("moments", describe(mo), [&] {
    b.team([&](ExprRef tid) {
      b.assign(own.n, c32(0.0));
      b.assign(own.mean, c32(0.0));
      b.assign(own.m2, c32(0.0));
      for_thread_columns(tid, [&](ExprRef col) {
        ExprRef xv = b.let("x", as_f32(load(k, x, add(row, col))));
        ExprRef d = b.let("welford.d", sub(xv, b.get(own.mean)));
        b.assign(own.n, add(b.get(own.n), c32(1.0)));
        b.assign(own.mean, add(b.get(own.mean), div(d, b.get(own.n))));
        b.assign(own.m2, fma(d, sub(xv, b.get(own.mean)), b.get(own.m2)));
      });
    });
    shuffle_down_tree(b, own, combine_block_reduce);
    b.team([&](ExprRef tid) {
      b.if_(eq(binary(Op::Rem, tid, index_const(kWarp)), index_const(0)), [&] {
        ExprRef slot = mul(div(tid, index_const(kWarp)), index_const(3));
        b.store(shared, slot, b.get(own.mean));
        b.store(shared, add(slot, index_const(1)), b.get(own.m2));
        b.store(shared, add(slot, index_const(2)), b.get(own.n));
      });
    });
    // Warp 0's lane l takes warp l's stream; the other threads, warp 0's lanes past the warps
    // included, hold an empty one. Every warp runs the second tree; warp 0's lane 0 ends with the row.
    b.team([&](ExprRef tid) {
      b.if_else(
          lt(tid, index_const(warps)),
          [&] {
            ExprRef slot = mul(tid, index_const(3));
            b.assign(own.mean, load(k, shared, slot));
            b.assign(own.m2, load(k, shared, add(slot, index_const(1))));
            b.assign(own.n, load(k, shared, add(slot, index_const(2))));
          },
          [&] {
            b.assign(own.mean, c32(0.0));
            b.assign(own.m2, c32(0.0));
            b.assign(own.n, c32(0.0));
          });
    });
    shuffle_down_tree(b, own, combine_block_reduce);
    b.team([&](ExprRef tid) {
      b.if_(eq(tid, index_const(0)), [&] {
        b.store(shared, index_const(stats_at), b.get(own.mean));
        b.store(shared, index_const(stats_at + 1), div(b.get(own.m2), b.get(own.n)));
      });
    });
  });

  // Every thread reads the statistics and writes its own columns: y = ((x - mean)*rstd)*gamma + beta.
  b.team([&](ExprRef tid) {
    ExprRef mean = b.let("mean", load(k, shared, index_const(stats_at)));
    ExprRef rstd = rstd_of(b, r, o, b.let("var", load(k, shared, index_const(stats_at + 1))));
    b.if_(eq(tid, index_const(0)), [&] {
      store_stat(b, mean_out, mean);
      store_stat(b, rstd_out, rstd);
    });
    for_thread_columns(tid, [&](ExprRef col) {
      ExprRef t = mul(sub(as_f32(load(k, x, add(row, col))), mean), rstd);
      ExprRef gamma = w >= 0 ? as_f32(load(k, w, col)) : o.affine.missing_as_identity ? c32(1.0) : nullptr;
      ExprRef beta = bias >= 0 ? as_f32(load(k, bias, col)) : o.affine.missing_as_identity ? c32(0.0) : nullptr;
      ExprRef out = t;
      if (gamma && beta) out = o.affine.fma ? fma(t, gamma, beta) : add(mul(t, gamma), beta);
      else if (gamma) out = mul(t, gamma);
      else if (beta) out = add(t, beta);
      b.store(y, add(row, col), r.x_dtype == f32 ? out : cast(out, r.x_dtype));
    });
  });
  return k;
}

}  // namespace

Kernel build_layer_norm_team(const Request& r, const Order& o) {
  if (o.moments.kind == MomentsOrder::Kind::BlockReduceWelford) return build_layer_norm_block_reduce(r, o);
  const MomentsOrder& mo = o.moments;
  const int T = mo.team, V = mo.lanes, warps = T / kWarp;
  const int64_t N = r.cols;
  if (T % kWarp || T < kWarp || (warps & (warps - 1)) || N % V)
    throw Error(fmt::format("internal: block_welford team {} vector {} N {}", T, V, N));
  Kernel k;
  k.name = "layer_norm";
  k.team = T;
  Builder b(k);
  const auto [x, w, bias, y, mean_out, rstd_out] = layer_norm_buffers(b, r);
  // Team memory: (mean, M2, n) of each upper-half warp of a cross-warp step, then the row's mean
  // and variance for every thread.
  const int64_t stats_at = 3 * std::max(1, warps / 2);
  const int shared = b.buffer("block_stats", f32, true, Extent::scratch, stats_at + 2);

  ExprRef row = b.let("row", mul(program_id(0), index_const(N)));
  const Type f1{f32, 1};
  const Welford own{b.local("welford.n", f1), b.local("welford.mean", f1), b.local("welford.m2", f1)};
  // Thread t's vectors: columns t*V, (t + T)*V, ...
  auto for_thread_vectors = [&](ExprRef tid, auto&& body) {
    b.for_range("col", mul(tid, index_const(V)), index_const(N), int64_t(T) * V, body);
  };

  b.region("moments", describe(mo), [&] {
    b.team([&](ExprRef tid) {
      b.assign(own.n, c32(0.0));
      b.assign(own.mean, c32(0.0));
      b.assign(own.m2, c32(0.0));
      for_thread_vectors(tid, [&](ExprRef col) {
        ExprRef xv = b.let("x.vec", as_f32(load(k, x, add(row, col), V)));
        for (int l = 0; l < V; ++l) {
          ExprRef xl = V == 1 ? xv : b.let("x", extract(xv, l));
          ExprRef d = b.let("welford.d", sub(xl, b.get(own.mean)));
          b.assign(own.n, add(b.get(own.n), c32(1.0)));
          b.assign(own.mean, fma(d, div(c32(1.0), b.get(own.n)), b.get(own.mean)));
          b.assign(own.m2, fma(d, sub(xl, b.get(own.mean)), b.get(own.m2)));
        }
      });
    });
    shuffle_down_tree(b, own, combine);
    // The cross-warp tree: lane 0 of each upper-half warp publishes, lane 0 of its partner merges.
    for (int offset = warps / 2; offset >= 1; offset /= 2) {
      b.team([&](ExprRef tid) {
        ExprRef warp = div(tid, index_const(kWarp));
        ExprRef lane0 = eq(binary(Op::Rem, tid, index_const(kWarp)), index_const(0));
        ExprRef upper = both(lt(index_const(offset - 1), warp), lt(warp, index_const(2 * offset)));
        b.if_(both(lane0, upper), [&] {
          ExprRef slot = mul(sub(warp, index_const(offset)), index_const(3));
          b.store(shared, slot, b.get(own.mean));
          b.store(shared, add(slot, index_const(1)), b.get(own.m2));
          b.store(shared, add(slot, index_const(2)), b.get(own.n));
        });
      });
      b.team([&](ExprRef tid) {
        ExprRef warp = div(tid, index_const(kWarp));
        ExprRef lane0 = eq(binary(Op::Rem, tid, index_const(kWarp)), index_const(0));
        b.if_(both(lane0, lt(warp, index_const(offset))), [&] {
          ExprRef slot = mul(warp, index_const(3));
          ExprRef a_mean = b.let("other.mean", load(k, shared, slot));
          ExprRef a_m2 = b.let("other.m2", load(k, shared, add(slot, index_const(1))));
          ExprRef a_n = b.let("other.n", load(k, shared, add(slot, index_const(2))));
          combine(b, own, a_mean, a_m2, a_n);
        });
      });
    }
    b.team([&](ExprRef tid) {
      b.if_(eq(tid, index_const(0)), [&] {
        b.store(shared, index_const(stats_at), b.get(own.mean));
        b.store(shared, index_const(stats_at + 1), div(b.get(own.m2), c32(static_cast<double>(static_cast<float>(N)))));
      });
    });
  });

  // Every thread reads the statistics and writes its own vectors.
  b.team([&](ExprRef tid) {
    ExprRef mean = b.let("mean", load(k, shared, index_const(stats_at)));
    ExprRef var = b.let("var", load(k, shared, index_const(stats_at + 1)));
    ExprRef rstd = rstd_of(b, r, o, var);
    b.if_(eq(tid, index_const(0)), [&] {
      store_stat(b, mean_out, mean);
      store_stat(b, rstd_out, rstd);
    });
    for_thread_vectors(tid, [&](ExprRef col) {
      // The CUDA compiler contracts each `a*b + c` of the source: gamma*(rstd*(x - mean)) + beta
      // becomes fma(gamma, rstd*(x - mean), beta), and (rstd*(x - mean)) + beta without a weight
      // becomes fma(rstd, x - mean, beta).
      ExprRef xv = as_f32(load(k, x, add(row, col), V));
      ExprRef centered = sub(xv, broadcast(mean, V));
      ExprRef t = mul(broadcast(rstd, V), centered);
      ExprRef out = t;
      ExprRef gamma = w >= 0 ? as_f32(load(k, w, col, V)) : nullptr;
      ExprRef beta = bias >= 0 ? as_f32(load(k, bias, col, V)) : nullptr;
      if (gamma && beta) out = o.affine.fma ? fma(gamma, t, beta) : add(mul(gamma, t), beta);
      else if (gamma) out = mul(gamma, t);
      else if (beta) out = o.affine.fma ? fma(broadcast(rstd, V), centered, beta) : add(t, beta);
      const ScalarType st = r.x_dtype;
      b.store(y, add(row, col), st == f32 ? out : cast(out, st));
    });
  });
  return k;
}

Kernel build_softmax_warp(const Request& r, const Order& order) {
  const SoftmaxOrder& o = order.softmax;
  const bool log = r.op == OpKind::log_softmax;
  const int64_t N = r.cols;
  int64_t pow2 = 1;
  while (pow2 < N) pow2 *= 2;
  const int64_t I = std::max<int64_t>(1, pow2 / kWarp);  // columns per thread, padding included
  Kernel k;
  k.name = log ? "log_softmax" : "softmax";
  k.team = kWarp;
  Builder b(k);
  const int x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  const int y = b.buffer("y", r.x_dtype, true, Extent::rows_by_cols);
  // Team memory: the exponentials, each element written and read by the thread that owns it.
  const int exps = log ? -1 : b.buffer("exps", f32, true, Extent::scratch, kWarp * I);
  ExprRef row = b.let("row", mul(program_id(0), index_const(N)));
  const Type f1{f32, 1};
  const int m = b.local("max", f1), s = b.local("sum", f1), e = b.local("e", f1);
  const ExprRef minus_inf = c32(-std::numeric_limits<double>::infinity());
  // Element i of thread tid, -inf past the row's end; the column stays in `col`.
  auto element = [&](ExprRef col) {
    b.if_else(lt(col, index_const(N)), [&] { b.assign(e, as_f32(load(k, x, add(row, col)))); }, [&] { b.assign(e, minus_inf); });
    return b.get(e);
  };
  auto column = [&](ExprRef tid, ExprRef i) { return b.let("col", add(tid, mul(i, index_const(kWarp)))); };
  auto butterfly = [&](int local, const std::function<ExprRef(ExprRef own, ExprRef other)>& op) {
    for (int offset = kWarp / 2; offset >= 1; offset /= 2)
      b.team([&](ExprRef) {
        ExprRef other = b.let("other", shuffle_xor(k, local, offset));
        b.assign(local, op(b.get(local), other));
      });
  };

  b.region(log ? "log_softmax" : "softmax", describe(o), [&] {
    b.team([&](ExprRef tid) {
      b.assign(m, element(column(tid, index_const(0))));
      if (I > 1)
        b.for_range("i", index_const(1), index_const(I), 1, [&](ExprRef i) {
          ExprRef v = element(column(tid, i));
          b.assign(m, select(lt(v, b.get(m)), b.get(m), v));  // m > e ? m : e
        });
    });
    butterfly(m, [](ExprRef own, ExprRef other) { return select(lt(own, other), other, own); });  // Max: a < b ? b : a
    b.team([&](ExprRef tid) {
      b.assign(s, c32(0.0));
      b.for_range("i", index_const(0), index_const(I), 1, [&](ExprRef i) {
        ExprRef col = column(tid, i);
        ExprRef ex = b.let("exp", exp_f32(b, o.exp, sub(element(col), b.get(m))));
        if (!log) b.if_(lt(col, index_const(N)), [&] { b.store(exps, col, ex); });
        b.assign(s, add(b.get(s), ex));
      });
    });
    butterfly(s, [](ExprRef own, ExprRef other) { return add(own, other); });
    b.team([&](ExprRef tid) {
      ExprRef log_sum = log ? b.let("log_sum", log_f32(b, o.log, b.get(s))) : nullptr;
      ExprRef inv = !log && o.multiply_by_reciprocal ? b.let("inv_sum", div(c32(1.0), b.get(s))) : nullptr;
      b.for_range("i", index_const(0), index_const(I), 1, [&](ExprRef i) {
        ExprRef col = column(tid, i);
        b.if_(lt(col, index_const(N)), [&] {
          ExprRef out;
          if (log) {
            out = sub(sub(as_f32(load(k, x, add(row, col))), b.get(m)), log_sum);
          } else {
            ExprRef ex = load(k, exps, col);
            out = inv ? mul(ex, inv) : div(ex, b.get(s));
          }
          b.store(y, add(row, col), r.x_dtype == f32 ? out : cast(out, r.x_dtype));
        });
      });
    });
  });
  return k;
}

}  // namespace ordo::gen
