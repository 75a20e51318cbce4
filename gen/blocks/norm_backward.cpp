// PyTorch's vectorized row reductions and the column stage of the normalization backward ops
// (gen/blocks/norm_backward.hpp).
#include "gen/blocks/constants.hpp"
#include "gen/blocks/norm_backward.hpp"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <thread>

#include "gen/blocks/warp.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr ScalarType f32 = ScalarType::f32, i64 = ScalarType::i64;


// The lanes of a vector as scalar locals.
std::vector<ExprRef> lanes_of(Builder& b, const ExprRef& v, const std::string& name) {
  std::vector<ExprRef> out;
  for (int l = 0; l < v->type.lanes; ++l) out.push_back(b.let(name, extract(v, l)));
  return out;
}

ExprRef plain_accumulate(const ExprRef& acc, const Term& t, bool fuse) {
  if (!t.b) return add(acc, t.a);
  return fuse ? fma(t.a, t.b, acc) : add(acc, mul(t.a, t.b));
}
ExprRef first_of(const Term& t) { return t.b ? mul(t.a, t.b) : t.a; }

// Terms 0..n-1 summed in order from the first.
ExprRef sequential(Builder& b, int64_t n, const TermFn& term, const std::string& label) {
  int acc = b.local(label, Type{f32, 1});
  b.assign(acc, first_of(term(index_const(0), 1)));
  for (int64_t i = 1; i < n; ++i) b.assign(acc, add(b.get(acc), first_of(term(index_const(i), 1))));
  return b.get(acc);
}

}  // namespace

std::vector<ExprRef> emit_vec_reduce_all(Builder& b, const VecReduceAll& o, int64_t n, const std::vector<LabelledTerm>& sums) {
  std::vector<ExprRef> result(sums.size());
  const int V = o.lanes;
  const std::string note = fmt::format("vec_reduce_all(lanes={}{}, fold={}, loop {}, tail {})", V, o.split16 ? " x2 (16-bit input)" : "",
                                       o.fold == LaneFold::Halving ? "halving" : "sequential", o.fma_loop ? "fma" : "mul+add",
                                       o.fma_tail ? "fma" : "mul+add");
  const Arith ar{f32, std::nullopt};
  std::string region = sums.at(0).label;
  for (size_t s = 1; s < sums.size(); ++s) region += ", " + sums[s].label;
  b.region(region, note, [&] {
    const int64_t block = o.split16 ? 2 * V : V;
    if (n < V || (o.split16 && n == V)) {
      for (size_t s = 0; s < sums.size(); ++s) result[s] = sequential(b, n, sums[s].term, sums[s].label);
      return;
    }
    if (n < block) {  // 16-bit input, V < n < 2V
      for (size_t s = 0; s < sums.size(); ++s) {
        const TermFn& term = sums[s].term;
        const std::string& label = sums[s].label;
        std::vector<ExprRef> d0 = lanes_of(b, b.let(label + ".v0", first_of(term(index_const(0), V))), label + ".lane");
        for (int64_t l = 0; l < n - V; ++l)
          d0[size_t(l)] = b.let(label + ".lane", plain_accumulate(d0[size_t(l)], term(index_const(V + l), 1), o.fma_small));
        result[s] = b.let(label, fold_lanes(d0, o.small_fold_by_tree ? o.fold : LaneFold::Sequential, ar));
      }
      return;
    }
    // Every sum's accumulators step in one loop: each sum's operations and their order are
    // its own, so the sums come out as they would one after the other, and the row is read once.
    const int64_t whole = n / block;
    std::vector<int> acc0(sums.size()), acc1(sums.size(), -1);
    for (size_t s = 0; s < sums.size(); ++s) {
      acc0[s] = b.local(sums[s].label + ".acc0", Type{f32, V});
      if (o.split16) acc1[s] = b.local(sums[s].label + ".acc1", Type{f32, V});
      b.assign(acc0[s], first_of(sums[s].term(index_const(0), V)));
      if (o.split16) b.assign(acc1[s], first_of(sums[s].term(index_const(V), V)));
    }
    if (whole > 1)
      b.for_range("col", index_const(block), index_const(whole * block), block, [&](ExprRef col) {
        for (size_t s = 0; s < sums.size(); ++s) {
          b.assign(acc0[s], plain_accumulate(b.get(acc0[s]), sums[s].term(col, V), o.fma_loop));
          if (o.split16) b.assign(acc1[s], plain_accumulate(b.get(acc1[s]), sums[s].term(add(col, index_const(V)), V), o.fma_loop));
        }
      });
    const int64_t tail = n - whole * block, at = whole * block;
    for (size_t s = 0; s < sums.size(); ++s) {
      const TermFn& term = sums[s].term;
      const std::string& label = sums[s].label;
      // A 16-bit tail of more than V terms fills acc0's vector whole.
      if (o.split16 && tail > V) b.assign(acc0[s], plain_accumulate(b.get(acc0[s]), term(index_const(at), V), o.fma_tail));
      std::vector<ExprRef> lanes0 = lanes_of(b, b.get(acc0[s]), label + ".lane0");
      std::vector<ExprRef> lanes1 = o.split16 ? lanes_of(b, b.get(acc1[s]), label + ".lane1") : std::vector<ExprRef>{};
      // The masked tail: lanes 0..count-1 of one accumulator take a term each.
      auto masked = [&](std::vector<ExprRef>& lanes, int64_t first, int64_t count) {
        for (int64_t l = 0; l < count; ++l)
          lanes[size_t(l)] = b.let(label + ".lane", plain_accumulate(lanes[size_t(l)], term(index_const(first + l), 1), o.fma_tail));
      };
      if (o.split16 && tail > V) masked(lanes1, at + V, tail - V);
      else if (tail > 0) masked(lanes0, at, tail);
      if (o.split16)
        for (int l = 0; l < V; ++l) lanes0[size_t(l)] = b.let(label + ".lane", add(lanes0[size_t(l)], lanes1[size_t(l)]));
      result[s] = b.let(label, fold_lanes(lanes0, o.fold, ar));
    }
  });
  return result;
}

