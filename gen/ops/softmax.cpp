// softmax and log_softmax over the last dim, one program instance per row.
//   softmax:     y = exp(x - max) / sum(exp(x - max))
//   log_softmax: y = (x - max) - log(sum(exp(x - max)))
// The SoftmaxOrder (ir/order.hpp) decides how the max and the sum are reduced, which exp and
// log run where, and how y is formed. Arithmetic is f32; 16-bit storage is widened on load
// and rounded once at the store.
//
// softmax (not log_softmax) computes each exponential once, as PyTorch's kernel does: the sum
// pass keeps it in a scratch row (`exps`), and the output pass scales the kept value. Same bits
// as computing it again (the same exp of the same x - max); about half the arithmetic.
#include <fmt/format.h>

#include <limits>

#include "gen/blocks/constants.hpp"
#include "gen/gen.hpp"
#include "gen/blocks/math.hpp"
#include "gen/blocks/row.hpp"
#include "gen/blocks/warp.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

ExprRef lt(ExprRef a, ExprRef b) { return binary(Op::Lt, std::move(a), std::move(b)); }
ExprRef eq(ExprRef a, ExprRef b) { return binary(Op::Eq, std::move(a), std::move(b)); }

// PyTorch's vectorized maximum: a > b ? a : b, and NaN when a (or, through the comparison, b)
// is NaN. Unlike IEEE maximum it keeps b for a == b, so max(+0, -0) is -0.
ExprRef eager_max(ExprRef a, ExprRef b) { return select(lt(b, a), a, select(binary(Op::Ne, a, a), a, b)); }
// std::max(m, x) = m < x ? x : m, as PyTorch's scalar loops use it: a NaN x is skipped.
ExprRef scalar_max(ExprRef m, ExprRef x) { return select(lt(m, x), x, m); }

// Each combination becomes a local: `op` may read its operands more than once (eager_max
// does), and binding keeps the IR a sequence of small statements instead of a deep DAG.
ExprRef fold(Builder& b, std::vector<ExprRef> v, LaneFold f, const Combine& op, const std::string& name) {
  if (f == LaneFold::Sequential) {
    ExprRef acc = v[0];
    for (size_t i = 1; i < v.size(); ++i) acc = b.let(name, op(acc, v[i]));
    return acc;
  }
  while (v.size() > 1) {
    const size_t half = v.size() / 2;
    std::vector<ExprRef> next(half);
    for (size_t i = 0; i < half; ++i)
      next[i] = b.let(name, f == LaneFold::Halving ? op(v[i], v[i + half]) : op(v[2 * i], v[2 * i + 1]));
    v = std::move(next);
  }
  return v[0];
}

std::vector<ExprRef> lanes_of(Builder& b, const ExprRef& vec, const std::string& name) {
  if (vec->type.lanes == 1) return {vec};
  std::vector<ExprRef> out;
  for (int l = 0; l < vec->type.lanes; ++l) out.push_back(b.let(fmt::format("{}.{}", name, l), extract(vec, l)));
  return out;
}

