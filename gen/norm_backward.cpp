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

void emit_column_sums(Builder& b, const ColumnSumOrder& order, int64_t n, ScalarType storage, const std::vector<ColumnSum>& sums,
                      bool one_column) {
  Kernel& k = b.kernel();
  // An instance takes `per` vectors of L columns side by side: each row then reads per*L
  // contiguous elements of every input (a page walk serves more of them). Columns are
  // independent, so the tiling changes no bit. When N is a multiple of L, `per` divides N / L
  // and every load is a vector load; otherwise the instance's columns past N - 1 repeat column
  // N - 1 (computing its sums again and storing the same bits to it) through gathers.
  const int L = one_column ? 1 : static_cast<int>(std::min<int64_t>(order.lanes, n));
  const int64_t vectors = (n + L - 1) / L;
  int per = one_column ? 1 : static_cast<int>(std::min<int64_t>(8, vectors));
  if (n % L == 0)
    while (vectors % per != 0) --per;
  const int64_t width = int64_t(per) * L;
  const int64_t instances = (n + width - 1) / width;
  k.grid_over_rows = false;
  k.grid_rank = 1;
  k.grid_fixed = {instances};
  ExprRef first = b.let("first_col", mul(program_id(0), index_const(width)));
  std::vector<ExprRef> first_col(static_cast<size_t>(per)), cols(static_cast<size_t>(per));
  for (int v = 0; v < per; ++v) {
    first_col[size_t(v)] = v == 0 ? first : b.let("first_col", add(first, index_const(int64_t(v) * L)));
    if (n % width != 0)
      cols[size_t(v)] = b.let("cols", binary(Op::Min, add(broadcast(first_col[size_t(v)], L), iota(L)), broadcast(index_const(n - 1), L)));
  }
  const Type vec{f32, L};
  ExprRef M = b.let("rows", launch_rows());
  auto zero = [&] { return f32c(0.0, L); };
  // Locals per (sum, vector of the tile).
  auto locals = [&](const std::string& what) {
    std::vector<std::vector<int>> out(sums.size());
    for (size_t s = 0; s < sums.size(); ++s)
      for (int v = 0; v < per; ++v) out[s].push_back(b.local(fmt::format("{}{}.v{}", sums[s].label, what, v), vec));
    return out;
  };
  // body(s, v, local) for every sum and vector of the tile.
  auto each = [&](const auto& body) {
    for (size_t s = 0; s < sums.size(); ++s)
      for (int v = 0; v < per; ++v) body(s, v);
  };
  auto accumulate_row = [&](ExprRef i, const std::vector<std::vector<int>>& acc, bool round) {
    each([&](size_t s, int v) {
      const ColumnRow cr{b, i, first_col[size_t(v)], cols[size_t(v)], L, n};
      ExprRef x = sums[s].accumulate(cr, b.get(acc[s][size_t(v)]));
      if (round) x = cast(cast(x, storage), f32);
      b.assign(acc[s][size_t(v)], x);
    });
  };
  const std::vector<std::vector<int>> total = locals("");

  b.region("columns", describe(order), [&] {
    if (order.kind == ColumnSumOrder::Kind::ThreadSlots) {
      ExprRef used = b.let("slots_used", binary(Op::Min, index_const(order.slots), M));
      ExprRef chunk = b.let("chunk", div(sub(add(M, used), index_const(1)), used));
      each([&](size_t s, int v) { b.assign(total[s][size_t(v)], zero()); });
      const std::vector<std::vector<int>> slot = locals(".slot");
      b.for_range("slot", index_const(0), index_const(order.slots), 1, [&](ExprRef t) {
        each([&](size_t s, int v) { b.assign(slot[s][size_t(v)], zero()); });
        ExprRef end = binary(Op::Min, M, mul(add(t, index_const(1)), chunk));
        b.for_range("row", mul(t, chunk), end, 1, [&](ExprRef i) { accumulate_row(i, slot, order.round_slots); });
        each([&](size_t s, int v) { b.assign(total[s][size_t(v)], add(b.get(total[s][size_t(v)]), b.get(slot[s][size_t(v)]))); });
      });
    } else {
      const int64_t B = order.block_rows;
      // Levels of the binary counter: enough for every block count a launch can have. They live
      // in scratch, level l of sum s, vector v at ((l * sums + s) * per + v) * L.
      const int64_t max_blocks = (int64_t(1) << 59) / n / B + 1;
      const int depth = std::bit_width(static_cast<uint64_t>(max_blocks));
      const int64_t stride = int64_t(sums.size()) * per * L;
      const int levels = b.buffer("levels", f32, true, Extent::scratch, depth * stride);
      auto level_at = [&](ExprRef l, size_t s, int v) {
        return add(mul(l, index_const(stride)), index_const((int64_t(s) * per + v) * L));
      };
      ExprRef blocks = b.let("blocks", div(add(M, index_const(B - 1)), index_const(B)));
      const std::vector<std::vector<int>> block = locals(".block"), carry = locals(".carry");
      const int carrying = b.local("carrying", Type{ScalarType::i64, 1});
      const int bit_value = b.local("bit_value", Type{ScalarType::i64, 1});
      auto bit_of = [&](ExprRef value) {  // bit (value / bit_value) % 2, as an i64
        return binary(Op::Rem, div(value, b.get(bit_value)), index_const(2));
      };
      b.for_range("block", index_const(0), blocks, 1, [&](ExprRef j) {
        each([&](size_t s, int v) { b.assign(block[s][size_t(v)], zero()); });
        ExprRef end = binary(Op::Min, M, mul(add(j, index_const(1)), index_const(B)));
        b.for_range("row", mul(j, index_const(B)), end, 1, [&](ExprRef i) { accumulate_row(i, block, false); });
        // Carry up while bit l of j is set; the first clear bit's level keeps the carry.
        each([&](size_t s, int v) { b.assign(carry[s][size_t(v)], b.get(block[s][size_t(v)])); });
        b.assign(carrying, index_const(1));
        b.assign(bit_value, index_const(1));
        b.for_range("level", index_const(0), index_const(depth), 1, [&](ExprRef l) {
          b.if_(binary(Op::Ne, b.get(carrying), index_const(0)), [&] {
            b.if_else(
                binary(Op::Eq, bit_of(j), index_const(1)),
                [&] {
                  each([&](size_t s, int v) {
                    b.assign(carry[s][size_t(v)], add(load(k, levels, level_at(l, s, v), L), b.get(carry[s][size_t(v)])));
                  });
                },
                [&] {
                  each([&](size_t s, int v) { b.store(levels, level_at(l, s, v), b.get(carry[s][size_t(v)])); });
                  b.assign(carrying, index_const(0));
                });
          });
          b.assign(bit_value, mul(b.get(bit_value), index_const(2)));
        });
      });
      // The levels held (the set bits of the block count), from the highest (the earliest rows)
      // down; -0 + v is v exactly.
      each([&](size_t s, int v) { b.assign(total[s][size_t(v)], f32c(-0.0, L)); });
      b.assign(bit_value, index_const(int64_t(1) << (depth - 1)));
      b.for_range("from_top", index_const(0), index_const(depth), 1, [&](ExprRef t) {
        ExprRef l = sub(index_const(depth - 1), t);
        b.if_(binary(Op::Eq, bit_of(blocks), index_const(1)), [&] {
          each([&](size_t s, int v) {
            b.assign(total[s][size_t(v)], add(b.get(total[s][size_t(v)]), load(k, levels, level_at(l, s, v), L)));
          });
        });
        b.assign(bit_value, div(b.get(bit_value), index_const(2)));
      });
    }
  });
  each([&](size_t s, int v) {
    const ScalarType out = k.buffers[size_t(sums[s].out)].elem;
    ExprRef x = out == f32 ? b.get(total[s][size_t(v)]) : cast(b.get(total[s][size_t(v)]), out);
    if (cols[size_t(v)]) b.store(sums[s].out, cols[size_t(v)], x);
    else b.store(sums[s].out, first_col[size_t(v)], x);
  });
}

}  // namespace ordo::gen