ExprRef emit_vec_reduce_all(Builder& b, const VecReduceAll& o, int64_t n, const TermFn& term, const std::string& label) {
  return emit_vec_reduce_all(b, o, n, {LabelledTerm{term, label}}).at(0);
}

ExprRef ColumnRow::load(int buffer) const {
  const Kernel& k = b.kernel();
  if (row->type.lanes > 1) {
    ExprRef v = gather(k, buffer, add(mul(row, broadcast(index_const(n), lanes)), broadcast(first_col, lanes)));
    return v->type.scalar == f32 ? v : cast(v, f32);
  }
  ExprRef base = mul(row, index_const(n));
  ExprRef v = cols ? gather(k, buffer, add(broadcast(base, lanes), cols)) : ir::load(k, buffer, add(base, first_col), lanes);
  return v->type.scalar == f32 ? v : cast(v, f32);
}

ExprRef ColumnRow::stat(int buffer) const {
  ExprRef v = ir::load(b.kernel(), buffer, row);
  return v->type.scalar == f32 ? v : cast(v, f32);
}

ExprRef ColumnRow::stat_lanes(int buffer) const {
  if (row->type.lanes > 1) {
    ExprRef v = gather(b.kernel(), buffer, row);
    return v->type.scalar == f32 ? v : cast(v, f32);
  }
  ExprRef v = stat(buffer);
  return lanes > 1 ? broadcast(v, lanes) : v;
}