// PyTorch's reduce_all / map_reduce_all over a row of n values: the first vector of V values
// initialises V lanes, every further full vector combines into them, the n mod V tail combines
// into lanes 0..r-1, and the lanes fold by `f`. Rows shorter than V combine left to right.
ExprRef reduce_all(Builder& b, const Length& length, int V, LaneFold f, const ValueFn& value, const Combine& op, const std::string& name) {
  int acc = b.local(name, Type{ScalarType::f32, 1});
  if (!length.is_fixed()) {  // the same, its choices made by branches on n
    const ExprRef& n = length.at_launch;
    b.if_else(lt(n, index_const(V)), [&] {
      b.assign(acc, value(index_const(0), 1));
      b.for_range("col", index_const(1), n, 1, [&](ExprRef c) { b.assign(acc, op(b.get(acc), value(c, 1))); });
    }, [&] {
      ExprRef full = b.let("full", sub(n, binary(Op::Rem, n, index_const(V))));
      int lanes = b.local(name + ".lanes", Type{ScalarType::f32, V});
      b.assign(lanes, value(index_const(0), V));
      b.for_range("col", index_const(V), full, V, [&](ExprRef c) { b.assign(lanes, op(b.get(lanes), value(c, V))); });
      std::vector<ExprRef> l = lanes_of(b, b.get(lanes), name + ".lane");
      for (int t = 0; t + 1 < V; ++t) {  // the tail has at most V - 1 terms
        int lane = b.local(name + ".tail", Type{ScalarType::f32, 1});
        b.assign(lane, l[size_t(t)]);
        ExprRef col = add(full, index_const(t));
        b.if_(lt(col, n), [&] { b.assign(lane, op(b.get(lane), value(col, 1))); });
        l[size_t(t)] = b.get(lane);
      }
      b.assign(acc, fold(b, std::move(l), f, op, name + ".fold"));
    });
    return b.get(acc);
  }
  const int64_t n = length.fixed;
  if (n < V) {
    b.assign(acc, value(index_const(0), 1));
    if (n > 1)
      b.for_range("col", index_const(1), index_const(n), 1, [&](ExprRef c) { b.assign(acc, op(b.get(acc), value(c, 1))); });
    return b.get(acc);
  }
  const int64_t full = n - n % V;
  int lanes = b.local(name + ".lanes", Type{ScalarType::f32, V});
  b.assign(lanes, value(index_const(0), V));
  if (full > V)
    b.for_range("col", index_const(V), index_const(full), V, [&](ExprRef c) { b.assign(lanes, op(b.get(lanes), value(c, V))); });
  std::vector<ExprRef> l = lanes_of(b, b.get(lanes), name + ".lane");
  for (int64_t t = 0; t < n % V; ++t) l[size_t(t)] = b.let(name + ".tail", op(l[size_t(t)], value(index_const(full + t), 1)));
  b.assign(acc, fold(b, std::move(l), f, op, name + ".fold"));
  return b.get(acc);
}

// v rounded to a 16-bit storage type and widened back: a value kept in a scalar_t array.
ExprRef round_to_storage(const ExprRef& v, ScalarType storage) { return cast(cast(v, storage), ScalarType::f32); }

struct Softmax {
  const SoftmaxOrder& o;
  Builder& b;
  Row row;
  int x = -1, y = -1;
  bool log = false;
  int exps = -1;  // scratch f32[N]: the sum pass's exponentials for the output pass; -1: recomputed
  // With N at launch: the (uniform) condition under which a row's exponentials fit `exps`, which
  // is then sized for the longest such row; rows past it compute them again. Null: always kept.
  ExprRef keep_if = nullptr;

  ExprRef load(ExprRef col, int lanes) { return row.load_as(x, std::move(col), lanes, ScalarType::f32); }
  ExprRef splat(const ExprRef& s, int lanes) { return lanes > 1 ? broadcast(s, lanes) : s; }

  // The sum pass's exponential at [col, col + lanes), kept for the output pass when it can be.
  ExprRef kept(const ExprRef& col, ExprRef e) {
    if (exps < 0) return e;
    ExprRef v = b.let("e", std::move(e));
    if (keep_if) b.if_(keep_if, [&] { b.store(exps, col, v); });
    else b.store(exps, col, v);
    return v;
  }
  // The output pass's exponential: the kept one, or `impl` computed again.
  ExprRef exp_again(MathImpl impl, const ExprRef& col, int lanes, const ExprRef& mx) {
    if (exps >= 0) return ir::load(b.kernel(), exps, col, lanes);
    return exp_f32(b, impl, sub(load(col, lanes), splat(mx, lanes)));
  }

