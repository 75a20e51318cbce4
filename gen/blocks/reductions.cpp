#include "gen/blocks/reductions.hpp"

#include <fmt/format.h>

#include <functional>

#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

ExprRef Arith::constant(double v, int lanes) const {
  // The value is first given the compute type (a host conversion with RNE), then rounded
  // like any other intermediate.
  double typed = t == ScalarType::f32 ? static_cast<double>(static_cast<float>(v)) : v;
  ExprRef c = r(ir::constant(Type{t, 1}, typed));
  return lanes > 1 ? broadcast(c, lanes) : c;
}

ExprRef Arith::count(ExprRef i64, int lanes) const {
  ExprRef c = r(cast(std::move(i64), t));
  return lanes > 1 ? broadcast(c, lanes) : c;
}

ExprRef fold_lanes(const std::vector<ExprRef>& lanes, LaneFold fold, const Arith& ar) {
  std::vector<ExprRef> v = lanes;
  if (fold == LaneFold::Sequential || v.size() == 1) {
    ExprRef acc = v[0];
    for (size_t i = 1; i < v.size(); ++i) acc = ar.add(acc, v[i]);
    return acc;
  }
  if (v.size() & (v.size() - 1)) throw Error(fmt::format("a {} lane fold needs a power-of-two lane count, not {}",
                                                         fold == LaneFold::Halving ? "halving" : "adjacent", v.size()));
  while (v.size() > 1) {
    size_t half = v.size() / 2;
    std::vector<ExprRef> next(half);
    for (size_t i = 0; i < half; ++i)
      next[i] = fold == LaneFold::Halving ? ar.add(v[i], v[i + half]) : ar.add(v[2 * i], v[2 * i + 1]);
    v = std::move(next);
  }
  return v[0];
}

namespace {

std::vector<ExprRef> lanes_of(const ExprRef& vec) {
  std::vector<ExprRef> out;
  for (int l = 0; l < vec->type.lanes; ++l) out.push_back(extract(vec, l));
  return out;
}

void emit_sequential(Builder& b, const Arith& ar, int acc, int64_t begin, int64_t end, const TermFn& term, bool fuse) {
  if (end <= begin) return;
  b.for_range("i", index_const(begin), index_const(end), 1,
              [&](ExprRef i) { b.assign(acc, accumulate(ar, b.get(acc), term(i, 1), fuse)); });
}

// One leaf of numpy's pairwise sum over [begin, begin+n), n <= block, both uniform i64 values:
// fewer than `lanes` terms are summed left to right from 0; otherwise `lanes` accumulators
// start from the first `lanes` terms, take each further full group lane by lane, fold by
// `fold`, and the n mod lanes leftovers are added in order.
ExprRef emit_pairwise_leaf(Builder& b, const SumOrder& o, const Arith& ar, ExprRef begin, ExprRef n, const TermFn& term) {
  const int V = o.lanes;
  int acc = b.local("leaf", Type{ar.t, 1});
  ExprRef end = b.let("leaf.end", add(begin, n));
  b.if_else(binary(Op::Lt, n, index_const(V)), [&] {
    b.assign(acc, ar.constant(0.0));
    b.for_range("i", begin, end, 1, [&](ExprRef i) { b.assign(acc, accumulate(ar, b.get(acc), term(i, 1), o.fma)); });
  }, [&] {
    ExprRef full_end = b.let("leaf.full_end", sub(end, binary(Op::Rem, n, index_const(V))));
    int r = b.local("leaf.lanes", Type{ar.t, V});
    b.assign(r, first_value(ar, term(begin, V)));
    b.for_range("i", add(begin, index_const(V)), full_end, V, [&](ExprRef i) { b.assign(r, accumulate(ar, b.get(r), term(i, V), o.fma)); });
    b.assign(acc, fold_lanes(lanes_of(b.get(r)), o.fold, ar));
    b.for_range("i", full_end, end, 1, [&](ExprRef i) { b.assign(acc, accumulate(ar, b.get(acc), term(i, 1), o.fma)); });
  });
  return b.get(acc);
}

// numpy's pairwise tree over [0, n): a range of more than `block` terms splits at floor(n/2)
// rounded down to a multiple of `lanes`, and its value is pairwise(left) + pairwise(right).
//
// The tree is fixed by n but irregular, so it is not unrolled (that is O(n) code): its leaves
// are listed in order in constant tables (begin, size, depth, and how many completed right
// children end at the leaf), and one loop runs them. A node at depth j that completes as a
// left child waits in S[j]; a right child is added to it as S[j] + value, completing its parent
// at depth j-1. The additions are exactly the recursion's, in the recursion's order.
ExprRef emit_pairwise(Builder& b, const SumOrder& o, const Arith& ar, int64_t n, const TermFn& term) {
  struct Leaf {
    int64_t begin, size, depth, combines;
  };
  std::vector<Leaf> leaves;
  std::function<void(int64_t, int64_t, int64_t, bool)> walk = [&](int64_t begin, int64_t size, int64_t depth, bool right) {
    if (size <= o.block) {
      leaves.push_back({begin, size, depth, 0});
    } else {
      int64_t half = size / 2;
      half -= half % o.lanes;
      walk(begin, half, depth + 1, false);
      walk(begin + half, size - half, depth + 1, true);
    }
    if (right) ++leaves.back().combines;  // this node completes at the end of its last leaf
  };
  walk(0, n, 0, false);
  if (leaves.size() == 1) return emit_pairwise_leaf(b, o, ar, index_const(0), index_const(n), term);

  int64_t max_depth = 0;
  std::vector<int64_t> begins, sizes, depths, combines;
  for (const Leaf& l : leaves) {
    begins.push_back(l.begin);
    sizes.push_back(l.size);
    depths.push_back(l.depth);
    combines.push_back(l.combines);
    max_depth = std::max(max_depth, l.depth);
  }
  const int t_begin = b.table(begins), t_size = b.table(sizes), t_depth = b.table(depths), t_comb = b.table(combines);
  std::vector<int> S;
  for (int64_t j = 0; j <= max_depth; ++j) {  // zeroed only to satisfy the textual assign-before-read rule
    S.push_back(b.local(fmt::format("S{}", j), Type{ar.t, 1}));
    b.assign(S.back(), ar.constant(0.0));
  }
  b.for_range("leaf", index_const(0), index_const(static_cast<int64_t>(leaves.size())), 1, [&](ExprRef k) {
    ExprRef value = emit_pairwise_leaf(b, o, ar, table(t_begin, k), table(t_size, k), term);
    int v = b.local("node", Type{ar.t, 1});
    b.assign(v, value);
    ExprRef depth = b.let("depth", table(t_depth, k));
    ExprRef stop = b.let("stop", sub(depth, table(t_comb, k)));  // depth where the value waits
    for (int64_t j = max_depth; j >= 0; --j) {
      ExprRef jj = index_const(j);
      b.if_(binary(Op::And, binary(Op::Le, jj, depth), binary(Op::Lt, stop, jj)),
            [&] { b.assign(v, ar.add(b.get(S[size_t(j)]), b.get(v))); });
      b.if_(binary(Op::Eq, jj, stop), [&] { b.assign(S[size_t(j)], b.get(v)); });
    }
  });
  return b.get(S[0]);
}

// The lane tree of every term function, each in its own accumulators: the same operations as one
// lane tree per function, whose steady loops run as one loop (each row element is read once).
std::vector<ExprRef> emit_lane_trees(Builder& b, const SumOrder& o, const Arith& ar, int64_t n, const std::vector<TermFn>& terms) {
  const int V = o.lanes;
  const int64_t nvec = n / V;
  std::vector<ExprRef> out;
  if (nvec == 0) {  // fewer terms than lanes: sequential from the first term
    for (const TermFn& term : terms) {
      int acc = b.local("sum", Type{ar.t, 1});
      b.assign(acc, first_value(ar, term(index_const(0), 1)));
      emit_sequential(b, ar, acc, 1, n, term, o.fma);
      out.push_back(b.get(acc));
    }
    return out;
  }
  const int A = static_cast<int>(std::min<int64_t>(o.accumulators, nvec));
  std::vector<std::vector<int>> accs(terms.size());
  for (size_t s = 0; s < terms.size(); ++s)
    for (int j = 0; j < A; ++j) {
      accs[s].push_back(b.local(fmt::format("acc{}", j), Type{ar.t, V}));
      b.assign(accs[s].back(), first_value(ar, terms[s](index_const(int64_t(j) * V), V)));
    }
  const int64_t groups_end = A + (nvec - A) / A * A;  // vectors [A, groups_end) in whole groups of A
  if (groups_end > A)
    b.for_range("k", index_const(int64_t(A) * V), index_const(groups_end * V), int64_t(A) * V, [&](ExprRef k) {
      for (size_t s = 0; s < terms.size(); ++s)
        for (int j = 0; j < A; ++j)
          b.assign(accs[s][size_t(j)], accumulate(ar, b.get(accs[s][size_t(j)]), terms[s](add(k, index_const(int64_t(j) * V)), V), o.fma));
    });
  for (size_t s = 0; s < terms.size(); ++s) {
    const TermFn& term = terms[s];
    for (int64_t k = groups_end; k < nvec; ++k) {
      int a = accs[s][size_t(k % A)];
      b.assign(a, accumulate(ar, b.get(a), term(index_const(k * V), V), o.fma));
    }
    for (int j = 1; j < A; ++j) b.assign(accs[s][0], ar.add(b.get(accs[s][0]), b.get(accs[s][size_t(j)])));
    std::vector<ExprRef> lanes = lanes_of(b.get(accs[s][0]));
    int acc = b.local("sum", Type{ar.t, 1});
    if (o.tail_after_fold) {
      b.assign(acc, fold_lanes(lanes, o.fold, ar));
      const int64_t r = n % V, unfused = o.tail_unfused_group > 0 ? r - r % o.tail_unfused_group : 0;
      for (int64_t t = 0; t < r; ++t)
        b.assign(acc, accumulate(ar, b.get(acc), term(index_const(nvec * V + t), 1), o.fma && t >= unfused));
      out.push_back(b.get(acc));
      continue;
    }
    for (int64_t t = 0; t < n % V; ++t) {
      lanes[size_t(t)] = b.let("lane", accumulate(ar, lanes[size_t(t)], term(index_const(nvec * V + t), 1), o.fma));
    }
    b.assign(acc, fold_lanes(lanes, o.fold, ar));
    out.push_back(b.get(acc));
  }
  return out;
}

ExprRef emit_lane_tree(Builder& b, const SumOrder& o, const Arith& ar, int64_t n, const TermFn& term) {
  return emit_lane_trees(b, o, ar, n, {term}).at(0);
}

// emit_lane_trees for a length n given at launch (a uniform i64 >= 1): the same operations as the
// expansion for that n, with its choices made by branches on n. nvec = n / V full vectors; the
// first min(A, nvec) initialise the accumulators; the whole groups of A run as one loop; the
// nvec - groups_end leftovers (fewer than A) go to accumulators 0, 1, ... in order; the tail's
// r = n mod V terms into lanes 0..r-1 (or after the fold), each lane a local.
std::vector<ExprRef> emit_lane_trees_at_launch(Builder& b, const SumOrder& o, const Arith& ar, const ExprRef& n,
                                               const std::vector<TermFn>& terms) {
  const int V = o.lanes, A = o.accumulators;
  auto lt = [](ExprRef a, ExprRef c) { return binary(Op::Lt, std::move(a), std::move(c)); };
  ExprRef nvec = b.let("nvec", div(n, index_const(V)));
  ExprRef tail_begin = b.let("tail.begin", mul(nvec, index_const(V)));
  std::vector<int> results;
  for (size_t s = 0; s < terms.size(); ++s) results.push_back(b.local("sum", Type{ar.t, 1}));
  b.if_else(binary(Op::Eq, nvec, index_const(0)), [&] {  // fewer terms than lanes: sequential from the first term
    for (size_t s = 0; s < terms.size(); ++s) {
      b.assign(results[s], first_value(ar, terms[s](index_const(0), 1)));
      b.for_range("i", index_const(1), n, 1, [&](ExprRef i) { b.assign(results[s], accumulate(ar, b.get(results[s]), terms[s](i, 1), o.fma)); });
    }
  }, [&] {
    // Accumulator j exists when j < nvec; the others are zeroed only for the textual assign-before-read rule.
    std::vector<std::vector<int>> accs(terms.size());
    for (size_t s = 0; s < terms.size(); ++s)
      for (int j = 0; j < A; ++j) {
        accs[s].push_back(b.local(fmt::format("acc{}", j), Type{ar.t, V}));
        if (j == 0) {
          b.assign(accs[s][0], first_value(ar, terms[s](index_const(0), V)));
          continue;
        }
        b.assign(accs[s].back(), ar.constant(0.0, V));
        b.if_(lt(index_const(j), nvec), [&] { b.assign(accs[s][size_t(j)], first_value(ar, terms[s](index_const(int64_t(j) * V), V))); });
      }
    // groups_end: A + (nvec - A) / A * A when nvec >= A, else nvec (no whole group, no leftover).
    // (Both sides of a select are evaluated: the division sees at least A vectors.)
    ExprRef few = lt(nvec, index_const(A));  // not bound: a bool local counts as varying
    ExprRef at_least_a = select(few, index_const(A), nvec);
    ExprRef groups_end = b.let("groups.end", select(few, nvec, add(index_const(A), mul(div(sub(at_least_a, index_const(A)), index_const(A)), index_const(A)))));
    b.for_range("k", index_const(int64_t(A) * V), mul(groups_end, index_const(V)), int64_t(A) * V, [&](ExprRef k) {
        for (size_t s = 0; s < terms.size(); ++s)
          for (int j = 0; j < A; ++j)
            b.assign(accs[s][size_t(j)], accumulate(ar, b.get(accs[s][size_t(j)]), terms[s](add(k, index_const(int64_t(j) * V)), V), o.fma));
      });
    // groups_end is a multiple of A once nvec >= A, so leftover vector groups_end + j goes to accumulator j.
    for (int j = 0; j + 1 < A; ++j) {
      ExprRef k = add(groups_end, index_const(j));
      b.if_(lt(k, nvec), [&] {
        for (size_t s = 0; s < terms.size(); ++s)
          b.assign(accs[s][size_t(j)], accumulate(ar, b.get(accs[s][size_t(j)]), terms[s](mul(k, index_const(V)), V), o.fma));
      });
    }
    for (size_t s = 0; s < terms.size(); ++s) {
      for (int j = 1; j < A; ++j)
        b.if_(lt(index_const(j), nvec), [&] { b.assign(accs[s][0], ar.add(b.get(accs[s][0]), b.get(accs[s][size_t(j)]))); });
      if (o.tail_after_fold) {
        b.assign(results[s], fold_lanes(lanes_of(b.get(accs[s][0])), o.fold, ar));
        b.for_range("i", tail_begin, n, 1, [&](ExprRef i) { b.assign(results[s], accumulate(ar, b.get(results[s]), terms[s](i, 1), o.fma)); });
        continue;
      }
      std::vector<ExprRef> lanes;
      for (int t = 0; t < V; ++t) {
        ExprRef lane = extract(b.get(accs[s][0]), t);
        if (t == V - 1) {  // the tail has at most V - 1 terms
          lanes.push_back(lane);
          continue;
        }
        int l = b.local(fmt::format("lane{}", t), Type{ar.t, 1});
        b.assign(l, lane);
        ExprRef col = add(tail_begin, index_const(t));
        b.if_(lt(col, n), [&] { b.assign(l, accumulate(ar, b.get(l), terms[s](col, 1), o.fma)); });
        lanes.push_back(b.get(l));
      }
      b.assign(results[s], fold_lanes(lanes, o.fold, ar));
    }
  });
  std::vector<ExprRef> out;
  for (int acc : results) out.push_back(b.get(acc));
  return out;
}

// The longest row a launch may give (CompiledKernel::run_with_sizes): a size is at most 2^24.
constexpr int64_t kMaxLaunchLength = int64_t(1) << 24;

// ((v0 + v1) + v2) + ...
ExprRef add_in_order(const Arith& ar, const std::vector<ExprRef>& v) {
  ExprRef acc = v[0];
  for (size_t i = 1; i < v.size(); ++i) acc = ar.add(acc, v[i]);
  return acc;
}

// The vector part of the level cascade (SumOrder::Kind::LevelCascade), shared by the expansion
// for a fixed length and the one for a length given at launch: the accumulators A0..A3 of
// `accumulators` vectors each (zeroed here), the groups and their blocks of L groups with the
// carries between levels, and the fold of the levels and of the accumulators.
struct LevelCascadeVectors {
  static constexpr int kLevels = 4;
  Builder& b;
  const SumOrder& o;
  const Arith& ar;
  const TermFn& term;
  int64_t L;
  std::vector<std::vector<int>> acc;