namespace {

using RowAt = std::function<ColumnRow(ExprRef)>;

// acc[s] = sums[s].accumulate(row, acc[s]) for every sum.
void accumulate_row(Builder& b, const std::vector<ColumnSum>& sums, const ColumnRow& cr, const std::vector<int>& acc) {
  for (size_t s = 0; s < sums.size(); ++s) b.assign(acc[s], sums[s].accumulate(cr, b.get(acc[s])));
}

// The control flow of SumKernel's multi_row_sum over rows 0 .. count-1, for levels A0..A3 that
// start at +0: add_row(i) adds row i to A0; after each group of L rows carry(0, 1), after every L
// groups carry(1, 2), after every L*L carry(2, 3) (carry(from, to): A[to] += A[from], A[from] =
// +0); the rows past the last whole group go to A0. The callers own the levels' storage.
void cascade_walk(Builder& b, ExprRef count, const std::function<void(ExprRef)>& add_row, const std::function<void(int, int)>& carry) {
  // L = 2^P, P = max(4, ceil(log2 m) / 4): P >= t exactly when m - 1 >= 2^(4t - 1).
  ExprRef m1 = b.let("cascade_m1", sub(count, index_const(1)));
  ExprRef L = index_const(16);
  for (int t = 5; t <= 15; ++t) L = select(binary(Op::Le, index_const(int64_t(1) << (4 * t - 1)), m1), index_const(int64_t(1) << t), L);
  L = b.let("level_rows", L);
  ExprRef LL = b.let("level_rows2", mul(L, L));
  ExprRef groups = b.let("level_groups", div(count, L));
  b.for_range("group", index_const(0), groups, 1, [&](ExprRef g) {
    ExprRef first = mul(g, L);
    b.for_range("row", first, add(first, L), 1, add_row);
    carry(0, 1);
    ExprRef done = add(g, index_const(1));
    b.if_(binary(Op::Eq, binary(Op::Rem, done, L), index_const(0)), [&] {
      carry(1, 2);
      b.if_(binary(Op::Eq, binary(Op::Rem, done, LL), index_const(0)), [&] { carry(2, 3); });
    });
  });
  b.for_range("row", mul(groups, L), count, 1, add_row);
}

// ColumnSumOrder::LevelCascade's cascade over rows at(0) .. at(count-1) into result[s] (locals of
// type vec): SumKernel's multi_row_sum.
void level_cascade(Builder& b, const std::vector<ColumnSum>& sums, ExprRef count, const RowAt& at, Type vec,
                   const std::vector<int>& result) {
  std::vector<std::array<int, 4>> A(sums.size());
  const ExprRef zero = vec.lanes > 1 ? broadcast(constant(Type{f32, 1}, 0.0), vec.lanes) : constant(Type{f32, 1}, 0.0);
  for (size_t s = 0; s < sums.size(); ++s)
    for (int l = 0; l < 4; ++l) {
      A[s][size_t(l)] = b.local(fmt::format("{}.A{}", sums[s].label, l), vec);
      b.assign(A[s][size_t(l)], zero);
    }
  auto level = [&](int l) {
    std::vector<int> v;
    for (auto& a : A) v.push_back(a[size_t(l)]);
    return v;
  };
  // A[to] += A[from]; A[from] = +0.
  auto carry = [&](int from, int to) {
    for (auto& a : A) {
      b.assign(a[size_t(to)], add(b.get(a[size_t(to)]), b.get(a[size_t(from)])));
      b.assign(a[size_t(from)], zero);
    }
  };
  cascade_walk(b, count, [&](ExprRef i) { accumulate_row(b, sums, at(i), level(0)); }, carry);
  for (size_t s = 0; s < sums.size(); ++s)
    b.assign(result[s], add(add(add(b.get(A[s][0]), b.get(A[s][1])), b.get(A[s][2])), b.get(A[s][3])));
}

// The interleaved form (SumKernel's row_sum): rows at(4i + k) into partial k by the cascade, the
// count mod 4 leftovers into partial 0, ((P0 + P1) + P2) + P3.
void interleaved_cascade(Builder& b, const std::vector<ColumnSum>& sums, ExprRef count, const RowAt& at, Type vec,
                         const std::vector<int>& result) {
  ExprRef quads = b.let("quads", div(count, index_const(4)));
  std::vector<std::array<int, 4>> P(sums.size());
  for (int k = 0; k < 4; ++k) {
    std::vector<int> part;
    for (size_t s = 0; s < sums.size(); ++s) {
      P[s][size_t(k)] = b.local(fmt::format("{}.P{}", sums[s].label, k), vec);
      part.push_back(P[s][size_t(k)]);
    }
    level_cascade(b, sums, quads, [&, k](ExprRef i) { return at(add(mul(i, index_const(4)), index_const(k))); }, vec, part);
  }
  std::vector<int> p0;
  for (auto& p : P) p0.push_back(p[0]);
  b.for_range("row", mul(quads, index_const(4)), count, 1, [&](ExprRef i) { accumulate_row(b, sums, at(i), p0); });
  for (size_t s = 0; s < sums.size(); ++s)
    b.assign(result[s], add(add(add(b.get(P[s][0]), b.get(P[s][1])), b.get(P[s][2])), b.get(P[s][3])));
}

// SumOrder::LevelCascade (V lanes, 4 accumulators) over the `count` terms of a one-column sum from
// row `begin`: vectors of V consecutive rows by the interleaved cascade, then 0 + the count mod V
// tail rows in order, plus the V lanes in order; fewer than V rows: the interleaved cascade over
// single rows. result[s] (scalar locals) = +0 + that.
void contiguous_cascade(Builder& b, const std::vector<ColumnSum>& sums, int V, ExprRef begin, ExprRef count, ExprRef first_col,
                        const std::vector<int>& result) {
  const Type one{f32, 1};
  auto scalar_row = [&](ExprRef i) { return ColumnRow{b, std::move(i), first_col, nullptr, 1, 1}; };
  std::vector<int> fin;
  for (const ColumnSum& s : sums) fin.push_back(b.local(s.label + ".fin", one));
  b.if_else(
      binary(Op::Le, index_const(V), count),
      [&] {
        ExprRef vectors = b.let("vectors", div(count, index_const(V)));
        std::vector<int> vacc;
        for (const ColumnSum& s : sums) vacc.push_back(b.local(s.label + ".vacc", Type{f32, V}));
        interleaved_cascade(
            b, sums, vectors,
            [&](ExprRef v) {
              ExprRef rows = add(broadcast(add(begin, mul(v, index_const(V))), V), iota(V));
              return ColumnRow{b, rows, first_col, nullptr, V, 1};
            },
            Type{f32, V}, vacc);
        for (size_t s = 0; s < sums.size(); ++s) b.assign(fin[s], constant(one, 0.0));
        b.for_range("row", add(begin, mul(vectors, index_const(V))), add(begin, count), 1,
                    [&](ExprRef i) { accumulate_row(b, sums, scalar_row(i), fin); });
        for (size_t s = 0; s < sums.size(); ++s)
          for (int l = 0; l < V; ++l) b.assign(fin[s], add(b.get(fin[s]), extract(b.get(vacc[s]), l)));
      },
      [&] { interleaved_cascade(b, sums, count, [&](ExprRef i) { return scalar_row(add(begin, i)); }, one, fin); });
  for (size_t s = 0; s < sums.size(); ++s) b.assign(result[s], add(constant(one, 0.0), b.get(fin[s])));
}

// The vectors of L columns an instance takes side by side when its accumulators live in scratch:
// up to a 4 KiB page of the widest row input per row (1024 columns of f32, 2048 of bf16 or f16),
// few enough to give every hardware thread an instance (the pool runs one per thread at a time),
// and dividing `vectors`. Columns are independent, so the tile changes no bit.
int scratch_tile_vectors(const Kernel& k, int L, int64_t vectors) {
  int64_t row_input_bytes = 1;
  for (const Buffer& buf : k.buffers)
    if (!buf.output && buf.extent == Extent::rows_by_cols) row_input_bytes = std::max<int64_t>(row_input_bytes, size_bytes(buf.elem));
  const int64_t page_columns = 4096 / row_input_bytes;
  const int64_t spread = std::max<int64_t>(1, vectors / std::max<int64_t>(2, std::thread::hardware_concurrency()));
  int per = static_cast<int>(std::max<int64_t>(1, std::min({page_columns / L, spread, vectors})));
  while (vectors % per != 0) --per;
  return per;
}

// level_cascade for a tile of `per` vectors of L columns from column `first`, in lock step: each
// row adds the tile's per*L contiguous columns to level 0 before the next row, and the carries
// run over the whole tile. Every column sees level_cascade's operations in its order, so its bits
// are the same; a walk of one vector per instance read 16 or 32 bytes of every row, in page walks.
// The levels live in scratch, level l of sum s, vector v at ((l * sums + s) * per + v) * L.
// result(s, v) receives sum s of vector v, ((A0 + A1) + A2) + A3.
void tiled_level_cascade(Builder& b, const std::vector<ColumnSum>& sums, ExprRef count, ExprRef first, int per, int L, int64_t n,
                         const std::function<void(size_t, ExprRef first_col, ExprRef sum)>& result) {
  Kernel& k = b.kernel();
  const int64_t width = int64_t(per) * L, stride = int64_t(sums.size()) * width;
  const int levels = b.buffer("cascade_levels", f32, true, Extent::scratch, 4 * stride);
  auto at = [&](int l, size_t s, ExprRef v) {
    return add(index_const(int64_t(l) * stride + int64_t(s) * width), mul(std::move(v), index_const(L)));
  };
  // body(s, v, first_col) for every sum and vector of the tile.
  auto each = [&](const std::function<void(size_t, ExprRef, ExprRef)>& body) {
    b.for_range("vector", index_const(0), index_const(per), 1, [&](ExprRef v) {
      ExprRef first_col = b.let("first_col", add(first, mul(v, index_const(L))));
      for (size_t s = 0; s < sums.size(); ++s) body(s, v, first_col);
    });
  };
  const ExprRef zero = broadcast(constant(Type{f32, 1}, 0.0), L);
  auto add_row = [&](ExprRef i) {
    each([&](size_t s, ExprRef v, ExprRef first_col) {
      const ColumnRow cr{b, i, first_col, nullptr, L, n};
      b.store(levels, at(0, s, v), sums[s].accumulate(cr, load(k, levels, at(0, s, v), L)));
    });
  };
  // A[to] += A[from]; A[from] = +0.
  auto carry = [&](int from, int to) {
    each([&](size_t s, ExprRef v, ExprRef) {
      b.store(levels, at(to, s, v), add(load(k, levels, at(to, s, v), L), load(k, levels, at(from, s, v), L)));
      b.store(levels, at(from, s, v), zero);
    });
  };
  each([&](size_t s, ExprRef v, ExprRef) {
    for (int l = 0; l < 4; ++l) b.store(levels, at(l, s, v), zero);
  });
  cascade_walk(b, count, add_row, carry);
  each([&](size_t s, ExprRef v, ExprRef first_col) {
    auto A = [&](int l) { return load(k, levels, at(l, s, v), L); };
    result(s, first_col, add(add(add(A(0), A(1)), A(2)), A(3)));
  });
}

}  // namespace