  // The output pass: y from x, the row max and the sum of exponentials, over vectors of
  // `lanes` then the tail; `exp_at(col)` says which exp produced the sum's term at col. A
  // non-empty `tail_exps` holds the sum pass's exponentials of the last tail_exps.size()
  // columns, which the output pass takes instead of computing them again.
  void write_outputs(const ExprRef& mx, const ExprRef& sum, int lanes, const std::function<MathImpl(bool tail)>& exp_at,
                     const std::vector<ExprRef>& tail_exps = {}) {
    if (log) {
      ExprRef ls = b.let("log_sum", log_f32(b, o.log, sum));
      row.for_each(lanes, [&](ExprRef col, int n) { row.store_as(y, col, sub(sub(load(col, n), splat(mx, n)), splat(ls, n))); });
      return;
    }
    ExprRef inv = o.multiply_by_reciprocal ? b.let("inv_sum", div(f32c(1.0f), sum)) : nullptr;
    auto write = [&](const ExprRef& col, int n, const ExprRef& e) {
      row.store_as(y, col, inv ? mul(e, splat(inv, n)) : div(e, splat(sum, n)));
    };
    if (tail_exps.empty()) {
      row.for_each(lanes, [&](ExprRef col, int n) {
        const MathImpl impl = exp_at(n == 1 && lanes > 1);
        if (exps >= 0 && keep_if)  // the same exponential, kept or computed again
          b.if_else(keep_if, [&] { write(col, n, exp_again(impl, col, n, mx)); },
                    [&] { write(col, n, exp_f32(b, impl, sub(load(col, n), splat(mx, n)))); });
        else
          write(col, n, exp_again(impl, col, n, mx));
      });
      return;
    }
    const int64_t full_end = row.N - int64_t(tail_exps.size());
    if (full_end > 0)
      b.for_range("col", index_const(0), index_const(full_end), lanes,
                  [&](ExprRef c) { write(c, lanes, exp_again(exp_at(false), c, lanes, mx)); });
    for (size_t t = 0; t < tail_exps.size(); ++t) write(index_const(full_end + int64_t(t)), 1, tail_exps[t]);
  }

  // Each kind returns the row's max and sum of exponentials (f32), as its outputs used them.
  SoftmaxStats two_pass() {
    const int V = o.lanes;
    ExprRef mx = reduce_all(b, row.length, V, o.fold, [&](ExprRef c, int n) { return load(c, n); }, eager_max, "max");
    ExprRef sum = reduce_all(b, row.length, V, o.fold, [&](ExprRef c, int n) {
      return kept(c, exp_f32(b, o.exp, sub(load(c, n), splat(mx, n))));
    }, [](ExprRef a, ExprRef c) { return add(a, c); }, "sum");
    write_outputs(mx, sum, V, [&](bool) { return o.exp; });
    return {mx, sum};
  }

  // PyTorch 1.13's bf16 log_softmax (docs/research/log-softmax-bf16-torch1.13.md), and 2.x's
  // bf16 and f16 one: float arithmetic over widened halves, but the row max, the row sum and
  // log(sum) are kept in the storage type between phases; y = (x - max) - log(sum) in float,
  // rounded once at the store.
  SoftmaxStats staged_log() {
    const int V = o.lanes;
    const ScalarType st = b.kernel().buffers[size_t(x)].elem;
    auto to_storage = [&](const ExprRef& v) { return round_to_storage(v, st); };
    auto load_v = [&](ExprRef c, int n) { return load(c, n); };
    ExprRef mx = b.let("max.stored", to_storage(reduce_all_pairs(b, row.length, V, o.fold, load_v, eager_max, "max")));
    ExprRef sum = reduce_all_pairs(b, row.length, V, o.fold, [&](ExprRef c, int n) {
      return exp_f32(b, o.exp, sub(load(c, n), splat(mx, n)));
    }, [](ExprRef a, ExprRef c) { return add(a, c); }, "sum");
    ExprRef s = b.let("sum.stored", to_storage(sum));
    ExprRef ls = b.let("log_sum.stored", to_storage(log_f32(b, o.log, s)));
    row.for_each(V, [&](ExprRef col, int n) { row.store_as(y, col, sub(sub(load(col, n), splat(mx, n)), splat(ls, n))); });
    return {mx, s};
  }

