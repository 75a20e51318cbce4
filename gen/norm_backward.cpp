// PyTorch's vectorized row reductions and the column stage of the normalization backward ops
// (gen/norm_backward.hpp).
#include "gen/norm_backward.hpp"

#include <fmt/format.h>

#include <bit>

#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr ScalarType f32 = ScalarType::f32, i64 = ScalarType::i64;

ExprRef f32c(double v, int lanes = 1) {
  ExprRef c = constant(Type{f32, 1}, v);
  return lanes > 1 ? broadcast(c, lanes) : c;
}

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

ExprRef emit_vec_reduce_all(Builder& b, const VecReduceAll& o, int64_t n, const TermFn& term, const std::string& label) {
  ExprRef result;
  const int V = o.lanes;
  const std::string note = fmt::format("vec_reduce_all(lanes={}{}, fold={}, loop {}, tail {})", V, o.split16 ? " x2 (16-bit input)" : "",
                                       o.fold == LaneFold::Halving ? "halving" : "sequential", o.fma_loop ? "fma" : "mul+add",
                                       o.fma_tail ? "fma" : "mul+add");
  const Arith ar{f32, std::nullopt};
  b.region(label, note, [&] {
    const int64_t block = o.split16 ? 2 * V : V;
    if (n < V || (o.split16 && n == V)) {
      result = sequential(b, n, term, label);
      return;
    }
    if (n < block) {  // 16-bit input, V < n < 2V
      std::vector<ExprRef> d0 = lanes_of(b, b.let(label + ".v0", first_of(term(index_const(0), V))), label + ".lane");
      for (int64_t l = 0; l < n - V; ++l)
        d0[size_t(l)] = b.let(label + ".lane", plain_accumulate(d0[size_t(l)], term(index_const(V + l), 1), o.fma_small));
      result = b.let(label, fold_lanes(d0, o.small_fold_by_tree ? o.fold : LaneFold::Sequential, ar));
      return;
    }
    const int64_t whole = n / block;
    int acc0 = b.local(label + ".acc0", Type{f32, V});
    int acc1 = o.split16 ? b.local(label + ".acc1", Type{f32, V}) : -1;
    b.assign(acc0, first_of(term(index_const(0), V)));
    if (o.split16) b.assign(acc1, first_of(term(index_const(V), V)));
    if (whole > 1)
      b.for_range("col", index_const(block), index_const(whole * block), block, [&](ExprRef col) {
        b.assign(acc0, plain_accumulate(b.get(acc0), term(col, V), o.fma_loop));
        if (o.split16) b.assign(acc1, plain_accumulate(b.get(acc1), term(add(col, index_const(V)), V), o.fma_loop));
      });
    const int64_t tail = n - whole * block, at = whole * block;
    // A 16-bit tail of more than V terms fills acc0's vector whole.
    if (o.split16 && tail > V) b.assign(acc0, plain_accumulate(b.get(acc0), term(index_const(at), V), o.fma_tail));
    std::vector<ExprRef> lanes0 = lanes_of(b, b.get(acc0), label + ".lane0");
    std::vector<ExprRef> lanes1 = o.split16 ? lanes_of(b, b.get(acc1), label + ".lane1") : std::vector<ExprRef>{};
    // The masked tail: lanes 0..count-1 of one accumulator take a term each.
    auto masked = [&](std::vector<ExprRef>& lanes, int64_t first, int64_t count) {
      for (int64_t l = 0; l < count; ++l)
        lanes[size_t(l)] = b.let(label + ".lane", plain_accumulate(lanes[size_t(l)], term(index_const(first + l), 1), o.fma_tail));
    };
    if (o.split16 && tail > V) masked(lanes1, at + V, tail - V);
    else if (tail > 0) masked(lanes0, at, tail);
    if (o.split16)
      for (int l = 0; l < V; ++l) lanes0[size_t(l)] = b.let(label + ".lane", add(lanes0[size_t(l)], lanes1[size_t(l)]));
    result = b.let(label, fold_lanes(lanes0, o.fold, ar));
  });
  return result;
}

ExprRef ColumnRow::load(int buffer) const {
  const Kernel& k = b.kernel();
  ExprRef base = mul(row, index_const(n));
  ExprRef v = cols ? gather(k, buffer, add(broadcast(base, lanes), cols)) : ir::load(k, buffer, add(base, first_col), lanes);
  return v->type.scalar == f32 ? v : cast(v, f32);
}

ExprRef ColumnRow::stat(int buffer) const {
  ExprRef v = ir::load(b.kernel(), buffer, row);
  return v->type.scalar == f32 ? v : cast(v, f32);
}