  LevelCascadeVectors(Builder& builder, const SumOrder& order, const Arith& arith, const TermFn& t, int64_t block)
      : b(builder), o(order), ar(arith), term(t), L(block), acc(kLevels) {
    for (int lvl = 0; lvl < kLevels; ++lvl)
      for (int k = 0; k < o.accumulators; ++k) {
        acc[size_t(lvl)].push_back(b.local(fmt::format("A{}_{}", lvl, k), Type{ar.t, o.lanes}));
        b.assign(acc[size_t(lvl)].back(), ar.constant(0.0, o.lanes));
      }
  }
  // The vector of terms from element `at` into accumulator k of level 0.
  void add_vector(int k, ExprRef at) {
    b.assign(acc[0][size_t(k)], accumulate(ar, b.get(acc[0][size_t(k)]), term(std::move(at), o.lanes), o.fma));
  }
  void add_group(ExprRef group) {  // group index g: vectors A*g .. A*g+A-1
    for (int k = 0; k < o.accumulators; ++k)
      add_vector(k, mul(add(mul(group, index_const(o.accumulators)), index_const(k)), index_const(o.lanes)));
  }
  void absorb(int lvl) {  // A[lvl] += A[lvl-1]; A[lvl-1] = 0
    for (int k = 0; k < o.accumulators; ++k) {
      b.assign(acc[size_t(lvl)][size_t(k)], ar.add(b.get(acc[size_t(lvl)][size_t(k)]), b.get(acc[size_t(lvl - 1)][size_t(k)])));
      b.assign(acc[size_t(lvl - 1)][size_t(k)], ar.constant(0.0, o.lanes));
    }
  }
  // Blocks 0 .. count-1 of L groups, each followed by its carries.
  void blocks(ExprRef count) {
    b.for_range("block", index_const(0), std::move(count), 1, [&](ExprRef blk) {
      b.for_range("group", mul(blk, index_const(L)), mul(add(blk, index_const(1)), index_const(L)), 1, [&](ExprRef g) { add_group(g); });
      ExprRef done = add(mul(blk, index_const(L)), index_const(L));  // groups consumed so far
      absorb(1);
      b.if_(binary(Op::Eq, binary(Op::Rem, done, index_const(L * L)), index_const(0)), [&] {
        absorb(2);
        b.if_(binary(Op::Eq, binary(Op::Rem, done, index_const(L * L * L)), index_const(0)), [&] { absorb(3); });
      });
    });
  }
  void groups(ExprRef begin, ExprRef end) {
    b.for_range("group", std::move(begin), std::move(end), 1, [&](ExprRef g) { add_group(g); });
  }
  // Per accumulator ((A0 + A1) + A2) + A3, into A0.
  void fold_levels() {
    for (int k = 0; k < o.accumulators; ++k) {
      std::vector<ExprRef> levels;
      for (int lvl = 0; lvl < kLevels; ++lvl) levels.push_back(b.get(acc[size_t(lvl)][size_t(k)]));
      b.assign(acc[0][size_t(k)], add_in_order(ar, levels));
    }
  }
  // The accumulators folded in order: one vector of lanes.
  ExprRef lanes() {
    std::vector<ExprRef> accs;
    for (int k = 0; k < o.accumulators; ++k) accs.push_back(b.get(acc[0][size_t(k)]));
    return b.let("lanes", add_in_order(ar, accs));
  }
};

// The level cascade's block of L groups for `groups` groups: L = 2^max(4, ceil(log2 groups) / 4).
int64_t level_cascade_block(int64_t groups) {
  int64_t ceil_log2 = 1;
  if (groups > 2) while ((int64_t(1) << ceil_log2) < groups) ++ceil_log2;
  return int64_t(1) << std::max<int64_t>(4, ceil_log2 / 4);
}

ExprRef emit_level_cascade(Builder& b, const SumOrder& o, const Arith& ar, int64_t n, const TermFn& term) {
  const int V = o.lanes, A = o.accumulators;
  if (n < V) {  // the scalar path: A accumulators round robin over whole rounds, the rest into p0
    std::vector<int> p;
    for (int k = 0; k < A; ++k) {
      p.push_back(b.local(fmt::format("p{}", k), Type{ar.t, 1}));
      b.assign(p.back(), ar.constant(0.0));
    }
    const int64_t rounds = n / A * A;
    for (int64_t t = 0; t < n; ++t) {
      int dst = p[size_t(t < rounds ? t % A : 0)];
      b.assign(dst, accumulate(ar, b.get(dst), term(index_const(t), 1), o.fma));
    }
    std::vector<ExprRef> vals;
    for (int k : p) vals.push_back(b.get(k));
    return b.let("sum", ar.add(ar.constant(0.0), add_in_order(ar, vals)));
  }
  const int64_t nvec = n / V, groups = nvec / A;
  LevelCascadeVectors c(b, o, ar, term, level_cascade_block(groups));
  const int64_t blocks = groups / c.L;
  if (blocks > 0) c.blocks(index_const(blocks));
  if (blocks * c.L < groups) c.groups(index_const(blocks * c.L), index_const(groups));
  c.fold_levels();
  for (int64_t m = groups * A; m < nvec; ++m) c.add_vector(0, index_const(m * V));
  ExprRef lanes = c.lanes();
  int f = b.local("sum", Type{ar.t, 1});
  b.assign(f, ar.constant(0.0));
  for (int64_t t = nvec * V; t < n; ++t) b.assign(f, accumulate(ar, b.get(f), term(index_const(t), 1), o.fma));
  for (int l = 0; l < V; ++l) b.assign(f, ar.add(b.get(f), extract(lanes, l)));
  return b.let("sum", ar.add(ar.constant(0.0), b.get(f)));
}



// emit_level_cascade for a length n given at launch: the same operations, with its choices made by
// branches on n. The block L depends on n only past 2^20 groups, which no launch reaches (the
// caller checks), so it is the one of the longest row.
// emit_level_cascade for a length n given at launch: the same operations, with its choices made by
// branches on n. The block L depends on n only past 2^20 groups, which no launch reaches (checked
// here), so it is the one of the longest row.
ExprRef emit_level_cascade_at_launch(Builder& b, const SumOrder& o, const Arith& ar, const ExprRef& n, const TermFn& term) {
  const int V = o.lanes, A = o.accumulators;
  const int64_t L = level_cascade_block(kMaxLaunchLength / V / A);
  if (L != level_cascade_block(1)) throw Error(fmt::format("internal: a level cascade over {} lanes and {} accumulators changes its block "
                                                           "below 2^24 terms", V, A));
  auto lt = [](ExprRef a, ExprRef c) { return binary(Op::Lt, std::move(a), std::move(c)); };
  int result = b.local("sum", Type{ar.t, 1});
  b.if_else(lt(n, index_const(V)), [&] {  // the scalar path: term t into p[t % A] within whole rounds, else into p0
    std::vector<int> p;
    for (int k = 0; k < A; ++k) {
      p.push_back(b.local(fmt::format("p{}", k), Type{ar.t, 1}));
      b.assign(p.back(), ar.constant(0.0));
    }
    ExprRef rounds = mul(div(n, index_const(A)), index_const(A));
    for (int t = 0; t + 1 < V; ++t)
      b.if_(lt(index_const(t), n), [&] {
        auto into = [&](int dst) { b.assign(dst, accumulate(ar, b.get(dst), term(index_const(t), 1), o.fma)); };
        if (t % A == 0) into(p[0]);
        else b.if_else(lt(index_const(t), rounds), [&] { into(p[size_t(t % A)]); }, [&] { into(p[0]); });
      });
    std::vector<ExprRef> vals;
    for (int k : p) vals.push_back(b.get(k));
    b.assign(result, ar.add(ar.constant(0.0), add_in_order(ar, vals)));
  }, [&] {
    ExprRef nvec = b.let("nvec", div(n, index_const(V)));
    ExprRef groups = b.let("groups", div(nvec, index_const(A)));
    LevelCascadeVectors c(b, o, ar, term, L);
    ExprRef blocks = b.let("blocks", div(groups, index_const(L)));
    c.blocks(blocks);
    c.groups(mul(blocks, index_const(L)), groups);
    c.fold_levels();
    // The fewer than A vectors past the whole groups, into accumulator 0.
    ExprRef groups_end = b.let("groups.end", mul(groups, index_const(A)));
    for (int j = 0; j + 1 < A; ++j)
      b.if_(lt(add(groups_end, index_const(j)), nvec), [&] { c.add_vector(0, mul(add(groups_end, index_const(j)), index_const(V))); });
    ExprRef lanes = c.lanes();
    int f = b.local("sum", Type{ar.t, 1});
    b.assign(f, ar.constant(0.0));
    b.for_range("t", mul(nvec, index_const(V)), n, 1, [&](ExprRef t) { b.assign(f, accumulate(ar, b.get(f), term(t, 1), o.fma)); });
    for (int l = 0; l < V; ++l) b.assign(f, ar.add(b.get(f), extract(lanes, l)));
    b.assign(result, ar.add(ar.constant(0.0), b.get(f)));
  });
  return b.get(result);
}


// OpenMP's static schedule of `iters` iterations over `parts` threads: part p's first iteration
// and count (the first iters mod parts parts take one more).
std::pair<int64_t, int64_t> static_schedule(int64_t iters, int parts, int p) {
  const int64_t q = iters / parts, rem = iters % parts;
  return {p * q + std::min<int64_t>(p, rem), q + (p < rem ? 1 : 0)};
}

int64_t ceil_log2_u64(int64_t n) {
  int64_t d = 0;
  while ((int64_t(1) << d) < n) ++d;
  return d;
}

// One part of a ChunkStack sum: full vectors [first, first + count) (vector indices) into the
// stack, sized for `sized_for` vectors. Returns the stack's sum, a V-lane vector.
ExprRef chunk_stack_part(Builder& b, const SumOrder& o, const Arith& ar, int64_t first, int64_t count, int64_t sized_for,
                         const TermFn& term) {
  const int V = o.lanes;
  const int64_t C = o.stack_chunk;
  const int64_t depth = ceil_log2_u64((sized_for + C - 1) / C);
  std::vector<int> level;
  for (int64_t l = 0; l < std::max<int64_t>(depth, 1); ++l) {
    level.push_back(b.local(fmt::format("S{}", l), Type{ar.t, V}));
    b.assign(level.back(), ar.constant(0.0, V));
  }
  auto add_vectors = [&](ExprRef from, ExprRef to) {
    b.for_range("v", from, to, 1, [&](ExprRef v) {
      b.assign(level[0], accumulate(ar, b.get(level[0]), term(mul(v, index_const(V)), V), o.fma));
    });
  };
  if (depth < 2 || count < C) {  // no carry ever runs: level 0 takes every vector
    if (count > 0) add_vectors(index_const(first), index_const(first + count));
  } else {
    const int64_t chunks = count / C;
    b.for_range("chunk", index_const(0), index_const(chunks), 1, [&](ExprRef j) {
      ExprRef base = add(index_const(first), mul(j, index_const(C)));
      add_vectors(base, add(base, index_const(C)));
      ExprRef done = add(j, index_const(1));  // chunks finished, counted from 1
      // Level l takes level l-1 when the low l bits of `done` are all 0 (the binary counter).
      std::function<void(int64_t)> carry = [&](int64_t l) {
        if (l >= depth) return;
        b.if_(binary(Op::Eq, binary(Op::Rem, done, index_const(int64_t(1) << l)), index_const(0)), [&] {
          b.assign(level[size_t(l)], ar.add(b.get(level[size_t(l)]), b.get(level[size_t(l - 1)])));
          b.assign(level[size_t(l - 1)], ar.constant(0.0, V));
          carry(l + 1);
        });
      };
      carry(1);
    });
    if (count % C) add_vectors(index_const(first + chunks * C), index_const(first + count));
  }
  ExprRef sum = b.get(level[0]);
  for (int64_t l = 1; l < depth; ++l) sum = ar.add(sum, b.get(level[size_t(l)]));
  return b.let("stack", sum);
}

ExprRef single_row_launch() { return binary(Op::Eq, grid_extent(0), index_const(1)); }

// Whether Inductor's C++ backend splits each row's reduction loop between its `parts` threads in
// this launch (its loop-nest heuristic, torch/_inductor/codegen/cpp.py max_parallel_depth and
// decide_parallel_depth): a single row when N / parts >= 512 (its loop over rows is gone); R > 1
// rows when the row loop's N / step steps exceed 300 R and R N / parts >= 512 (else it runs the
// rows in parallel). Null when no launch splits.
ExprRef split_launch(int parts, int64_t n, int64_t step) {
  if (parts <= 1) return nullptr;
  ExprRef rows = grid_extent(0);
  ExprRef many = binary(Op::And, binary(Op::Lt, mul(rows, index_const(300)), index_const(n / step)),
                        binary(Op::Le, index_const(512 * int64_t(parts)), mul(rows, index_const(n))));
  if (n / parts < 512) return n / step > 300 * 2 ? many : nullptr;  // only launches of R >= 2 rows can split
  return binary(Op::Or, single_row_launch(), many);
}

ExprRef emit_chunk_stack(Builder& b, const SumOrder& o, const Arith& ar, int64_t n, const TermFn& term) {
  const int V = o.lanes, P = std::max(o.parts, 1);
  const int64_t nvec = n / V, r = n % V, iters = nvec + (r ? 1 : 0);
  auto unrolled = [&] {  // left to right from the first term
    ExprRef acc = b.let("sum", first_value(ar, term(index_const(0), 1)));
    for (int64_t i = 1; i < n; ++i) acc = b.let("sum", accumulate(ar, acc, term(index_const(i), 1), o.fma));
    return acc;
  };
  if (n == 1) return unrolled();
  if (n < o.unroll_below) {
    const int result = b.local("sum", Type{ar.t, 1});
    SumOrder rolled = o;
    rolled.unroll_below = 0;
    b.if_else(single_row_launch(), [&] { b.assign(result, emit_chunk_stack(b, rolled, ar, n, term)); },
              [&] { b.assign(result, unrolled()); });
    return b.get(result);
  }
  const int total = b.local("full", Type{ar.t, V});
  auto whole = [&] { b.assign(total, chunk_stack_part(b, o, ar, 0, nvec, nvec, term)); };
  auto split = [&] {  // each part's stack, added lane-wise in part order into a vector from +0
    b.assign(total, ar.constant(0.0, V));
    for (int p = 0; p < P; ++p) {
      const auto [begin, count] = static_schedule(iters, P, p);
      const int64_t vectors = std::max<int64_t>(0, std::min(begin + count, nvec) - begin);
      ExprRef part = chunk_stack_part(b, o, ar, begin, vectors, (nvec + P - 1) / P, term);
      b.assign(total, ar.add(b.get(total), part));
    }
  };
  if (ExprRef splits = split_launch(P, n, o.loop_step > 0 ? o.loop_step : V)) b.if_else(splits, split, whole);
  else whole();
  ExprRef full = b.get(total);
  // The tail vector (lanes 0..r-1 from +0) added lane-wise: lane l is full_l + t_l. (0 + t_l
  // differs from t_l only for -0, and a zero's sign here cannot reach the result: a nonzero sum
  // ignores it, and a zero sum becomes +0 in the final 0 + sum.)
  std::vector<ExprRef> lanes = lanes_of(full);
  for (int64_t t = 0; t < r; ++t)
    lanes[size_t(t)] = b.let("lane", accumulate(ar, lanes[size_t(t)], term(index_const(nvec * V + t), 1), o.fma));
  return b.let("sum", ar.add(ar.constant(0.0), fold_lanes(lanes, o.fold, ar)));
}

}  // namespace