  // PyTorch 1.13's bf16 softmax (docs/research/softmax-torch1.13.md, section 7).
  SoftmaxStats staged() {
    if (log) return staged_log();
    if (!row.length.is_fixed()) return staged_at_launch();
    const int V = o.lanes;
    const int64_t N = row.N, pairs_end = N - N % (2 * V), full_end = N - N % V;
    int m = b.local("max.lanes", Type{ScalarType::f32, V});
    b.assign(m, f32c(-kInf, V));
    if (pairs_end > 0)
      b.for_range("col", index_const(0), index_const(pairs_end), 2 * V, [&](ExprRef c) {
        b.assign(m, eager_max(b.get(m), load(c, V)));
        b.assign(m, eager_max(b.get(m), load(add(c, index_const(V)), V)));
      });
    int mx = b.local("max", Type{ScalarType::f32, 1});
    b.assign(mx, fold(b, lanes_of(b, b.get(m), "max.lane"), o.fold, eager_max, "max.fold"));
    if (pairs_end < N)
      b.for_range("col", index_const(pairs_end), index_const(N), 1, [&](ExprRef c) { b.assign(mx, scalar_max(b.get(mx), load(c, 1))); });
    const ExprRef mxv = b.get(mx);
    int s = b.local("sum.lanes", Type{ScalarType::f32, V});
    b.assign(s, f32c(0.0f, V));
    if (full_end > 0)
      b.for_range("col", index_const(0), index_const(full_end), V, [&](ExprRef c) {
        b.assign(s, add(b.get(s), kept(c, exp_f32(b, o.exp, sub(load(c, V), splat(mxv, V))))));
      });
    int sum = b.local("sum", Type{ScalarType::f32, 1});
    b.assign(sum, fold(b, lanes_of(b, b.get(s), "sum.lane"), o.fold, [](ExprRef a, ExprRef c) { return add(a, c); }, "sum.fold"));
    // The tail (fewer than V columns) unrolled, its exponentials kept as values for the output
    // pass: each is computed once, as with the kept row, and a backend that would merge a
    // recomputed one with the first (NVRTC does) finds nothing to merge.
    std::vector<ExprRef> tail_exps;
    for (int64_t c = full_end; c < N; ++c) {
      tail_exps.push_back(b.let("tail.exp", exp_f32(b, o.tail_exp, sub(load(index_const(c), 1), mxv))));
      b.assign(sum, add(b.get(sum), tail_exps.back()));
    }
    write_outputs(mxv, b.get(sum), V, [&](bool tail) { return tail ? o.tail_exp : o.exp; }, tail_exps);
    return {mxv, b.get(sum)};
  }

  // staged() for N given at launch: the same loops with bounds read from N. The tail's
  // exponentials (by tail_exp) are kept with the others (or, in a row too long to keep, computed
  // again by the output pass: the same function of the same value).
  SoftmaxStats staged_at_launch() {
    const int V = o.lanes;
    const ExprRef& N = row.length.at_launch;
    ExprRef pairs_end = b.let("pairs.end", sub(N, binary(Op::Rem, N, index_const(2 * V))));
    ExprRef full_end = b.let("full.end", sub(N, binary(Op::Rem, N, index_const(V))));
    int m = b.local("max.lanes", Type{ScalarType::f32, V});
    b.assign(m, f32c(-kInf, V));
    b.for_range("col", index_const(0), pairs_end, 2 * V, [&](ExprRef c) {
      b.assign(m, eager_max(b.get(m), load(c, V)));
      b.assign(m, eager_max(b.get(m), load(add(c, index_const(V)), V)));
    });
    int mx = b.local("max", Type{ScalarType::f32, 1});
    b.assign(mx, fold(b, lanes_of(b, b.get(m), "max.lane"), o.fold, eager_max, "max.fold"));
    b.for_range("col", pairs_end, N, 1, [&](ExprRef c) { b.assign(mx, scalar_max(b.get(mx), load(c, 1))); });
    const ExprRef mxv = b.get(mx);
    int s = b.local("sum.lanes", Type{ScalarType::f32, V});
    b.assign(s, f32c(0.0f, V));
    b.for_range("col", index_const(0), full_end, V, [&](ExprRef c) {
      b.assign(s, add(b.get(s), kept(c, exp_f32(b, o.exp, sub(load(c, V), splat(mxv, V))))));
    });
    int sum = b.local("sum", Type{ScalarType::f32, 1});
    b.assign(sum, fold(b, lanes_of(b, b.get(s), "sum.lane"), o.fold, [](ExprRef a, ExprRef c) { return add(a, c); }, "sum.fold"));
    b.for_range("col", full_end, N, 1, [&](ExprRef c) { b.assign(sum, add(b.get(sum), kept(c, exp_f32(b, o.tail_exp, sub(load(c, 1), mxv))))); });
    write_outputs(mxv, b.get(sum), V, [&](bool tail) { return tail ? o.tail_exp : o.exp; });
    return {mxv, b.get(sum)};
  }

