#include "gen/blocks/warp.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

ExprRef lt(ExprRef a, ExprRef b) { return binary(Op::Lt, std::move(a), std::move(b)); }
ExprRef eq(ExprRef a, ExprRef b) { return binary(Op::Eq, std::move(a), std::move(b)); }

}  // namespace

bool warp_sum_fits(const SumOrder& o, int64_t n) {
  if (o.kind != SumOrder::Kind::LaneTree || o.lanes < 1 || o.accumulators < 1) return false;
  if (o.outer_chunk > 0 && n > o.outer_chunk) return false;
  if (int64_t(o.lanes) * o.accumulators > kWarpThreads) return false;
  return o.fold == LaneFold::Halving && (o.lanes & (o.lanes - 1)) == 0;
}

bool cuda_target(const Request& r) { return r.target == Target::cuda || r.target == Target::cuda_emu; }

int registers_per_vector(const Request& r, int lanes) {
  if (cuda_target(r)) return 1;
  __builtin_cpu_init();
  const int width = __builtin_cpu_supports("avx512f") ? 16 : 8;
  return std::max(1, (lanes + width - 1) / width);
}

bool warp_layout(const Request& r, const Order& o) {
  // A warp's share of a row is laid out for one N: with N at launch a row runs on one thread.
  if (!cuda_target(r) || r.cols_at_launch) return false;
  const MomentsOrder& m = o.moments;
  switch (r.op) {
    // A row PyTorch would split over threads (Order::threads, gen/ops/rms_norm.cpp) is summed in chunks
    // on one thread.
    case OpKind::rms_norm:
    case OpKind::sum:
    case OpKind::mean: return warp_sum_fits(o.row_sum, r.cols) && (o.threads == 1 || r.cols <= 32768);
    case OpKind::layer_norm:
    case OpKind::var_mean:
      if (m.kind == MomentsOrder::Kind::TwoPass) return warp_sum_fits(m.sum, r.cols) && warp_sum_fits(m.dev_sum.value_or(m.sum), r.cols);
      if (m.kind == MomentsOrder::Kind::OnePass) return warp_sum_fits(m.sum, r.cols);
      return m.kind == MomentsOrder::Kind::LaneWelford && m.lanes <= kWarpThreads;
    default: return false;
  }
}

// The statements, in emit_lane_tree's order of operations (gen/blocks/reductions.cpp):
//  1. thread t < A*V: part = term t, then += terms t + A*V, t + 2*A*V, ... below nvec*V;
//  2. lane l (threads 0..V-1): ((part_l + part_{V+l}) + part_{2V+l}) + ..., read by shuffles
//     as the statement began; then the tail term nvec*V + l into lane l (unless tail_after_fold);
//  3. the halving lane fold, one shuffle step per statement, the result on thread 0;
//  4. thread 0: the tail after the fold (tail_after_fold), then publish.
// Threads past the ones named compute values nobody reads.
int emit_warp_sum(Builder& b, const SumOrder& o, const Arith& ar, int64_t n, const TermFn& term,
                  const std::function<void()>& prologue, const std::string& label) {
  if (!warp_sum_fits(o, n)) throw Error(fmt::format("internal: {} has no warp layout for {} terms", describe(o), n));
  const Kernel& k = b.kernel();
  const int V = o.lanes;
  const int64_t nvec = n / V, tail = n % V;
  const int A = static_cast<int>(std::min<int64_t>(o.accumulators, nvec));
  const Type t1{ar.t, 1};
  const int out = b.buffer(fmt::format("warp_sum{}", k.buffers.size()), ar.t, true, Extent::scratch, 1);
  const int part = b.local("part", t1), lane = b.local("lane", t1);
  auto publish = [&](ExprRef tid, const std::function<void()>& before) {
    b.if_(eq(std::move(tid), index_const(0)), [&] {
      before();
      b.store(out, index_const(0), b.get(lane));
    });
  };
  b.region(label, describe(o) + ", one warp", [&] {
    if (nvec == 0) {  // fewer terms than lanes: sequential from the first term, on thread 0
      b.team([&](ExprRef tid) {
        if (prologue) prologue();
        b.assign(lane, ar.constant(0.0));
        publish(tid, [&] {
          b.assign(lane, first_value(ar, term(index_const(0), 1)));
          if (n > 1)
            b.for_range("i", index_const(1), index_const(n), 1,
                        [&](ExprRef i) { b.assign(lane, accumulate(ar, b.get(lane), term(i, 1), o.fma)); });
        });
      });
      return;
    }
    const int64_t stride = int64_t(A) * V;
    b.team([&](ExprRef tid) {
      if (prologue) prologue();
      b.assign(part, ar.constant(0.0));  // threads past A*V: never read
      b.if_(lt(tid, index_const(stride)), [&] {
        b.assign(part, first_value(ar, term(tid, 1)));
        if (nvec > A)  // else no thread has a second vector
          b.for_range("col", add(tid, index_const(stride)), index_const(nvec * V), stride,
                      [&](ExprRef col) { b.assign(part, accumulate(ar, b.get(part), term(col, 1), o.fma)); });
      });
    });
    b.team([&](ExprRef tid) {
      std::vector<ExprRef> others;
      for (int j = 1; j < A; ++j) others.push_back(b.let(fmt::format("acc{}", j), shuffle_down(k, part, j * V)));
      ExprRef v = b.get(part);
      for (const ExprRef& other : others) v = ar.add(v, other);
      b.assign(lane, v);
      if (!o.tail_after_fold && tail > 0)
        b.if_(lt(tid, index_const(tail)), [&] {
          b.assign(lane, accumulate(ar, b.get(lane), term(add(index_const(nvec * V), tid), 1), o.fma));
        });
    });
    // The halving fold: lane i < half takes v[i] + v[i + half], one shuffle step per statement.
    for (int half = V / 2; half >= 1; half /= 2)
      b.team([&](ExprRef) {
        ExprRef other = b.let("other", shuffle_down(k, lane, half));
        b.assign(lane, ar.add(b.get(lane), other));
      });
    b.team([&](ExprRef tid) {
      publish(tid, [&] {
        if (!o.tail_after_fold) return;
        const int64_t unfused = o.tail_unfused_group > 0 ? tail - tail % o.tail_unfused_group : 0;
        for (int64_t t = 0; t < tail; ++t)
          b.assign(lane, accumulate(ar, b.get(lane), term(index_const(nvec * V + t), 1), o.fma && t >= unfused));
      });
    });
  });
  return out;
}