void emit_column_sums(Builder& b, const ColumnSumOrder& order, int64_t n, ScalarType storage, const std::vector<ColumnSum>& sums) {
  Kernel& k = b.kernel();
  const int L = static_cast<int>(std::min<int64_t>(order.lanes, n));
  const int64_t instances = (n + L - 1) / L;
  k.grid_over_rows = false;
  k.grid_rank = 1;
  k.grid_fixed = {instances};
  ExprRef first_col = b.let("first_col", mul(program_id(0), index_const(L)));
  // When N is not a multiple of the vector, the last instance's spare lanes repeat column N-1:
  // they compute that column's sum again and store the same bits to it.
  ExprRef cols;
  if (n % L != 0) cols = b.let("cols", binary(Op::Min, add(broadcast(first_col, L), iota(L)), broadcast(index_const(n - 1), L)));
  const Type vec{f32, L};
  ExprRef M = b.let("rows", launch_rows());
  auto row_view = [&](ExprRef i) { return ColumnRow{b, std::move(i), first_col, cols, L, n}; };
  auto zero = [&] { return f32c(0.0, L); };
  std::vector<int> total(sums.size());
  for (size_t s = 0; s < sums.size(); ++s) total[s] = b.local(sums[s].label, vec);

  b.region("columns", describe(order), [&] {
    if (order.kind == ColumnSumOrder::Kind::ThreadSlots) {
      ExprRef used = b.let("slots_used", binary(Op::Min, index_const(order.slots), M));
      ExprRef chunk = b.let("chunk", div(sub(add(M, used), index_const(1)), used));
      for (size_t s = 0; s < sums.size(); ++s) b.assign(total[s], zero());
      std::vector<int> slot(sums.size());
      for (size_t s = 0; s < sums.size(); ++s) slot[s] = b.local(sums[s].label + ".slot", vec);
      b.for_range("slot", index_const(0), index_const(order.slots), 1, [&](ExprRef t) {
        for (size_t s = 0; s < sums.size(); ++s) b.assign(slot[s], zero());
        ExprRef end = binary(Op::Min, M, mul(add(t, index_const(1)), chunk));
        b.for_range("row", mul(t, chunk), end, 1, [&](ExprRef i) {
          const ColumnRow cr = row_view(i);
          for (size_t s = 0; s < sums.size(); ++s) {
            ExprRef v = sums[s].accumulate(cr, b.get(slot[s]));
            if (order.round_slots) v = cast(cast(v, storage), f32);
            b.assign(slot[s], v);
          }
        });
        for (size_t s = 0; s < sums.size(); ++s) b.assign(total[s], add(b.get(total[s]), b.get(slot[s])));
      });
    } else {
      const int64_t B = order.block_rows;
      // Levels of the binary counter: enough for every block count a launch can have.
      const int64_t max_blocks = (int64_t(1) << 59) / n / B + 1;
      const int depth = std::bit_width(static_cast<uint64_t>(max_blocks));
      ExprRef blocks = b.let("blocks", div(add(M, index_const(B - 1)), index_const(B)));
      std::vector<std::vector<int>> level(sums.size());
      std::vector<int> block(sums.size()), carry(sums.size());
      for (size_t s = 0; s < sums.size(); ++s) {
        for (int l = 0; l < depth; ++l) {
          level[s].push_back(b.local(fmt::format("{}.level{}", sums[s].label, l), vec));
          b.assign(level[s].back(), zero());  // never read before a block stores into it
        }
        block[s] = b.local(sums[s].label + ".block", vec);
        carry[s] = b.local(sums[s].label + ".carry", vec);
      }
      b.for_range("block", index_const(0), blocks, 1, [&](ExprRef j) {
        for (size_t s = 0; s < sums.size(); ++s) b.assign(block[s], zero());
        ExprRef end = binary(Op::Min, M, mul(add(j, index_const(1)), index_const(B)));
        b.for_range("row", mul(j, index_const(B)), end, 1, [&](ExprRef i) {
          const ColumnRow cr = row_view(i);
          for (size_t s = 0; s < sums.size(); ++s) b.assign(block[s], sums[s].accumulate(cr, b.get(block[s])));
        });
        for (size_t s = 0; s < sums.size(); ++s) b.assign(carry[s], b.get(block[s]));
        // Carry up while bit l of j is set; the first clear bit's level keeps the carry.
        std::function<void(int)> carry_from = [&](int l) {
          if (l == depth) return;
          ExprRef bit_set = binary(Op::Ne, binary(Op::BitAnd, j, index_const(int64_t(1) << l)), index_const(0));
          b.if_else(
              bit_set,
              [&] {
                for (size_t s = 0; s < sums.size(); ++s) b.assign(carry[s], add(b.get(level[s][size_t(l)]), b.get(carry[s])));
                carry_from(l + 1);
              },
              [&] {
                for (size_t s = 0; s < sums.size(); ++s) b.assign(level[s][size_t(l)], b.get(carry[s]));
              });
        };
        carry_from(0);
      });
      // The levels held, from the highest (earliest rows) down; -0 + v is v exactly.
      for (size_t s = 0; s < sums.size(); ++s) b.assign(total[s], f32c(-0.0, L));
      for (int l = depth - 1; l >= 0; --l)
        b.if_(binary(Op::Ne, binary(Op::BitAnd, blocks, index_const(int64_t(1) << l)), index_const(0)), [&] {
          for (size_t s = 0; s < sums.size(); ++s) b.assign(total[s], add(b.get(total[s]), b.get(level[s][size_t(l)])));
        });
    }
  });
  for (size_t s = 0; s < sums.size(); ++s) {
    const ScalarType out = k.buffers[size_t(sums[s].out)].elem;
    ExprRef v = out == f32 ? b.get(total[s]) : cast(b.get(total[s]), out);
    if (cols) b.store(sums[s].out, cols, v);
    else b.store(sums[s].out, first_col, v);
  }
}

}  // namespace ordo::gen