  // exp(x - m) for an element x under the running max m; an -inf element adds 0 even when m
  // is still -inf (where x - m would be NaN).
  ExprRef term(const ExprRef& xv, const ExprRef& m, int lanes) {
    return select(eq(xv, f32c(-kInf, lanes)), f32c(0.0f, lanes), exp_f32(b, o.exp, sub(xv, m)));
  }
  // The factor that moves a sum taken under max m to max m' >= m: exp(m - m'), exactly 1 when
  // they are equal (including both -inf).
  ExprRef rescale(const ExprRef& m, const ExprRef& m_new, int lanes) {
    return select(eq(m, m_new), f32c(1.0f, lanes), exp_f32(b, o.exp, sub(m, m_new)));
  }

  SoftmaxStats online() {
    const int V = o.lanes;
    const int64_t N = row.N, full_end = N - N % V;
    int M = b.local("max", Type{ScalarType::f32, 1}), S = b.local("sum", Type{ScalarType::f32, 1});
    if (full_end > 0) {
      int m = b.local("max.lanes", Type{ScalarType::f32, V}), s = b.local("sum.lanes", Type{ScalarType::f32, V});
      b.assign(m, load(index_const(0), V));
      b.assign(s, term(load(index_const(0), V), b.get(m), V));
      if (full_end > V)
        b.for_range("col", index_const(V), index_const(full_end), V, [&](ExprRef c) {
          ExprRef xv = b.let("xv", load(c, V));
          ExprRef m_new = b.let("max.new", binary(Op::Max, b.get(m), xv));
          b.assign(s, add(mul(b.get(s), rescale(b.get(m), m_new, V)), term(xv, m_new, V)));
          b.assign(m, m_new);
        });
      std::vector<ExprRef> ml = lanes_of(b, b.get(m), "max.lane"), sl = lanes_of(b, b.get(s), "sum.lane");
      b.assign(M, ml[0]);
      b.assign(S, sl[0]);
      for (int l = 1; l < V; ++l) {
        ExprRef m_new = b.let("max.new", binary(Op::Max, b.get(M), ml[size_t(l)]));
        b.assign(S, add(mul(b.get(S), rescale(b.get(M), m_new, 1)), mul(sl[size_t(l)], rescale(ml[size_t(l)], m_new, 1))));
        b.assign(M, m_new);
      }
    } else {
      b.assign(M, f32c(-kInf));
      b.assign(S, f32c(0.0f));
    }
    if (full_end < N)
      b.for_range("col", index_const(full_end), index_const(N), 1, [&](ExprRef c) {
        ExprRef xv = b.let("xv", load(c, 1));
        ExprRef m_new = b.let("max.new", binary(Op::Max, b.get(M), xv));
        b.assign(S, add(mul(b.get(S), rescale(b.get(M), m_new, 1)), term(xv, m_new, 1)));
        b.assign(M, m_new);
      });
    write_outputs(b.get(M), b.get(S), V, [&](bool) { return o.exp; });
    return {b.get(M), b.get(S)};
  }