ExprRef emit_sum(Builder& b, const SumOrder& o, const Arith& ar, const Length& length, const TermFn& term, const std::string& label) {
  if (!length.is_fixed()) {
    if ((o.kind != SumOrder::Kind::Sequential && o.kind != SumOrder::Kind::LaneTree && o.kind != SumOrder::Kind::LevelCascade) ||
        o.outer_chunk > 0)
      throw Error(fmt::format("internal: a sum ({}) over a length given at launch", describe(o)));
    ExprRef result;
    b.region(label, describe(o), [&] {
      if (o.kind == SumOrder::Kind::LaneTree) {
        result = emit_lane_trees_at_launch(b, o, ar, length.at_launch, {term}).at(0);
        return;
      }
      if (o.kind == SumOrder::Kind::LevelCascade) {
        result = emit_level_cascade_at_launch(b, o, ar, length.at_launch, term);
        return;
      }
      int acc = b.local("sum", Type{ar.t, 1});
      b.assign(acc, ar.constant(0.0));
      b.for_range("i", index_const(0), length.at_launch, 1, [&](ExprRef i) { b.assign(acc, accumulate(ar, b.get(acc), term(i, 1), o.fma)); });
      result = b.get(acc);
    });
    return result;
  }
  const int64_t n = length.fixed;
  // The sum of `count` terms from `t` (indices from 0) in the order's kind.
  auto inner = [&](int64_t count, const TermFn& t) -> ExprRef {
    switch (o.kind) {
      case SumOrder::Kind::Sequential: {
        int acc = b.local("sum", Type{ar.t, 1});
        b.assign(acc, ar.constant(0.0));
        emit_sequential(b, ar, acc, 0, count, t, o.fma);
        return b.get(acc);
      }
      case SumOrder::Kind::Pairwise: return emit_pairwise(b, o, ar, count, t);
      case SumOrder::Kind::LaneTree: return emit_lane_tree(b, o, ar, count, t);
      case SumOrder::Kind::LevelCascade: return emit_level_cascade(b, o, ar, count, t);
      case SumOrder::Kind::ChunkStack: return emit_chunk_stack(b, o, ar, count, t);
    }
    return nullptr;
  };
  ExprRef result;
  b.region(label, describe(o), [&] {
    if (o.outer_chunk <= 0 || n <= o.outer_chunk) {
      result = inner(n, term);
      return;
    }
    // Chunks of outer_chunk terms, each summed by the inner order, added left to right into 0.
    const int64_t C = o.outer_chunk, full = n / C;
    int acc = b.local("chunks", Type{ar.t, 1});
    b.assign(acc, ar.constant(0.0));
    auto chunk = [&](ExprRef base, int64_t count) {
      TermFn shifted = [&](ExprRef i, int lanes) { return term(add(i, base), lanes); };
      ExprRef part = inner(count, shifted);
      b.assign(acc, ar.add(b.get(acc), part));
    };
    b.for_range("chunk", index_const(0), index_const(full * C), C, [&](ExprRef base) { chunk(base, C); });
    if (n % C) chunk(index_const(full * C), n % C);
    result = b.get(acc);
  });
  return result;
}