std::vector<ColumnSpan> column_spans(const ColumnSumOrder& order, int64_t n) {
  using W = ColumnSpan::Walk;
  if (order.kind != ColumnSumOrder::Kind::LevelCascade) return {ColumnSpan{0, n, W::Order}};
  if (n == 1) return {ColumnSpan{0, 1, W::Contiguous}};
  const int64_t group = n >= order.vector ? 4 * int64_t(order.vector) : 4;
  const int64_t split = n / group * group;
  std::vector<ColumnSpan> out;
  if (split > 0) out.push_back({0, split, W::Cascade});
  if (split < n) out.push_back({split, n, W::Interleaved});
  return out;
}

// The LevelCascade walks: the cascade over a span that is whole vectors of order.lanes columns
// takes a tile of them per instance (tiled_level_cascade); the interleaved and contiguous walks,
// and every walk on the CUDA targets (one column per instance), an instance per vector.
void span_column_sums(Builder& b, const ColumnSumOrder& order, int64_t n, const ColumnSpan& span, const std::vector<ColumnSum>& sums,
                      bool one_column) {
  Kernel& k = b.kernel();
  const int64_t width = span.end - span.first;
  const int L = one_column ? 1 : static_cast<int>(std::min<int64_t>(order.lanes, width));
  k.grid_over_rows = false;
  k.runs_without_rows = true;  // the sums of no rows: zeros
  k.grid_rank = 1;
  if (span.walk == ColumnSpan::Walk::Cascade && !one_column && width % L == 0) {
    // The cascade over a tile of vectors in lock step (tiled_level_cascade).
    const int per = scratch_tile_vectors(k, L, width / L);
    k.grid_fixed = {width / (int64_t(per) * L)};
    ExprRef first = b.let("first_col", add(index_const(span.first), mul(program_id(0), index_const(int64_t(per) * L))));
    ExprRef M = b.let("rows", launch_rows());
    b.region("columns", describe(order), [&] {
      tiled_level_cascade(b, sums, M, first, per, L, n, [&](size_t s, ExprRef first_col, ExprRef sum) {
        ExprRef total = add(f32c(0.0, L), std::move(sum));
        const ScalarType out = k.buffers[size_t(sums[s].out)].elem;
        b.store(sums[s].out, first_col, out == f32 ? total : cast(total, out));
      });
    });
    return;
  }
  const int64_t instances = (width + L - 1) / L;
  k.grid_fixed = {instances};
  ExprRef first_col = b.let("first_col", add(index_const(span.first), mul(program_id(0), index_const(L))));
  // When the span is not a multiple of the vector, the last instance's spare lanes repeat its
  // last column: they compute that column's sum again and store the same bits to it.
  ExprRef cols;
  if (width % L != 0)
    cols = b.let("cols", binary(Op::Min, add(broadcast(first_col, L), iota(L)), broadcast(index_const(span.end - 1), L)));
  const Type vec{f32, L};
  ExprRef M = b.let("rows", launch_rows());
  auto row_view = [&](ExprRef i) { return ColumnRow{b, std::move(i), first_col, cols, L, n}; };
  auto zero = [&] { return f32c(0.0, L); };
  std::vector<int> total(sums.size());
  for (size_t s = 0; s < sums.size(); ++s) total[s] = b.local(sums[s].label, vec);

  b.region("columns", describe(order), [&] {
    if (span.walk == ColumnSpan::Walk::Cascade || span.walk == ColumnSpan::Walk::Interleaved) {
      std::vector<int> res(sums.size());
      for (size_t s = 0; s < sums.size(); ++s) res[s] = b.local(sums[s].label + ".cascade", vec);
      if (span.walk == ColumnSpan::Walk::Cascade) level_cascade(b, sums, M, row_view, vec, res);
      else interleaved_cascade(b, sums, M, row_view, vec, res);
      for (size_t s = 0; s < sums.size(); ++s) b.assign(total[s], add(zero(), b.get(res[s])));
    } else if (span.walk == ColumnSpan::Walk::Contiguous) {
      // One column (L = 1); on several threads a long sum is cut into per-thread chunks.
      const int V = order.vector;
      const int64_t T = order.slots, grain = 32768;
      std::vector<int> res(sums.size());
      for (size_t s = 0; s < sums.size(); ++s) res[s] = b.local(sums[s].label + ".cascade", vec);
      auto whole = [&] {
        contiguous_cascade(b, sums, V, index_const(0), M, first_col, res);
        for (size_t s = 0; s < sums.size(); ++s) b.assign(total[s], b.get(res[s]));
      };
      if (T == 1) {
        whole();
      } else {
        std::vector<int> slots;
        for (const ColumnSum& s : sums) slots.push_back(b.buffer(s.label + ".thread_slots", f32, true, Extent::scratch, T));
        b.if_else(binary(Op::Lt, index_const(grain), M), [&] {
          ExprRef used = b.let("slots_used", binary(Op::Min, index_const(T), div(add(M, index_const(grain - 1)), index_const(grain))));
          ExprRef chunk = b.let("chunk", div(sub(add(M, used), index_const(1)), used));
          for (int64_t t = 0; t < T; ++t) {
            for (size_t s = 0; s < sums.size(); ++s) b.store(slots[s], index_const(t), f32c(0.0));
            b.if_(binary(Op::Lt, index_const(t), used), [&] {
              ExprRef begin = b.let("chunk_begin", mul(index_const(t), chunk));
              ExprRef count = b.let("chunk_rows", sub(binary(Op::Min, M, add(begin, chunk)), begin));
              contiguous_cascade(b, sums, V, begin, count, first_col, res);
              for (size_t s = 0; s < sums.size(); ++s) b.store(slots[s], index_const(t), b.get(res[s]));
            });
          }
          SumOrder slot_sum;
          slot_sum.kind = SumOrder::Kind::LevelCascade;
          slot_sum.lanes = V;
          slot_sum.accumulators = 4;
          for (size_t s = 0; s < sums.size(); ++s)
            b.assign(total[s], emit_sum(b, slot_sum, Arith{f32, std::nullopt}, T,
                                        [&, s](ExprRef i, int lanes) { return Term{ir::load(k, slots[s], i, lanes), nullptr}; },
                                        sums[s].label + " over the thread slots"));
        }, whole);
      }
    } else {
      throw Error("internal: the order's own walk is tiled_column_sums'");
    }
  });
  for (size_t s = 0; s < sums.size(); ++s) {
    const ScalarType out = k.buffers[size_t(sums[s].out)].elem;
    ExprRef v = out == f32 ? b.get(total[s]) : cast(b.get(total[s]), out);
    if (cols) b.store(sums[s].out, cols, v);
    else b.store(sums[s].out, first_col, v);
  }
}