  // Inductor's C++ for the decomposition (SoftmaxOrder::Kind::Decomposed).
  SoftmaxStats decomposed() {
    const int V = o.lanes;
    const int64_t N = row.N, full_end = N - N % V;
    // The max: lanes from -inf, each full vector and then the tail (lanes 0..r-1) by at::vec::maximum
    // (eager_max), folded by halving; max_propagate_nan(-inf, that) is that.
    int m = b.local("max.lanes", Type{ScalarType::f32, V});
    b.assign(m, f32c(-kInf, V));
    if (full_end > 0)
      b.for_range("col", index_const(0), index_const(full_end), V, [&](ExprRef c) { b.assign(m, eager_max(b.get(m), load(c, V))); });
    std::vector<ExprRef> ml = lanes_of(b, b.get(m), "max.lane");
    for (int64_t t = 0; t < N % V; ++t) ml[size_t(t)] = b.let("max.tail", eager_max(ml[size_t(t)], load(index_const(full_end + t), 1)));
    ExprRef mx = b.let("max", fold(b, std::move(ml), LaneFold::Halving, eager_max, "max.fold"));
    const Arith f32{ScalarType::f32, std::nullopt};
    auto sum_of = [&](const SumOrder& so, MathImpl exp) {
      return emit_sum(b, so, f32, N, [&](ExprRef c, int n) {
        return Term{exp_f32(b, exp, sub(load(std::move(c), n), splat(mx, n))), nullptr};
      }, "sum(exp(x - max))");
    };
    if (log) {
      const int sum_at = b.local("sum", Type{ScalarType::f32, 1}), ls_at = b.local("log_sum", Type{ScalarType::f32, 1});
      // Inductor vectorizes log(sum) over the rows when the launch has vector_log_rows or more.
      auto rolled = [&] {
        SumOrder so = o.sum;
        so.unroll_below = 0;
        ExprRef s = b.let("sum", sum_of(so, o.exp));
        ExprRef vector_loop = binary(Op::Le, index_const(o.vector_log_rows), grid_extent(0));
        b.assign(sum_at, s);
        b.assign(ls_at, select(vector_loop, log_f32(b, o.log, s), log_f32(b, MathImpl::Glibc, s)));
      };
      // An unrolled sum is scalar code: glibc's expf for each term and logf for the row.
      auto unrolled = [&] {
        ExprRef s = b.let("sum", sum_of(o.sum, MathImpl::Glibc));
        b.assign(sum_at, s);
        b.assign(ls_at, log_f32(b, MathImpl::Glibc, s));
      };
      if (N == 1) unrolled();
      else if (N < o.sum.unroll_below) b.if_else(binary(Op::Eq, grid_extent(0), index_const(1)), rolled, unrolled);
      else rolled();
      ExprRef ls = b.get(ls_at);
      row.for_each(V, [&](ExprRef col, int n) { row.store_as(y, col, sub(sub(load(col, n), splat(mx, n)), splat(ls, n))); });
      return {mx, b.get(sum_at)};
    }
    auto softmax_by = [&](MathImpl exp) {
      ExprRef sum = b.let("sum", sum_of(o.sum, exp));
      row.for_each(V, [&](ExprRef col, int n) {
        row.store_as(y, col, div(exp_f32(b, exp, sub(load(col, n), splat(mx, n))), splat(sum, n)));
      });
      return sum;
    };
    if (1 < N && N < o.scalar_exp_below && N < o.sum.unroll_below) {
      const int sum_at = b.local("sum", Type{ScalarType::f32, 1});
      b.if_else(binary(Op::Eq, grid_extent(0), index_const(1)), [&] { b.assign(sum_at, softmax_by(o.exp)); },
                [&] { b.assign(sum_at, softmax_by(MathImpl::Glibc)); });
      return {mx, b.get(sum_at)};
    }
    return {mx, softmax_by(o.exp)};
  }

  SoftmaxStats run() {
    switch (o.kind) {
      case SoftmaxOrder::Kind::Decomposed: return decomposed();
      case SoftmaxOrder::Kind::TwoPass: return two_pass();
      case SoftmaxOrder::Kind::Staged: return staged();
      case SoftmaxOrder::Kind::Online: return online();
      case SoftmaxOrder::Kind::WarpButterfly: break;  // a team kernel of its own (gen/ops/team.cpp)
    }
    throw Error("internal: unknown softmax kind");
  }
};

}  // namespace