std::vector<ExprRef> emit_sums(Builder& b, const SumOrder& o, const Arith& ar, const Length& length, const std::vector<LabelledTerm>& sums) {
  const int64_t n = length.fixed;
  if (o.kind != SumOrder::Kind::LaneTree || (o.outer_chunk > 0 && (!length.is_fixed() || n > o.outer_chunk))) {
    std::vector<ExprRef> out;
    for (const LabelledTerm& s : sums) out.push_back(emit_sum(b, o, ar, length, s.term, s.label));
    return out;
  }
  std::vector<TermFn> terms;
  std::string label;
  for (const LabelledTerm& s : sums) {
    terms.push_back(s.term);
    label += (label.empty() ? "" : ", ") + s.label;
  }
  std::vector<ExprRef> out;
  b.region(label, describe(o), [&] {
    out = length.is_fixed() ? emit_lane_trees(b, o, ar, n, terms) : emit_lane_trees_at_launch(b, o, ar, length.at_launch, terms);
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Moments

namespace {

// A Welford state held in locals: a count (i64, the same for every lane) and lane-wise mean and M2.
struct WelfordState {
  int count, mean, m2;
};

WelfordState welford_locals(Builder& b, const std::string& name, Type t) {
  return {b.local(name + ".n", Type{ScalarType::i64, 1}), b.local(name + ".mean", t), b.local(name + ".m2", t)};
}

void welford_zero(Builder& b, const Arith& ar, const WelfordState& s, int lanes) {
  b.assign(s.count, index_const(0));
  b.assign(s.mean, ar.constant(0.0, lanes));
  b.assign(s.m2, ar.constant(0.0, lanes));
}

// Merge (nb, mb, Mb) into acc in the form `form` (ir/order.hpp, WelfordMerge states the
// arithmetic): n = na+nb; c = n == 0 ? 0 : nb/n; d = mb - ma; then the mean and M2 updates.
void welford_merge(Builder& b, const Arith& ar, const WelfordState& acc, ExprRef nb, ExprRef mb, ExprRef Mb, int lanes,
                   bool fused, WelfordMerge form = WelfordMerge::MeanFirst) {
  ExprRef na = b.get(acc.count);
  ExprRef n = b.let("merge.n", add(na, nb));
  ExprRef ratio = ar.div(ar.count(nb), ar.count(n));
  ExprRef c = b.let("merge.c", select(binary(Op::Eq, n, index_const(0)), ar.constant(0.0), ratio));
  if (lanes > 1) c = broadcast(c, lanes);
  ExprRef d = b.let("merge.d", ar.sub(mb, b.get(acc.mean)));
  ExprRef na_f = ar.count(na, lanes);
  if (form == WelfordMerge::ScaledDelta) {
    ExprRef cd = b.let("merge.cd", ar.mul(c, d));
    ExprRef m2_sum = ar.add(b.get(acc.m2), Mb);
    b.assign(acc.mean, ar.add(b.get(acc.mean), cd));
    b.assign(acc.m2, ar.mul_add(ar.mul(d, na_f), cd, m2_sum, fused));
  } else {
    b.assign(acc.mean, ar.mul_add(c, d, b.get(acc.mean), fused));
    ExprRef dd_c = ar.mul(ar.mul(d, d), c);
    ExprRef inner = fused ? ar.fma(dd_c, na_f, Mb) : ar.add(Mb, ar.mul(dd_c, na_f));
    b.assign(acc.m2, ar.add(b.get(acc.m2), inner));
  }
  b.assign(acc.count, n);
}

// The cascade's lanes meet only in the final lane fold. Until then every lane runs its own
// Welford stream, and the counts (and so every merge coefficient) are the same for all lanes.
// So on the CUDA targets (`warp`) lane l runs as thread l of a warp, on scalars: each lane sees
// exactly the operations it sees in the vector, and thread 0 then folds lanes 0..V-1 in order.
// A warp reads consecutive elements together, and a thread keeps one lane's state.
//
// The one-thread kernel runs a chunk's K steps as a loop, step j computing its 1/(j+1), and
// keeps the stack levels as locals with every carry and merge written out at its level. The
// warp kernel states the same operations on the same values as loops over team memory instead:
// the step constants, the stack (level l of lane t at l*V + t) and the lanes for the fold. That
// is about a tenth of the code, and NVRTC's compile time follows the code, above all its IEEE
// divisions (one per merge). The CPU's steps were written out once (a constant per step); as a
// loop, LLVM's codegen, most of a cold compile, has a sixteenth of their code.
// lane_welford (one thread) for a length N given at launch: the same operations, with its choices
// made by branches on N. The stack holds the levels of the longest row a launch may give; level lvl
// takes part (a carry into it, its final merge) exactly when the row's chunk count m exceeds 2^lvl,
// which is lvl < depth for depth = max(1, ceil(log2 m)).
Moments lane_welford_at_launch(Builder& b, const MomentsOrder& o, const Arith& ar, const ExprRef& N, const LoadFn& x) {
  const int V = o.lanes, K = o.chunk, S = o.streams;
  const Type vt{ar.t, V};
  auto lt = [](ExprRef a, ExprRef c) { return binary(Op::Lt, std::move(a), std::move(c)); };
  int max_depth = 1;
  for (const int64_t max_chunks = (kMaxLaunchLength / (int64_t(V) * S) + K - 1) / K; (int64_t(1) << max_depth) < max_chunks;) ++max_depth;
  ExprRef n = b.let("vectors", div(N, index_const(int64_t(V) * S)));  // full vectors of V*S elements
  ExprRef m = b.let("chunks", div(add(n, index_const(K - 1)), index_const(K)));
  ExprRef full_chunks = b.let("chunks.full", div(n, index_const(K)));
  ExprRef last_len = b.let("chunk.last", binary(Op::Rem, n, index_const(K)));

  // The scalar tail, with true division.
  WelfordState tail = welford_locals(b, "tail", Type{ar.t, 1});
  welford_zero(b, ar, tail, 1);
  b.for_range("t", mul(n, index_const(int64_t(V) * S)), N, 1, [&](ExprRef t) {
    ExprRef xs = b.let("x", x(t, 1));
    ExprRef d = b.let("d", ar.sub(xs, b.get(tail.mean)));
    b.assign(tail.count, add(b.get(tail.count), index_const(1)));
    b.assign(tail.mean, ar.add(b.get(tail.mean), ar.div(d, ar.count(b.get(tail.count)))));
    b.assign(tail.m2, ar.mul_add(d, ar.sub(xs, b.get(tail.mean)), b.get(tail.m2), o.fma_tail));
  });

  int mu = b.local("mu", vt), s = b.local("s", vt);
  std::vector<WelfordState> stack;
  for (int d = 0; d < max_depth; ++d) stack.push_back(welford_locals(b, fmt::format("stack{}", d), vt));
  for (const WelfordState& level : stack) welford_zero(b, ar, level, V);
  // A chunk of `len` vectors from first_vec: each stream summed and merged into level 0, then the
  // binary-counter carries for chunk index i (level lvl absorbs lvl-1 when 2^lvl divides i+1).
  auto chunk = [&](ExprRef first_vec, ExprRef len, ExprRef i) {
    for (int stream = 0; stream < S; ++stream) {
      auto column = [&](ExprRef vec) { return add(mul(std::move(vec), index_const(int64_t(V) * S)), index_const(int64_t(stream) * V)); };
      b.assign(mu, ar.constant(0.0, V));
      b.assign(s, ar.constant(0.0, V));
      b.for_range("step", index_const(0), len, 1, [&](ExprRef j) {
        ExprRef c = b.let("c", ar.div(ar.constant(1.0), ar.count(add(j, index_const(1)))));
        if (V > 1) c = broadcast(c, V);
        ExprRef xv = b.let("x", x(column(add(first_vec, j)), V));
        ExprRef d = b.let("d", ar.sub(xv, b.get(mu)));
        b.assign(mu, ar.mul_add(d, c, b.get(mu), o.fma_update));
        b.assign(s, ar.mul_add(d, ar.sub(xv, b.get(mu)), b.get(s), o.fma_update));
      });
      welford_merge(b, ar, stack[0], len, b.get(mu), b.get(s), V, o.fma_merge, o.cascade_merge);
    }
    // Nested: a carry into level lvl + 1 needs one into lvl (both conditions only get stricter).
    std::function<void(int)> carry_from = [&](int lvl) {
      if (lvl >= max_depth) return;
      ExprRef carry = binary(Op::Eq, binary(Op::Rem, add(i, index_const(1)), index_const(int64_t(1) << lvl)), index_const(0));
      b.if_(binary(Op::And, carry, lt(index_const(int64_t(1) << lvl), m)), [&] {
        const WelfordState& lo = stack[size_t(lvl - 1)];
        welford_merge(b, ar, stack[size_t(lvl)], b.get(lo.count), b.get(lo.mean), b.get(lo.m2), V, o.fma_merge, o.cascade_merge);
        welford_zero(b, ar, lo, V);
        carry_from(lvl + 1);
      });
    };
    carry_from(1);
  };
  b.for_range("chunk", index_const(0), full_chunks, 1, [&](ExprRef i) { chunk(mul(i, index_const(K)), index_const(K), i); });
  b.if_(lt(index_const(0), last_len), [&] { chunk(mul(full_chunks, index_const(K)), last_len, full_chunks); });
  for (int lvl = 1; lvl < max_depth; ++lvl) {
    b.if_(lt(index_const(int64_t(1) << lvl), m), [&] {
      const WelfordState& hi = stack[size_t(lvl)];
      welford_merge(b, ar, stack[0], b.get(hi.count), b.get(hi.mean), b.get(hi.m2), V, o.fma_merge, o.cascade_merge);
    });
  }
  for (int l = 0; l < V; ++l)
    welford_merge(b, ar, tail, b.get(stack[0].count), extract(b.get(stack[0].mean), l), extract(b.get(stack[0].m2), l), 1, o.fma_merge);
  return {b.get(tail.mean), b.let("var", ar.div(b.get(tail.m2), ar.count(N)))};
}

Moments lane_welford(Builder& b, const MomentsOrder& o, const Arith& ar, int64_t N, const LoadFn& x, bool warp) {
  const Kernel& k = b.kernel();
  const int V = o.lanes, K = o.chunk, S = o.streams;
  const int64_t n = N / (int64_t(V) * S);  // full vectors (of V*S elements: S streams of V lanes)
  const int64_t m = (n + K - 1) / K;       // chunks
  const int64_t full_chunks = n / K;
  int depth = 1;
  if (m > 2) while ((int64_t(1) << depth) < m) ++depth;
  const int W = warp ? 1 : V;  // lanes each thread computes
  const Type vt{ar.t, W};

  // Scalar Welford over the tail, with true division. It reads no cascade state, so the
  // one-thread kernel runs it first; in a warp thread 0 runs it just before the lane fold.
  WelfordState tail = welford_locals(b, "tail", Type{ar.t, 1});
  auto emit_tail = [&] {
    welford_zero(b, ar, tail, 1);
    if (n * V * S == N) return;
    b.for_range("t", index_const(n * V * S), index_const(N), 1, [&](ExprRef t) {
      ExprRef xs = b.let("x", x(t, 1));
      ExprRef d = b.let("d", ar.sub(xs, b.get(tail.mean)));
      b.assign(tail.count, add(b.get(tail.count), index_const(1)));
      b.assign(tail.mean, ar.add(b.get(tail.mean), ar.div(d, ar.count(b.get(tail.count)))));
      b.assign(tail.m2, ar.mul_add(d, ar.sub(xs, b.get(tail.mean)), b.get(tail.m2), o.fma_tail));
    });
  };
  if (!warp) emit_tail();

  // The chunk's step constants 1/(j+1), stated in the IR so their rounding is part of the spec:
  // computed at each step in the one-thread kernel, in team memory in the warp (j+1 in the
  // compute type, divided and rounded like any result).
  int reciprocals_at = -1;
  if (warp) {
    reciprocals_at = b.buffer("welford_reciprocals", ar.t, true, Extent::scratch, K);
    b.team([&](ExprRef tid) {
      b.for_range("j", tid, index_const(K), k.team, [&](ExprRef j) {
        b.store(reciprocals_at, j, ar.div(ar.constant(1.0), ar.count(add(j, index_const(1)))));
      });
    });
  }

  int mu = b.local("mu", vt), s = b.local("s", vt);
  // A chunk's Welford step j over vector first_vec + j, with c = 1/(j+1), into (mu, s); `column`
  // maps a vector index to the element index of the lanes computed here, in the stream being
  // summed. (mu, s) start at 0. The streams of a chunk are independent until they merge, so
  // they run one after the other.
  auto step = [&](const ExprRef& first_vec, ExprRef j, ExprRef c, const std::function<ExprRef(ExprRef)>& column) {
    ExprRef xv = b.let("x", x(column(add(first_vec, std::move(j))), W));
    ExprRef d = b.let("d", ar.sub(xv, b.get(mu)));
    b.assign(mu, ar.mul_add(d, std::move(c), b.get(mu), o.fma_update));
    b.assign(s, ar.mul_add(d, ar.sub(xv, b.get(mu)), b.get(s), o.fma_update));
  };

  if (!warp) {
    std::vector<WelfordState> stack;
    for (int d = 0; d < depth; ++d) stack.push_back(welford_locals(b, fmt::format("stack{}", d), vt));
    for (const WelfordState& level : stack) welford_zero(b, ar, level, W);
    // One chunk: each stream summed and merged into stack level 0, then the carries.
    auto chunk = [&](ExprRef first_vec, int len, const std::function<ExprRef(int)>& carry_cond) {
      for (int stream = 0; stream < S; ++stream) {
        auto column = [&](ExprRef vec) { return add(mul(std::move(vec), index_const(int64_t(V) * S)), index_const(int64_t(stream) * V)); };
        b.assign(mu, ar.constant(0.0, W));
        b.assign(s, ar.constant(0.0, W));
        b.for_range("step", index_const(0), index_const(len), 1, [&](ExprRef j) {
          ExprRef c = b.let("c", ar.div(ar.constant(1.0), ar.count(add(j, index_const(1)))));
          step(first_vec, j, W > 1 ? broadcast(c, W) : c, column);
        });
        welford_merge(b, ar, stack[0], index_const(len), b.get(mu), b.get(s), W, o.fma_merge, o.cascade_merge);
      }
      for (int lvl = 1; lvl < depth; ++lvl) {
        ExprRef cond = carry_cond(lvl);
        if (!cond) break;
        b.if_(cond, [&] {
          const WelfordState& lo = stack[size_t(lvl - 1)];
          welford_merge(b, ar, stack[size_t(lvl)], b.get(lo.count), b.get(lo.mean), b.get(lo.m2), W, o.fma_merge, o.cascade_merge);
          welford_zero(b, ar, lo, W);
        });
      }
    };
    if (full_chunks > 0)
      b.for_range("chunk", index_const(0), index_const(full_chunks), 1, [&](ExprRef i) {
        // Binary-counter carry: level lvl absorbs level lvl-1 when 2^lvl divides i+1.
        chunk(mul(i, index_const(K)), K, [&](int lvl) {
          return binary(Op::Eq, binary(Op::Rem, add(i, index_const(1)), index_const(int64_t(1) << lvl)), index_const(0));
        });
      });
    if (n % K) {
      const int64_t i = full_chunks;
      chunk(index_const(i * K), static_cast<int>(n % K), [&](int lvl) -> ExprRef {
        if ((i + 1) % (int64_t(1) << lvl) != 0) return nullptr;  // the carry stops at the first odd level
        return constant(Type{ScalarType::boolean, 1}, 1);
      });
    }
    for (int lvl = 1; lvl < depth; ++lvl) {
      const WelfordState& hi = stack[size_t(lvl)];
      welford_merge(b, ar, stack[0], b.get(hi.count), b.get(hi.mean), b.get(hi.m2), W, o.fma_merge, o.cascade_merge);
    }
    // Lane fold: each lane's (n, mean, M2) merged into the tail accumulator, in lane order.
    for (int l = 0; l < V; ++l)
      welford_merge(b, ar, tail, b.get(stack[0].count), extract(b.get(stack[0].mean), l), extract(b.get(stack[0].m2), l), 1,
                    o.fma_merge);
    return {b.get(tail.mean), b.let("var", ar.div(b.get(tail.m2), ar.count(index_const(N))))};
  }

  // The warp. Team memory holds the stack, each thread its own lane's slots: slot L of lane t
  // at L*V + t, where slots 1..depth are the stack's levels 0..depth-1 (slot 0 is not used).
  // A chunk merges each stream's (len, mu, s) into slot 1, then runs one loop over the slots:
  // slot L >= 2 absorbs slot L-1 when 2^(L-1) divides i+1, which empties slot L-1. The last,
  // shorter chunk (n % K vectors) runs in the same loop with its own length.
  const int64_t slots = int64_t(depth + 1) * V;
  const int stack_n_at = b.buffer("welford_stack_n", ScalarType::i64, true, Extent::scratch, slots);
  const int stack_mean_at = b.buffer("welford_stack_mean", ar.t, true, Extent::scratch, slots);
  const int stack_m2_at = b.buffer("welford_stack_m2", ar.t, true, Extent::scratch, slots);
  std::vector<int64_t> masks;  // 2^(L-1) - 1 at L: slot L absorbs slot L-1 when i+1 has no bit of it
  masks.push_back(0);          // (L = 0 is never read)
  for (int L = 1; L <= depth; ++L) masks.push_back((int64_t(1) << (L - 1)) - 1);
  const int masks_at = b.table(masks);
  const WelfordState slot_value = welford_locals(b, "level", vt);
  auto store_slot = [&](ExprRef at, ExprRef count, ExprRef mean, ExprRef m2) {
    b.store(stack_n_at, at, std::move(count));
    b.store(stack_mean_at, at, std::move(mean));
    b.store(stack_m2_at, at, std::move(m2));
  };
  // Merges (count, mean, m2) into the slot at `at`, through the locals slot_value.
  auto merge_into_slot = [&](const ExprRef& at, ExprRef count, ExprRef mean, ExprRef m2) {
    b.assign(slot_value.count, load(k, stack_n_at, at));
    b.assign(slot_value.mean, load(k, stack_mean_at, at));
    b.assign(slot_value.m2, load(k, stack_m2_at, at));
    welford_merge(b, ar, slot_value, std::move(count), std::move(mean), std::move(m2), W, o.fma_merge, o.cascade_merge);
    store_slot(at, b.get(slot_value.count), b.get(slot_value.mean), b.get(slot_value.m2));
  };
  auto merge_slot = [&](const ExprRef& at, const ExprRef& from) {
    merge_into_slot(at, load(k, stack_n_at, from), load(k, stack_mean_at, from), load(k, stack_m2_at, from));
  };
  b.team([&](ExprRef tid) {
    b.if_(binary(Op::Lt, tid, index_const(V)), [&] {
      auto slot = [&](ExprRef L) { return add(mul(std::move(L), index_const(V)), tid); };
      b.for_range("slot", index_const(1), index_const(depth + 1), 1,
                  [&](ExprRef L) { store_slot(slot(L), index_const(0), ar.constant(0.0), ar.constant(0.0)); });
      if (m > 0) {  // no loop that never runs: NVVM deletes it, and test_cuda_static counts IR fmas
        b.for_range("chunk", index_const(0), index_const(m), 1, [&](ExprRef i) {
          ExprRef first_vec = b.let("chunk.first", mul(i, index_const(K)));
          ExprRef len = b.let("chunk.len", binary(Op::Min, index_const(K), sub(index_const(n), first_vec)));
          for (int stream = 0; stream < S; ++stream) {
            auto column = [&](ExprRef vec) {
              return add(mul(std::move(vec), index_const(int64_t(V) * S)), add(index_const(int64_t(stream) * V), tid));
            };
            b.assign(mu, ar.constant(0.0));
            b.assign(s, ar.constant(0.0));
            b.for_range("step", index_const(0), len, 1, [&](ExprRef j) { step(first_vec, j, load(k, reciprocals_at, j), column); });
            merge_into_slot(slot(index_const(1)), len, b.get(mu), b.get(s));
          }
          if (depth > 1) b.for_range("slot", index_const(2), index_const(depth + 1), 1, [&](ExprRef L) {
            b.if_(binary(Op::Eq, binary(Op::BitAnd, add(i, index_const(1)), table(masks_at, L)), index_const(0)), [&] {
              ExprRef lower = b.let("lower", slot(sub(L, index_const(1))));
              merge_slot(slot(L), lower);
              store_slot(lower, index_const(0), ar.constant(0.0), ar.constant(0.0));
            });
          });
        });
      }
      // Levels 1..depth-1 merged into level 0, in order.
      if (depth > 1)
        b.for_range("slot", index_const(2), index_const(depth + 1), 1, [&](ExprRef L) { merge_slot(slot(index_const(1)), slot(L)); });
    });
  });
  // The fold on thread 0: level 0 of lanes 0..V-1 is at V..2V-1. Published through team memory.
  const int mean_at = b.buffer("welford_mean", ar.t, true, Extent::scratch, 1);
  const int var_at = b.buffer("welford_var", ar.t, true, Extent::scratch, 1);
  b.team([&](ExprRef tid) {
    b.if_(binary(Op::Eq, tid, index_const(0)), [&] {
      emit_tail();
      b.for_range("lane", index_const(V), index_const(2 * V), 1, [&](ExprRef at) {
        welford_merge(b, ar, tail, load(k, stack_n_at, at), load(k, stack_mean_at, at), load(k, stack_m2_at, at), 1, o.fma_merge);
      });
      b.store(mean_at, index_const(0), b.get(tail.mean));
      b.store(var_at, index_const(0), ar.div(b.get(tail.m2), ar.count(index_const(N))));
    });
  });
  const int mean = b.local("mean", Type{ar.t, 1}), var = b.local("var", Type{ar.t, 1});
  b.team([&](ExprRef) {
    b.assign(mean, load(k, mean_at, index_const(0)));
    b.assign(var, load(k, var_at, index_const(0)));
  });
  return {b.get(mean), b.get(var)};
}

Moments sequential_welford(Builder& b, const Arith& ar, const Length& N, const LoadFn& x) {
  int mean = b.local("mean", Type{ar.t, 1}), m2 = b.local("m2", Type{ar.t, 1});
  b.assign(mean, ar.constant(0.0));
  b.assign(m2, ar.constant(0.0));
  b.for_range("i", index_const(0), N.expr(), 1, [&](ExprRef i) {
    ExprRef xs = b.let("x", x(i, 1));
    ExprRef d = b.let("d", ar.sub(xs, b.get(mean)));
    b.assign(mean, ar.add(b.get(mean), ar.div(d, ar.count(add(i, index_const(1))))));
    b.assign(m2, ar.add(b.get(m2), ar.mul(d, ar.sub(xs, b.get(mean)))));
  });
  return {b.get(mean), b.let("var", ar.div(b.get(m2), ar.count(N.expr())))};
}

// The two passes of a TwoPass order that sums both in one order and one type, as one loop over
// pass = 0, 1 around one copy of the sum. Pass 0's term is x*1, pass 1's (x-mean)*(x-mean).
// x*1 is x, exactly (x came from storage, and round_to is that storage type), and x*1 + acc is
// acc + x, fused or not; so pass 0 sums what the written-out sum(x) sums, in the same order.
// Each pass ends with the division by N: pass 0's is the mean, pass 1's the variance.
Moments two_passes_as_loop(Builder& b, const MomentsOrder& o, const Arith& ar, int64_t N, const LoadFn& x) {
  const int mean = b.local("mean", Type{ar.t, 1}), var = b.local("var", Type{ar.t, 1});
  b.assign(mean, ar.constant(0.0));  // read (and discarded) by pass 0's unused deviations
  b.for_range("pass", index_const(0), index_const(2), 1, [&](ExprRef pass) {
    ExprRef sum_x = binary(Op::Eq, pass, index_const(0));
    ExprRef total = emit_sum(b, o.sum, ar, N, [&](ExprRef i, int lanes) {
      auto lanewise = [&](ExprRef e) { return lanes > 1 ? broadcast(std::move(e), lanes) : e; };
      ExprRef v = x(std::move(i), lanes);
      ExprRef d = ar.sub(v, lanewise(b.get(mean)));
      ExprRef first = lanewise(sum_x);
      return Term{select(first, v, d), select(first, ar.constant(1.0, lanes), d)};
    }, "pass 0: sum(x*1), pass 1: sum((x-mean)^2)");
    ExprRef moment = b.let("moment", ar.div(total, ar.count(index_const(N))));
    b.assign(mean, select(sum_x, moment, b.get(mean)));
    b.assign(var, moment);
  });
  return {b.get(mean), b.get(var)};
}


// Inductor's Welford (MomentsOrder::Kind::VectorWelford): a state of `lanes` lane streams with
// float weights, and the step count `n` every lane shares (Inductor's `index`).
struct WeightedWelford {
  ExprRef mean, m2, w, n;
};

WeightedWelford weighted_empty(const Arith& ar, int lanes) {
  return {ar.constant(0.0, lanes), ar.constant(0.0, lanes), ar.constant(0.0, lanes), index_const(0)};
}

// welford_combine(a, b): an empty side (n == 0) gives the other; else, lane-wise,
// d = b.mean - a.mean (0 where the means are equal), r = wb / (wa + wb) (0 where that sum is 0),
// mean = a.mean + d*r, m2 = (a.m2 + b.m2) + ((d*d)*wa)*r.
WeightedWelford weighted_merge(Builder& b, const Arith& ar, const WeightedWelford& A, const WeightedWelford& B) {
  const int L = A.mean->type.lanes;
  auto lanewise = [&](ExprRef c) { return L > 1 ? broadcast(std::move(c), L) : c; };
  ExprRef zero = ar.constant(0.0, L);
  ExprRef d = b.let("merge.d", select(binary(Op::Eq, A.mean, B.mean), zero, ar.sub(B.mean, A.mean)));
  ExprRef w = b.let("merge.w", ar.add(A.w, B.w));
  ExprRef r = b.let("merge.r", select(binary(Op::Eq, w, zero), zero, ar.div(B.w, w)));
  ExprRef mean = ar.add(A.mean, ar.mul(d, r));
  ExprRef m2 = ar.add(ar.add(A.m2, B.m2), ar.mul(ar.mul(ar.mul(d, d), A.w), r));
  ExprRef a_empty = lanewise(binary(Op::Eq, A.n, index_const(0))), b_empty = lanewise(binary(Op::Eq, B.n, index_const(0)));
  auto pick = [&](ExprRef merged, const ExprRef& a, const ExprRef& bv) { return select(a_empty, bv, select(b_empty, a, std::move(merged))); };
  return {b.let("merged.mean", pick(mean, A.mean, B.mean)), b.let("merged.m2", pick(m2, A.m2, B.m2)),
          b.let("merged.w", pick(w, A.w, B.w)), b.let("merged.n", add(A.n, B.n))};
}

struct WeightedLocals {
  int mean, m2, w, n;
  WeightedWelford get(Builder& b) const { return {b.get(mean), b.get(m2), b.get(w), b.get(n)}; }
  void set(Builder& b, const WeightedWelford& v) const {
    b.assign(mean, v.mean);
    b.assign(m2, v.m2);
    b.assign(w, v.w);
    b.assign(n, v.n);
  }
};

WeightedLocals weighted_locals(Builder& b, const Arith& ar, const std::string& name, int lanes) {
  WeightedLocals s{b.local(name + ".mean", Type{ar.t, lanes}), b.local(name + ".m2", Type{ar.t, lanes}),
                   b.local(name + ".w", Type{ar.t, lanes}), b.local(name + ".n", Type{ScalarType::i64, 1})};
  s.set(b, weighted_empty(ar, lanes));
  return s;
}

// A state's lanes folded to lane 0, as welford_vec_reduce_all runs on AVX2/AVX-512: the streams
// (lanes [0,V) and [V,2V)) merge first; then per group of four lanes merge(merge(l0, l3),
// merge(l2, l1)) (vec_shuffle_down(1) is _mm*_permute_ps(1,1,3,3)); then the groups merge as
// neighbours ((g0 g1) (g2 g3)). The result's count is its weight.
WeightedWelford weighted_fold(Builder& b, const Arith& ar, std::vector<WeightedWelford> v, ExprRef count, int V, int streams) {
  if (streams > 1)
    for (int l = 0; l < V; ++l) v[size_t(l)] = weighted_merge(b, ar, v[size_t(l)], v[size_t(l + V)]);
  std::vector<WeightedWelford> groups;
  for (int g = 0; g + 3 < V; g += 4)
    groups.push_back(weighted_merge(b, ar, weighted_merge(b, ar, v[size_t(g)], v[size_t(g + 3)]),
                                    weighted_merge(b, ar, v[size_t(g + 2)], v[size_t(g + 1)])));
  while (groups.size() > 1) {
    std::vector<WeightedWelford> next;
    for (size_t i = 0; i + 1 < groups.size(); i += 2) next.push_back(weighted_merge(b, ar, groups[i], groups[i + 1]));
    groups = std::move(next);
  }
  WeightedWelford out = groups[0];
  // An empty state folds to the empty scalar state (welford_vec_reduce_all's early return).
  ExprRef empty = binary(Op::Eq, count, index_const(0));
  out.mean = b.let("fold.mean", select(empty, ar.constant(0.0), out.mean));
  out.m2 = b.let("fold.m2", select(empty, ar.constant(0.0), out.m2));
  out.w = b.let("fold.w", select(empty, ar.constant(0.0), out.w));
  // Inductor sets the count to the weight; only whether it is 0 is ever read after the fold.
  out.n = b.let("fold.n", select(binary(Op::Eq, out.w, ar.constant(0.0)), index_const(0), index_const(1)));
  return out;
}

// The lanes of a vector state, each a scalar state with the shared count.
std::vector<WeightedWelford> weighted_lanes(const WeightedWelford& s) {
  std::vector<WeightedWelford> out;
  for (int l = 0; l < s.mean->type.lanes; ++l) out.push_back({extract(s.mean, l), extract(s.m2, l), extract(s.w, l), s.n});
  return out;
}

Moments vector_welford(Builder& b, const MomentsOrder& o, const Arith& ar, int64_t N, const LoadFn& x) {
  const int V = o.lanes, S = std::max(o.streams, 1), L = V * S, P = std::max(o.parts, 1);
  const int64_t C = o.chunk, nvec = N / L, r = N % L, iters = nvec + (r ? 1 : 0);
  // One thread's part: `count` vectors from `first`, through a WelfordHelper sized for
  // `sized_for` vectors (its stack depth). Past its table of 4096 reciprocals (a part longer than
  // its helper's size, whose stack then never flushes) a step divides by the weight instead.
  auto run_part = [&](int64_t first, int64_t count, const std::string& name, int64_t sized_for) {
    const int64_t depth = ceil_log2_u64((sized_for + C - 1) / C);
    WeightedLocals acc = weighted_locals(b, ar, name, L);
    std::vector<WeightedLocals> stack;
    for (int64_t l = 0; l < depth; ++l) stack.push_back(weighted_locals(b, ar, fmt::format("{}.level{}", name, l), L));
    auto steps = [&](ExprRef from, ExprRef to, int64_t j0, bool divide) {  // vectors [from, to), the first with j = j0
      b.for_range("v", from, to, 1, [&](ExprRef v) {
        ExprRef xv = b.let("x", x(mul(v, index_const(L)), L));
        WeightedWelford s = acc.get(b);
        ExprRef j = add(sub(v, from), index_const(j0));
        ExprRef d = b.let("d", ar.sub(xv, s.mean));
        ExprRef step;
        if (divide) {
          step = ar.div(d, ar.add(s.w, ar.constant(1.0, L)));
        } else {
          ExprRef recp = b.let("recp", ar.div(ar.constant(1.0), ar.count(add(j, index_const(1)))));
          step = ar.mul(d, broadcast(recp, L));
        }
        ExprRef mean = b.let("mean", ar.add(s.mean, step));
        acc.set(b, {mean, ar.add(s.m2, ar.mul(d, ar.sub(xv, mean))), ar.add(s.w, ar.constant(1.0, L)), add(s.n, index_const(1))});
      });
    };
    auto flush = [&](ExprRef done) {  // a full chunk into level 0, then the binary counter's carries
      stack[0].set(b, weighted_merge(b, ar, stack[0].get(b), acc.get(b)));
      acc.set(b, weighted_empty(ar, L));
      std::function<void(int64_t)> carry = [&](int64_t l) {
        if (l >= depth) return;
        b.if_(binary(Op::Eq, binary(Op::Rem, done, index_const(int64_t(1) << l)), index_const(0)), [&] {
          stack[size_t(l)].set(b, weighted_merge(b, ar, stack[size_t(l)].get(b), stack[size_t(l - 1)].get(b)));
          stack[size_t(l - 1)].set(b, weighted_empty(ar, L));
          carry(l + 1);
        });
      };
      carry(1);
    };
    if (depth == 0) {
      const int64_t tabled = std::min(count, C);
      if (tabled > 0) steps(index_const(first), index_const(first + tabled), 0, false);
      if (count > C) steps(index_const(first + C), index_const(first + count), C, true);
    } else {
      const int64_t full = count / C;
      b.for_range("chunk", index_const(0), index_const(full), 1, [&](ExprRef c) {
        b.if_(binary(Op::Lt, index_const(0), c), [&] { flush(c); });
        ExprRef from = add(index_const(first), mul(c, index_const(C)));
        steps(from, add(from, index_const(C)), 0, false);
      });
      if (count % C) {
        flush(index_const(full));
        steps(index_const(first + full * C), index_const(first + count), 0, false);
      }
    }
    WeightedWelford out = acc.get(b);
    for (int64_t l = 0; l < depth; ++l) out = weighted_merge(b, ar, out, stack[size_t(l)].get(b));
    return out;
  };
  // The tail: one step from the empty state in lanes 0..r-1 (weight 1), the other lanes empty;
  // its count is 1. It sits in the part that runs the last step, and merging it into the other
  // parts' empty tails gives it unchanged.
  std::vector<WeightedWelford> tail;
  for (int l = 0; l < L; ++l) {
    if (l < r) {
      ExprRef xv = b.let("x.tail", x(index_const(nvec * L + l), 1));
      ExprRef d = ar.sub(xv, ar.constant(0.0));
      ExprRef mu = b.let("tail.mean", ar.add(ar.constant(0.0), ar.mul(d, ar.constant(1.0))));
      tail.push_back({mu, b.let("tail.m2", ar.add(ar.constant(0.0), ar.mul(d, ar.sub(xv, mu)))), ar.constant(1.0), index_const(1)});
    } else {
      tail.push_back({ar.constant(0.0), ar.constant(0.0), ar.constant(0.0), index_const(r ? 1 : 0)});
    }
  }
  const WeightedLocals full_at = weighted_locals(b, ar, "full", L);
  auto whole = [&] { full_at.set(b, run_part(0, nvec, "acc", nvec)); };
  auto split = [&] {
    WeightedWelford merged = weighted_empty(ar, L);
    for (int p = 0; p < P; ++p) {
      const auto [begin, count] = static_schedule(iters, P, p);
      const int64_t vectors = std::max<int64_t>(0, std::min(begin + count, nvec) - begin);
      merged = weighted_merge(b, ar, merged, run_part(begin, vectors, fmt::format("part{}", p), (nvec + P - 1) / P));
    }
    full_at.set(b, merged);
  };
  if (ExprRef splits = split_launch(P, N, L)) b.if_else(splits, split, whole);
  else whole();
  const WeightedWelford full = full_at.get(b);
  WeightedWelford row = weighted_merge(b, ar, weighted_empty(ar, 1), weighted_fold(b, ar, tail, index_const(r ? 1 : 0), V, S));
  row = weighted_merge(b, ar, row, weighted_fold(b, ar, weighted_lanes(full), full.n, V, S));
  return {b.let("mean", row.mean), b.let("var", ar.div(row.m2, ar.count(index_const(N))))};
}

// Inductor's var_mean: two-pass for a row of N <= two_pass_max_n in a launch of several rows, else
// its Welford.
Moments two_pass_moments(Builder& b, const MomentsOrder& o, const Arith& ar, const Length& N, const LoadFn& x);

Moments vector_welford_or_two_pass(Builder& b, const MomentsOrder& o, const Arith& ar, int64_t N, const LoadFn& x) {
  if (N > o.two_pass_max_n) return vector_welford(b, o, ar, N, x);
  const int mean = b.local("mean", Type{ar.t, 1}), var = b.local("var", Type{ar.t, 1});
  b.if_else(
      single_row_launch(),
      [&] {
        Moments m = vector_welford(b, o, ar, N, x);
        b.assign(mean, m.mean);
        b.assign(var, m.var);
      },
      [&] {
        Moments m = two_pass_moments(b, o, ar, N, x);
        b.assign(mean, m.mean);
        b.assign(var, m.var);
      });
  return {b.get(mean), b.get(var)};
}

Moments two_pass_moments(Builder& b, const MomentsOrder& o, const Arith& ar, const Length& N, const LoadFn& x) {
  ExprRef total = emit_sum(b, o.sum, ar, N, [&](ExprRef i, int lanes) { return Term{x(i, lanes), nullptr}; }, "sum(x)");
  ExprRef mean = b.let("mean", ar.div(total, ar.count(N.expr())));
  const Arith dev{o.dev_acc.value_or(ar.t), ar.round_to};
  ExprRef dev_mean = dev.t == ar.t ? mean : b.let("mean.dev", cast(mean, dev.t));
  auto x_dev = [&](ExprRef i, int lanes) {  // exact: x came from storage no wider than f32
    ExprRef v = x(std::move(i), lanes);
    return v->type.scalar == dev.t ? v : cast(v, dev.t);
  };
  ExprRef m2 = emit_sum(b, o.dev_sum.value_or(o.sum), dev, N, [&](ExprRef i, int lanes) {
    ExprRef mb = lanes > 1 ? broadcast(dev_mean, lanes) : dev_mean;
    ExprRef d = dev.sub(x_dev(i, lanes), mb);
    return Term{d, d};
  }, "sum((x-mean)^2)");
  return {mean, b.let("var", dev.div(m2, dev.count(N.expr())))};
}

}  // namespace

Moments emit_moments(Builder& b, const MomentsOrder& o, const Arith& ar, const Length& length, const LoadFn& x, bool passes_as_loop) {
  Moments out;
  if (!length.is_fixed()) {
    b.region("moments", describe(o), [&] {
      switch (o.kind) {
        case MomentsOrder::Kind::TwoPass: out = two_pass_moments(b, o, ar, length, x); break;
        case MomentsOrder::Kind::LaneWelford: out = lane_welford_at_launch(b, o, ar, length.at_launch, x); break;
        case MomentsOrder::Kind::SequentialWelford: out = sequential_welford(b, ar, length, x); break;
        default: throw Error(fmt::format("internal: {} moments over a length given at launch", describe(o)));
      }
    });
    return out;
  }
  const int64_t N = length.fixed;
  b.region("moments", describe(o), [&] {
    switch (o.kind) {
      case MomentsOrder::Kind::LaneWelford: out = lane_welford(b, o, ar, N, x, false); break;
      case MomentsOrder::Kind::SequentialWelford: out = sequential_welford(b, ar, N, x); break;
      case MomentsOrder::Kind::VectorWelford: out = vector_welford_or_two_pass(b, o, ar, N, x); break;
      case MomentsOrder::Kind::TwoPass: {
        if (passes_as_loop && !o.dev_acc && !o.dev_sum) {
          out = two_passes_as_loop(b, o, ar, N, x);
          break;
        }
        out = two_pass_moments(b, o, ar, N, x);
        break;
      }
      case MomentsOrder::Kind::OnePass: {
        ExprRef total = emit_sum(b, o.sum, ar, N, [&](ExprRef i, int lanes) { return Term{x(i, lanes), nullptr}; }, "sum(x)");
        ExprRef squares = emit_sum(b, o.sum, ar, N, [&](ExprRef i, int lanes) {
          ExprRef v = x(i, lanes);
          return Term{v, v};
        }, "sum(x*x)");
        ExprRef mean = b.let("mean", ar.div(total, ar.count(index_const(N))));
        ExprRef ex2 = ar.div(squares, ar.count(index_const(N)));
        out = {mean, b.let("var", binary(Op::Max, ar.sub(ex2, ar.mul(mean, mean)), ar.constant(0.0)))};
        break;
      }
      case MomentsOrder::Kind::BlockWelford:  // team kernels of their own (gen/ops/team.cpp)
      case MomentsOrder::Kind::BlockReduceWelford:
        throw Error(fmt::format("internal: {} moments reached the single-thread expansion", describe(o)));
    }
  });
  return out;
}

Moments emit_lane_welford_warp(Builder& b, const MomentsOrder& o, const Arith& ar, int64_t N, const LoadFn& x) {
  Moments out;
  b.region("moments", describe(o) + ", a lane per thread of one warp", [&] { out = lane_welford(b, o, ar, N, x, true); });
  return out;
}

}  // namespace ordo::gen