// ThreadSlots and BlockTree over columns [0, n): an instance per tile of columns.
void tiled_column_sums(Builder& b, const ColumnSumOrder& order, int64_t n, ScalarType storage, const std::vector<ColumnSum>& sums,
                       bool one_column, int block_sums) {
  Kernel& k = b.kernel();
  // An instance takes `per` vectors of L columns side by side: each row then reads per*L
  // contiguous elements of every input (a page walk serves more of them). Columns are
  // independent, so the tiling changes no bit. When N is a multiple of L, every load is a vector
  // load and the tile is scratch_tile_vectors' page, whose accumulators live in scratch, walked by
  // a loop over the tile's vectors: 128-column tiles of register accumulators left the column
  // stage about twice as slow on 8192 x 4096 (page walks, and no prefetch across the rows'
  // pages), and 1024-column tiles of bf16 (half a page) made layer_norm_backward bf16 about 35%
  // slower than 2048. Otherwise (and for one column, CUDA's thread per column) up to 8 vectors of register
  // accumulators, the instance's columns past N - 1 repeating column N - 1 (computing its sums
  // again and storing the same bits to it) through gathers.
  const int L = one_column ? 1 : static_cast<int>(std::min<int64_t>(order.lanes, n));
  const int64_t vectors = (n + L - 1) / L;
  const bool tiled_in_scratch = !one_column && n % L == 0;
  // Scratch tiles stop short of leaving a thread idle: at least one instance per hardware
  // thread where N allows (the pool runs one per thread at a time).
  int per = one_column ? 1 : tiled_in_scratch ? scratch_tile_vectors(k, L, vectors) : static_cast<int>(std::min<int64_t>(8, vectors));
  if (n % L == 0)
    while (vectors % per != 0) --per;
  const int64_t width = int64_t(per) * L;
  const int64_t instances = (n + width - 1) / width;
  k.grid_over_rows = false;
  k.runs_without_rows = true;  // the sums of no rows: zeros
  k.grid_rank = 1;
  k.grid_fixed = {instances};
  ExprRef first = b.let("first_col", mul(program_id(0), index_const(width)));
  const Type vec{f32, L};
  ExprRef M = b.let("rows", launch_rows());
  auto zero = [&] { return f32c(0.0, L); };

  // The accumulators of a tile: one per (sum, vector), as locals (`per` unrolled) or in a
  // scratch buffer (a loop over the vectors), element ((s * per) + v) * L.
  struct Accs {
    std::vector<std::vector<int>> locals;
    int scratch = -1;
  };
  auto accs = [&](const std::string& what) {
    Accs a;
    if (tiled_in_scratch) {
      a.scratch = b.buffer(fmt::format("columns{}", what.empty() ? ".total" : what), f32, true, Extent::scratch,
                           int64_t(sums.size()) * width);
      return a;
    }
    a.locals.resize(sums.size());
    for (size_t s = 0; s < sums.size(); ++s)
      for (int v = 0; v < per; ++v) a.locals[s].push_back(b.local(fmt::format("{}{}.v{}", sums[s].label, what, v), vec));
    return a;
  };
  // One vector of the tile: its index (a constant when unrolled), first column and clamped
  // columns (null when contiguous).
  struct Slot {
    int v;  // -1 in the scratch loop
    ExprRef index, first_col, cols;
  };
  std::vector<Slot> unrolled;
  if (!tiled_in_scratch)
    for (int v = 0; v < per; ++v) {
      Slot sl{v, index_const(v), v == 0 ? first : b.let("first_col", add(first, index_const(int64_t(v) * L))), nullptr};
      if (n % width != 0)
        sl.cols = b.let("cols", binary(Op::Min, add(broadcast(sl.first_col, L), iota(L)), broadcast(index_const(n - 1), L)));
      unrolled.push_back(sl);
    }
  auto at = [&](size_t s, const Slot& sl) { return add(index_const(int64_t(s) * width), mul(sl.index, index_const(L))); };
  auto get = [&](const Accs& a, size_t s, const Slot& sl) {
    return a.scratch >= 0 ? load(k, a.scratch, at(s, sl), L) : b.get(a.locals[s][size_t(sl.v)]);
  };
  auto set = [&](const Accs& a, size_t s, const Slot& sl, ExprRef x) {
    if (a.scratch >= 0) b.store(a.scratch, at(s, sl), std::move(x));
    else b.assign(a.locals[s][size_t(sl.v)], std::move(x));
  };
  // body(s, slot) for every sum and vector of the tile.
  auto each = [&](const auto& body) {
    if (!tiled_in_scratch) {
      for (size_t s = 0; s < sums.size(); ++s)
        for (const Slot& sl : unrolled) body(s, sl);
      return;
    }
    b.for_range("vector", index_const(0), index_const(per), 1, [&](ExprRef v) {
      const Slot sl{-1, v, b.let("first_col", add(first, mul(v, index_const(L)))), nullptr};
      for (size_t s = 0; s < sums.size(); ++s) body(s, sl);
    });
  };
  auto accumulate_row = [&](ExprRef i, const Accs& acc, bool round) {
    each([&](size_t s, const Slot& sl) {
      const ColumnRow cr{b, i, sl.first_col, sl.cols, L, n};
      ExprRef x = sums[s].accumulate(cr, get(acc, s, sl));
      if (round) x = cast(cast(x, storage), f32);
      set(acc, s, sl, x);
    });
  };
  const Accs total = accs("");

  b.region("columns", describe(order), [&] {
    if (order.kind == ColumnSumOrder::Kind::ThreadSlots) {
      // At least one slot, so that a launch of no rows divides by 1 (its sums are the zeros).
      ExprRef used = b.let("slots_used", binary(Op::Max, binary(Op::Min, index_const(order.slots), M), index_const(1)));
      ExprRef chunk = b.let("chunk", div(sub(add(M, used), index_const(1)), used));
      each([&](size_t s, const Slot& sl) { set(total, s, sl, zero()); });
      const Accs slot = accs(".slot");
      b.for_range("slot", index_const(0), index_const(order.slots), 1, [&](ExprRef t) {
        each([&](size_t s, const Slot& sl) { set(slot, s, sl, zero()); });
        ExprRef end = binary(Op::Min, M, mul(add(t, index_const(1)), chunk));
        b.for_range("row", mul(t, chunk), end, 1, [&](ExprRef i) { accumulate_row(i, slot, order.round_slots); });
        each([&](size_t s, const Slot& sl) { set(total, s, sl, add(get(total, s, sl), get(slot, s, sl))); });
      });
    } else {
      const int64_t B = order.block_rows;
      // Levels of the binary counter: enough for every block count a launch can have. They live
      // in scratch, level l of sum s, vector v at ((l * sums + s) * per + v) * L.
      const int64_t max_blocks = (int64_t(1) << 59) / n / B + 1;
      const int depth = std::bit_width(static_cast<uint64_t>(max_blocks));
      const int64_t stride = int64_t(sums.size()) * width;
      const int levels = b.buffer("levels", f32, true, Extent::scratch, depth * stride);
      auto level_at = [&](ExprRef l, size_t s, const Slot& sl) { return add(mul(l, index_const(stride)), at(s, sl)); };
      ExprRef blocks = b.let("blocks", div(add(M, index_const(B - 1)), index_const(B)));
      const Accs block = accs(".block");
      const int carrying = b.local("carrying", Type{ScalarType::i64, 1});
      const int bit_value = b.local("bit_value", Type{ScalarType::i64, 1});
      auto bit_of = [&](ExprRef value) {  // bit (value / bit_value) % 2, as an i64
        return binary(Op::Rem, div(value, b.get(bit_value)), index_const(2));
      };
      b.for_range("block", index_const(0), blocks, 1, [&](ExprRef j) {
        if (block_sums >= 0) {
          // Block j's sums as the rows' stage left them: element (j * sums + s) * n + column.
          ExprRef at = b.let("block_sums_at", mul(j, index_const(int64_t(sums.size()) * n)));
          each([&](size_t s, const Slot& sl) {
            ExprRef base = add(at, index_const(int64_t(s) * n));
            set(block, s, sl, sl.cols ? gather(k, block_sums, add(broadcast(base, L), sl.cols)) : load(k, block_sums, add(base, sl.first_col), L));
          });
        } else {
          each([&](size_t s, const Slot& sl) { set(block, s, sl, zero()); });
          ExprRef end = binary(Op::Min, M, mul(add(j, index_const(1)), index_const(B)));
          b.for_range("row", mul(j, index_const(B)), end, 1, [&](ExprRef i) { accumulate_row(i, block, false); });
        }
        // Carry up while bit l of j is set; the first clear bit's level keeps the carry. The
        // block accumulators become the carry.
        b.assign(carrying, index_const(1));
        b.assign(bit_value, index_const(1));
        b.for_range("level", index_const(0), index_const(depth), 1, [&](ExprRef l) {
          b.if_(binary(Op::Ne, b.get(carrying), index_const(0)), [&] {
            b.if_else(
                binary(Op::Eq, bit_of(j), index_const(1)),
                [&] { each([&](size_t s, const Slot& sl) { set(block, s, sl, add(load(k, levels, level_at(l, s, sl), L), get(block, s, sl))); }); },
                [&] {
                  each([&](size_t s, const Slot& sl) { b.store(levels, level_at(l, s, sl), get(block, s, sl)); });
                  b.assign(carrying, index_const(0));
                });
          });
          b.assign(bit_value, mul(b.get(bit_value), index_const(2)));
        });
      });
      // The levels held (the set bits of the block count), from the highest (the earliest rows)
      // down; -0 + v is v exactly.
      each([&](size_t s, const Slot& sl) { set(total, s, sl, f32c(-0.0, L)); });
      b.assign(bit_value, index_const(int64_t(1) << (depth - 1)));
      b.for_range("from_top", index_const(0), index_const(depth), 1, [&](ExprRef t) {
        ExprRef l = sub(index_const(depth - 1), t);
        b.if_(binary(Op::Eq, bit_of(blocks), index_const(1)), [&] {
          each([&](size_t s, const Slot& sl) { set(total, s, sl, add(get(total, s, sl), load(k, levels, level_at(l, s, sl), L))); });
        });
        b.assign(bit_value, div(b.get(bit_value), index_const(2)));
      });
    }
  });
  each([&](size_t s, const Slot& sl) {
    const ScalarType out = k.buffers[size_t(sums[s].out)].elem;
    ExprRef x = out == f32 ? get(total, s, sl) : cast(get(total, s, sl), out);
    if (sl.cols) b.store(sums[s].out, sl.cols, x);
    else b.store(sums[s].out, sl.first_col, x);
  });
}