// PyTorch 1.13's reduce_all / map_reduce_all for BFloat16 (functional_bfloat16.h): each block
// of 2V bf16 values is widened to two V-lane float vectors, reduced into accumulators A (low
// halves) and B (high halves) started from the first block. The n mod 2V tail goes into all of
// A then lanes 0..r-V-1 of B when it is longer than V, else into lanes 0..r-1 of A. Then
// C = A op B lane by lane, folded by `f`. Rows shorter than 2V: for n <= V the values combine
// left to right; for V < n < 2V, C_l = v_l op v_(V+l) where that exists, else v_l, and C folds
// in lane order whatever `f` is.
ExprRef reduce_all_pairs(Builder& b, const Length& length, int V, LaneFold f, const ValueFn& value, const Combine& op,
                         const std::string& name) {
  int acc = b.local(name, Type{ScalarType::f32, 1});
  if (!length.is_fixed()) {  // the same, its choices made by branches on n
    const ExprRef& n = length.at_launch;
    b.if_else(lt(n, index_const(2 * V)), [&] {
      // c_l = v_l op v_(V+l) (or v_l) for l < min(n, V), folded in lane order.
      b.assign(acc, value(index_const(0), 1));
      b.if_(lt(index_const(V), n), [&] { b.assign(acc, op(b.get(acc), value(index_const(V), 1))); });
      for (int l = 1; l < V; ++l)
        b.if_(lt(index_const(l), n), [&] {
          int c = b.local(name + ".pair", Type{ScalarType::f32, 1});
          b.assign(c, value(index_const(l), 1));
          b.if_(lt(index_const(l + V), n), [&] { b.assign(c, op(b.get(c), value(index_const(l + V), 1))); });
          b.assign(acc, op(b.get(acc), b.get(c)));
        });
    }, [&] {
      ExprRef r = b.let(name + ".r", binary(Op::Rem, n, index_const(2 * V)));
      ExprRef full = b.let(name + ".full", sub(n, r));
      int lo = b.local(name + ".lo", Type{ScalarType::f32, V}), hi = b.local(name + ".hi", Type{ScalarType::f32, V});
      b.assign(lo, value(index_const(0), V));
      b.assign(hi, value(index_const(V), V));
      b.for_range("col", index_const(2 * V), full, 2 * V, [&](ExprRef c) {
        b.assign(lo, op(b.get(lo), value(c, V)));
        b.assign(hi, op(b.get(hi), value(add(c, index_const(V)), V)));
      });
      ExprRef long_tail = binary(Op::Le, index_const(V), r);  // not bound: a bool local counts as varying
      b.if_(long_tail, [&] { b.assign(lo, op(b.get(lo), value(full, V))); });
      std::vector<ExprRef> c;
      for (int l = 0; l < V; ++l) {
        int a = b.local(name + ".lo", Type{ScalarType::f32, 1}), h = b.local(name + ".hi", Type{ScalarType::f32, 1});
        b.assign(a, extract(b.get(lo), l));
        b.assign(h, extract(b.get(hi), l));
        // The tail: lanes 0..r-V-1 of the high half after a whole low vector, else lanes 0..r-1 of the low half.
        b.if_(binary(Op::And, long_tail, lt(index_const(V + l), r)),
              [&] { b.assign(h, op(b.get(h), value(add(full, index_const(V + l)), 1))); });
        b.if_(binary(Op::And, lt(r, index_const(V)), lt(index_const(l), r)),
              [&] { b.assign(a, op(b.get(a), value(add(full, index_const(l)), 1))); });
        c.push_back(b.let(name + ".pair", op(b.get(a), b.get(h))));
      }
      b.assign(acc, fold(b, std::move(c), f, op, name + ".fold"));
    });
    return b.get(acc);
  }
  const int64_t n = length.fixed;
  if (n < 2 * V) {
    std::vector<ExprRef> c;
    for (int64_t l = 0; l < std::min<int64_t>(n, V); ++l) {
      ExprRef v = b.let(name + ".v", value(index_const(l), 1));
      c.push_back(l + V < n ? b.let(name + ".pair", op(v, value(index_const(l + V), 1))) : v);
    }
    b.assign(acc, fold(b, std::move(c), LaneFold::Sequential, op, name + ".fold"));
    return b.get(acc);
  }
  const int64_t full = n - n % (2 * V), r = n % (2 * V);
  int lo = b.local(name + ".lo", Type{ScalarType::f32, V}), hi = b.local(name + ".hi", Type{ScalarType::f32, V});
  b.assign(lo, value(index_const(0), V));
  b.assign(hi, value(index_const(V), V));
  if (full > 2 * V)
    b.for_range("col", index_const(2 * V), index_const(full), 2 * V, [&](ExprRef c) {
      b.assign(lo, op(b.get(lo), value(c, V)));
      b.assign(hi, op(b.get(hi), value(add(c, index_const(V)), V)));
    });
  if (r >= V) b.assign(lo, op(b.get(lo), value(index_const(full), V)));
  std::vector<ExprRef> a = lanes_of(b, b.get(lo), name + ".lo"), h = lanes_of(b, b.get(hi), name + ".hi");
  for (int64_t t = 0; t < (r >= V ? r - V : r); ++t) {
    std::vector<ExprRef>& into = r >= V ? h : a;
    into[size_t(t)] = b.let(name + ".tail", op(into[size_t(t)], value(index_const(full + (r >= V ? V : 0) + t), 1)));
  }
  std::vector<ExprRef> c;
  for (int l = 0; l < V; ++l) c.push_back(b.let(name + ".pair", op(a[size_t(l)], h[size_t(l)])));
  b.assign(acc, fold(b, std::move(c), f, op, name + ".fold"));
  return b.get(acc);
}