Moments emit_warp_moments(Builder& b, const MomentsOrder& o, const Arith& ar, int64_t n, const LoadFn& x) {
  if (o.kind == MomentsOrder::Kind::LaneWelford) return emit_lane_welford_warp(b, o, ar, n, x);
  const Kernel& k = b.kernel();
  const int mean = b.local("mean", Type{ar.t, 1});
  Moments m;
  b.region("moments", describe(o) + ", one warp", [&] {
    auto x_term = [&](ExprRef i, int lanes) { return Term{x(std::move(i), lanes), nullptr}; };
    const int total = emit_warp_sum(b, o.sum, ar, n, x_term, nullptr, "sum(x)");
    if (o.kind == MomentsOrder::Kind::OnePass) {
      const int squares = emit_warp_sum(b, o.sum, ar, n, [&](ExprRef i, int lanes) {
        ExprRef v = x(std::move(i), lanes);
        return Term{v, v};
      }, nullptr, "sum(x*x)");
      const int var = b.local("var", Type{ar.t, 1});
      b.team([&](ExprRef) {
        b.assign(mean, ar.div(load(k, total, index_const(0)), ar.count(index_const(n))));
        ExprRef ex2 = ar.div(load(k, squares, index_const(0)), ar.count(index_const(n)));
        b.assign(var, binary(Op::Max, ar.sub(ex2, ar.mul(b.get(mean), b.get(mean))), ar.constant(0.0)));
      });
      m = {b.get(mean), b.get(var)};
      return;
    }
    if (o.kind != MomentsOrder::Kind::TwoPass) throw Error(fmt::format("internal: {} has no warp layout", describe(o)));
    const Arith dev{o.dev_acc.value_or(ar.t), ar.round_to};
    const int dev_mean = dev.t == ar.t ? mean : b.local("mean.dev", Type{dev.t, 1});
    const int m2 = emit_warp_sum(b, o.dev_sum.value_or(o.sum), dev, n, [&](ExprRef i, int lanes) {
      ExprRef v = x(std::move(i), lanes);
      if (v->type.scalar != dev.t) v = cast(v, dev.t);  // exact: x came from storage no wider than f32
      ExprRef d = dev.sub(v, b.get(dev_mean));
      return Term{d, d};
    }, [&] {
      b.assign(mean, ar.div(load(k, total, index_const(0)), ar.count(index_const(n))));
      if (dev_mean != mean) b.assign(dev_mean, cast(b.get(mean), dev.t));
    }, "sum((x-mean)^2)");
    const int var = b.local("var", Type{dev.t, 1});
    b.team([&](ExprRef) { b.assign(var, dev.div(load(k, m2, index_const(0)), dev.count(index_const(n)))); });
    m = {b.get(mean), b.get(var)};
  });
  return m;
}

}  // namespace ordo::gen