bool one_pass_weight_gradients(const Request& r, const NormBackwardOrder& o, bool has_column_sums) {
  return !cuda_target(r) && has_column_sums && o.kind == NormBackwardOrder::Kind::Centered && o.columns.kind == ColumnSumOrder::Kind::BlockTree;
}

// Carrying the sums through groups of 2 or 4 rows in registers, which reads and writes the
// workspace once per group, was slower (layer_norm_backward 8192 x 4096 f32, 2 threads: 20.4 ms
// one row at a time, 21.2 in pairs, 27.3 in fours; bf16 16.3, 16.1, 17.3) and took 2 to 3 times
// the compile time: a group's rows no longer fit in the L1 cache.
void emit_block_rows(Builder& b, const ColumnSumOrder& order, int64_t n, int dx, int block_sums, const std::vector<ColumnSum>& sums,
                     const std::function<BlockRow(const ExprRef& row_index)>& row) {
  Kernel& k = b.kernel();
  const int64_t B = order.block_rows, S = int64_t(sums.size());
  const int L = order.lanes;
  k.rows_per_instance = B;
  ExprRef block = b.let("block_sums_at", mul(program_id(0), index_const(S * n)));
  auto at = [&](size_t s, const ExprRef& col) { return add(block, add(index_const(int64_t(s) * n), col)); };
  const int64_t whole = S * n - S * n % L;
  b.for_range("zero", index_const(0), index_const(whole), L, [&](ExprRef i) { b.store(block_sums, add(block, i), f32c(0.0, L)); });
  b.for_range("zero.tail", index_const(whole), index_const(S * n), 1, [&](ExprRef i) { b.store(block_sums, add(block, i), f32c(0.0)); });
  // The block's rows: [B * block, min(rows, B * (block + 1))).
  ExprRef first = mul(program_id(0), index_const(B));
  ExprRef end = binary(Op::Min, launch_rows(), mul(add(program_id(0), index_const(1)), index_const(B)));
  b.for_per_instance("row_of_block", first, end, 1, [&](ExprRef i) {
    const BlockRow r = row(i);
    r.row.for_each(L, [&](ExprRef col, int lanes) {
      ExprRef d = b.let("dx", r.dx(col, lanes));
      const ColumnRow cr{b, i, col, nullptr, lanes, n};
      std::vector<ExprRef> acc;
      for (size_t s = 0; s < sums.size(); ++s)
        acc.push_back(b.let(sums[s].label + ".block", sums[s].accumulate(cr, load(k, block_sums, at(s, col), lanes))));
      r.row.store_as(dx, col, d);
      for (size_t s = 0; s < sums.size(); ++s) b.store(block_sums, at(s, col), acc[s]);
    });
  });
}

void emit_column_sums(Builder& b, const ColumnSumOrder& order, int64_t n, const ColumnSpan& span, ScalarType storage,
                      const std::vector<ColumnSum>& sums, bool one_column) {
  if (span.walk == ColumnSpan::Walk::Order && span.first == 0 && span.end == n) return tiled_column_sums(b, order, n, storage, sums, one_column, -1);
  span_column_sums(b, order, n, span, sums, one_column);
}

void emit_column_sums(Builder& b, const ColumnSumOrder& order, int64_t n, ScalarType storage, const std::vector<ColumnSum>& sums,
                      bool one_column, int block_sums) {
  if (block_sums >= 0 && order.kind != ColumnSumOrder::Kind::BlockTree) throw Error("internal: only a block tree combines block sums");
  tiled_column_sums(b, order, n, storage, sums, one_column, block_sums);
}

}  // namespace ordo::gen