ExprRef softmax_max(ExprRef a, ExprRef c) { return eager_max(std::move(a), std::move(c)); }
ExprRef softmax_scalar_max(ExprRef m, ExprRef x) { return scalar_max(std::move(m), std::move(x)); }
ExprRef fold_lanes(Builder& b, std::vector<ExprRef> v, LaneFold f, const std::function<ExprRef(ExprRef, ExprRef)>& op,
                   const std::string& name) {
  return fold(b, std::move(v), f, op, name);
}

SoftmaxStats softmax_row(Builder& b, const SoftmaxOrder& o, const Row& row, int x, int y, bool log) {
  Softmax s{o, b, row, x, y, log};
  return s.run();
}

Kernel build_softmax(const Request& r, const Order& order) {
  if (order.softmax.kind == SoftmaxOrder::Kind::WarpButterfly) return build_softmax_warp(r, order);
  Kernel k;
  const bool log = r.op == OpKind::log_softmax;
  k.name = log ? "log_softmax" : "softmax";
  Builder b(k);
  const Length n = row_length(b, r);
  const int x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  const int y = b.buffer("y", r.x_dtype, true, Extent::rows_by_cols);
  Softmax s{order.softmax, b, Row(b, n), x, y, log};
  // Exponentials kept (see the top) by the vector orders whose output pass takes the sum pass's
  // exps (TwoPass, Staged), for rows up to 64 KiB of f32 (on the stack of the thread running the
  // row; a longer row would not stay in cache between the passes). Not on the CUDA targets, where
  // a row is one thread's and the row would be that thread's local memory. With N at launch the
  // scratch holds 16384, and longer rows compute their exponentials again.
  constexpr int64_t kMaxKeptExps = 16384;
  const bool two_pass = order.softmax.kind == SoftmaxOrder::Kind::TwoPass || order.softmax.kind == SoftmaxOrder::Kind::Staged;
  if (!log && two_pass && order.softmax.lanes > 1 && !cuda_target(r) && r.cols_at_launch) {
    s.exps = b.buffer("exps", ScalarType::f32, true, Extent::scratch, kMaxKeptExps);
    s.keep_if = binary(Op::Le, n.expr(), index_const(kMaxKeptExps));
  } else if (!log && two_pass && order.softmax.lanes > 1 && r.cols <= kMaxKeptExps && !cuda_target(r)) {
    s.exps = b.buffer("exps", ScalarType::f32, true, Extent::scratch, r.cols);
  }
  b.region(log ? "log_softmax" : "softmax", describe(order.softmax), [&] { s.run(); });
  return k;
}

}  // namespace ordo::gen
