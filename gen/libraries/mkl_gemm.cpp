// oneMKL's sgemm, gemm_bf16bf16f32 and gemm_f16f16f32 as PyTorch 2.15's x86-64 wheels call them, on an Intel CPU
// with AVX-512 (GemmOrder::Kind::MklIntelAvx512) and on an AMD one (MklAmd, at the end of
// this file), on one thread and on two. MKL is closed source: every kernel and every choice below
// was measured against torch 2.15.0 on such hosts (docs/research/torch2.15-attention.md). The shapes are fixed when the kernel is generated, so
// each choice is made here, in C++, and the IR holds only the chosen kernel's order; whether MKL
// ran threaded is a property of the launch, which the caller branches on.
//
// The kernels, for C[j][i] = A_j . B_i (the 'T','N' product) and C[j] += P_j V (the 'N','N'
// product):
//   chain     every element one fma chain from +0 over a block of k, in k order; K is cut into
//             blocks (k_blocks below) whose sums are added left to right after C (when beta = 1).
//   dot16     a 16-lane fma accumulator over k (lane = k mod 16, a last partial chunk updates only
//             its lanes); in its paired form, while 32 or more elements remain, chunks alternate
//             between two accumulators that are then added.
//   gemv 'T'  (one side is a single row) per output row, by the row's place in MKL's 4-row
//             blocking: rows of whole 4-row blocks ("block4"), and the rows left over ("single",
//             the second of a left-over pair "second").
//   gemv 'N'  (P is a single row) per 16-column vector of the output: per group of 8 k (t = 0..7
//             the group's terms, fma(v_t, x_t, .)):  u = t4(t6(y)) + t5(t7(0)),
//             w = t0(t2(0)) + t1(t3(0)), y = u + w; then the last K mod 8 into y in order. Columns
//             past the last whole 16-vector: one fma chain over k from y0.
//   smalln    (2 <= n < 16, K >= 24 n) dot16, then lanes folded ((L_r + L_r+4) + L_r+8) + L_r+12
//             for r < 4, and (G0 + G1) + (G2 + G3).
//   pst       (a few tiny shapes) dot16 halved, paired for even j.
// alpha (the backward's calls, f32): gemv 'T', smalln and pst scale the finished dot; gemv 'N' and
// K = 1 scale P's elements; the general kernel packs MKL's A times alpha or scales each K block's
// sum (intel_nt_copies, intel_nn_copies). 'N','T' calls take the 'N','N' kernels.
// gemm_f16f16f32 on the Intel host (no avx512_fp16) converts to f32 and runs these kernels without
// either gemv: 'T','N' as above with smalln for n >= 2 and pst for one key of up to 15 rows, on 2
// threads its keys cut in two for every m >= 2; 'N','N' the general kernel for every shape.
#include "gen/blocks/constants.hpp"
#include "gen/libraries/mkl_gemm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>

#include "gen/blocks/reductions.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {
// x's lanes as a constant vector of value v (a scalar for one lane).
ExprRef f32_like(const ExprRef& x, double v) {
  ExprRef c = constant(Type{ScalarType::f32, 1}, v);
  return x->type.lanes > 1 ? broadcast(std::move(c), x->type.lanes) : c;
}
}  // namespace

ExprRef flush_subnormal(Builder& b, ExprRef x) {
  const ExprRef v = x->op == Op::Var ? x : b.let("flushed", x);
  constexpr double kSmallestNormal = 0x1p-126;
  const ExprRef subnormal = binary(Op::And, binary(Op::Lt, v, f32_like(v, kSmallestNormal)), binary(Op::Lt, f32_like(v, -kSmallestNormal), v));
  ExprRef sign_bit = constant(Type{ScalarType::i32, 1}, -0x80000000LL);
  if (v->type.lanes > 1) sign_bit = broadcast(std::move(sign_bit), v->type.lanes);
  const ExprRef zero_of_sign = bitcast(binary(Op::BitAnd, bitcast(v, ScalarType::i32), std::move(sign_bit)), ScalarType::f32);
  return select(subnormal, zero_of_sign, v);
}

namespace {

constexpr int kLanes = 16;  // the avx512 kernels' vector of floats
const Type kVec{ScalarType::f32, kLanes};
const Type kF32{ScalarType::f32, 1};

// Columns of C per vector step of p @ v: the widest of 16, 8, 4 that divides m (each column's
// order is its own, so any width gives the same bits).
int column_lanes(int64_t m) { return m % 16 == 0 ? 16 : m % 8 == 0 ? 8 : m % 4 == 0 ? 4 : 1; }
ExprRef zero(int lanes) {
  ExprRef z = constant(kF32, 0.0);
  return lanes > 1 ? broadcast(z, lanes) : z;
}

// One row of a Matrix.
struct Row {
  const Matrix* m;
  ExprRef row;
  ExprRef at_index(ExprRef col) const {
    return add(add(m->base, mul(row, idx(m->stride))), m->step == 1 ? std::move(col) : mul(std::move(col), idx(m->step)));
  }
};

ExprRef as_f32(ExprRef x) { return x->type.scalar == ScalarType::f32 ? x : cast(std::move(x), ScalarType::f32); }

// A bf16 pair as one 32-bit word held in an f32: `odd`'s bf16 in the high half, `even`'s in the
// low (both bf16 values held in f32, low halves zero). bf16_pair_dot reads the word itself as its
// odd factor (it ignores the low half) and even_factor(word) as the even one, so a kernel that
// stores its shared operand as words loads each pair once: vdpbf16ps's operand as it is, where
// two bf16 rows took two loads and an interleaving permute per vector.
ExprRef pair_word(const ExprRef& odd, const ExprRef& even) {
  const int lanes = odd->type.lanes;
  auto i32c = [&](int32_t v) {
    ExprRef c = constant(Type{ScalarType::i32, 1}, static_cast<double>(v));
    return lanes > 1 ? broadcast(c, lanes) : c;
  };
  const ExprRef low = binary(Op::BitAnd, binary(Op::Shr, bitcast(even, ScalarType::i32), i32c(16)), i32c(0xffff));
  return bitcast(add(bitcast(odd, ScalarType::i32), low), ScalarType::f32);
}
// Whether K blocks of these lengths pair k + 1 with k for every even k (each block's pairs start
// at its first k, so every block but the last must have an even length), as a copy of words does.
bool global_pairs(const std::vector<int64_t>& parts) {
  for (size_t i = 0; i + 1 < parts.size(); ++i)
    if (parts[i] % 2) return false;
  return true;
}
ExprRef even_factor(const ExprRef& word) {
  ExprRef sixteen = constant(Type{ScalarType::i32, 1}, 16.0);
  if (word->type.lanes > 1) sixteen = broadcast(sixteen, word->type.lanes);
  return bitcast(binary(Op::Shl, bitcast(word, ScalarType::i32), sixteen), ScalarType::f32);
}

struct Emitter {
  Builder& b;
  // The Intel model's alpha (sgemm, measured in f32): `block_alpha` multiplies each K block's sum
  // before it is added to C (the kernels that do not pack MKL's A); `x_alpha` each element of P
  // (MKL's B) as gemv 'N' and the K = 1 product read it. 1 leaves the values as they are.
  float block_alpha = 1.0f;
  float x_alpha = 1.0f;
  bool vector_chains = true;  // GemmOrder::vector_chains
  int register_floats = 8;    // GemmOrder::register_floats
  // The chains of the general kernel step through each K block in pairs, k + 1 then k (an odd
  // block's last k after its zero partner), as gemm_bf16bf16f32's vdpbf16ps kernels (GemmOrder::Kind::
  // MklIntelAvx512Bf16) do: one bf16_pair_dot node per pair (see emit_intel_bf16_nt).
  bool pairs = false;
  // In the pair order, which factor of its pair blocked_chains is asking its callbacks for (they
  // see k alone): a kernel that holds a pair as one word (pair_word) loads the word for the odd
  // factor and takes the even one from it.
  enum class PairHalf { none, odd, even };
  mutable PairHalf pair_half = PairHalf::none;
  // The factor a word-holding kernel's at_k gives for the pair half asked for: the odd factor loads
  // the pair's word into `word` (load_word()) and is the word; the even one takes its half from
  // that word, or (an odd block's last k, which has no odd partner) loads its own.
  ExprRef pair_factor(ExprRef& word, const std::function<ExprRef()>& load_word) const {
    const bool odd = pair_half == PairHalf::odd;
    if (odd || !word) word = load_word();
    if (odd) return word;
    ExprRef even = b.let("even_factor", even_factor(word));
    word = nullptr;
    return even;
  }
  const PackedKeys* packed = nullptr;  // general_nt_vectors's keys, copied once per (batch, head) (emit_gemm_nt)
  // general_nn_rows's register block: rows of C, and the vector registers its accumulators may
  // take (the rest hold the shared operands). AVX2 (16 registers): 6 rows, 12 registers. AVX-512
  // (32): 8 rows, 16 registers, so 2 column vectors of 16 floats (16 chains; 2 loads of V and 8
  // broadcasts per 16 fmas). 24 chains (6 rows by 4 vectors) ran the flash forward 2% faster and
  // the flash backward 12% faster, and took its cold compile from 47 to 80 ms (f32, S = 1024, D = 64).
  bool wide_registers() const { return register_floats == 16; }
  int64_t nn_block_rows() const { return wide_registers() ? 8 : 6; }
  int64_t accumulator_registers() const { return wide_registers() ? 16 : 12; }

  // x * a, rounded (x itself when a is 1).
  static ExprRef times(ExprRef x, float a) {
    if (a == 1.0f) return x;
    ExprRef s = constant(kF32, static_cast<double>(a));
    const int lanes = x->type.lanes;
    return mul(std::move(x), lanes > 1 ? broadcast(s, lanes) : s);
  }

  ExprRef get(const Row& r, ExprRef col, int lanes = 1) const {
    if (lanes > 1 && r.m->step != 1) throw Error("internal: a vector of a transposed operand's row");
    return as_f32(load(b.kernel(), r.m->buffer, r.at_index(std::move(col)), lanes));
  }
  // Elements col .. col + w - 1 in lanes 0 .. w-1 of a 16-lane vector; the other lanes repeat the
  // last element (they are never used).
  ExprRef get_partial(const Row& r, int64_t col, int64_t w) const {
    if (r.m->step != 1) throw Error("internal: a vector of a transposed operand's row");
    ExprRef lanes = binary(Op::Min, iota(kLanes), broadcast(idx(w - 1), kLanes));
    return as_f32(gather(b.kernel(), r.m->buffer, add(broadcast(r.at_index(idx(col)), kLanes), lanes)));
  }
  ExprRef lanes_below(int64_t w) const { return binary(Op::Lt, iota(kLanes), broadcast(idx(w), kLanes)); }
  ExprRef only_lane0(ExprRef scalar) const {
    return select(binary(Op::Eq, iota(kLanes), broadcast(idx(0), kLanes)), broadcast(std::move(scalar), kLanes), zero(kLanes));
  }
  void store(const Matrix& c, ExprRef row, ExprRef col, ExprRef value) const {
    b.store(c.buffer, add(add(c.base, mul(std::move(row), idx(c.stride))), std::move(col)), std::move(value));
  }
  ExprRef stored(const Matrix& c, ExprRef row, ExprRef col, int lanes = 1) const {
    return load(b.kernel(), c.buffer, add(add(c.base, mul(std::move(row), idx(c.stride))), std::move(col)), lanes);
  }

  // acc (16 lanes) updated by fma with x[k] * y[k] for k in [k0, k0 + len): see dot16 at the top.
  ExprRef dot16(const Row& x, const Row& y, int64_t k0, int64_t len, bool paired, ExprRef start = nullptr) const {
    const int acc = b.local("dot16", kVec);
    b.assign(acc, start ? start : zero(kLanes));
    int64_t k = k0;
    const int64_t end = k0 + len;
    if (paired && len >= 2 * kLanes) {
      const int first = b.local("dot16.a", kVec), second = b.local("dot16.b", kVec);
      b.assign(first, b.get(acc));
      b.assign(second, zero(kLanes));
      const int64_t pairs_end = k0 + len / (2 * kLanes) * (2 * kLanes);
      b.for_range("k", idx(k0), idx(pairs_end), 2 * kLanes, [&](ExprRef kk) {
        b.assign(first, fma(get(x, kk, kLanes), get(y, kk, kLanes), b.get(first)));
        const ExprRef k16 = b.let("k16", add(kk, idx(kLanes)));
        b.assign(second, fma(get(x, k16, kLanes), get(y, k16, kLanes), b.get(second)));
      });
      b.assign(acc, add(b.get(first), b.get(second)));
      k = pairs_end;
    }
    const int64_t full_end = k + (end - k) / kLanes * kLanes;
    if (full_end > k)
      b.for_range("k", idx(k), idx(full_end), kLanes,
                  [&](ExprRef kk) { b.assign(acc, fma(get(x, kk, kLanes), get(y, kk, kLanes), b.get(acc))); });
    if (const int64_t w = end - full_end; w > 0)
      b.assign(acc, select(lanes_below(w), fma(get_partial(x, full_end, w), get_partial(y, full_end, w), b.get(acc)), b.get(acc)));
    return b.get(acc);
  }

  // Lane i + lane i+8, then + 4, + 2, + 1.
  ExprRef halve(const ExprRef& v) const {
    const ExprRef bound = v->op == Op::Var ? v : b.let("lanes", v);
    std::vector<ExprRef> lanes;
    for (int l = 0; l < kLanes; ++l) lanes.push_back(extract(bound, l));
    return fold_lanes(lanes, LaneFold::Halving, Arith{});
  }
  // smalln's fold: G_r = ((L_r + L_r+4) + L_r+8) + L_r+12, then (G0 + G1) + (G2 + G3).
  ExprRef fold_smalln(const ExprRef& v) const {
    const ExprRef bound = v->op == Op::Var ? v : b.let("lanes", v);
    std::vector<ExprRef> g;
    for (int r = 0; r < 4; ++r) g.push_back(add(add(add(extract(bound, r), extract(bound, r + 4)), extract(bound, r + 8)), extract(bound, r + 12)));
    return add(add(g[0], g[1]), add(g[2], g[3]));
  }

  // One sequential fma chain over k in [k0, k1) from +0: sum_k x(k) * y(k), lanes wide.
  ExprRef chain(int64_t k0, int64_t k1, int lanes, const std::function<ExprRef(ExprRef)>& x, const std::function<ExprRef(ExprRef)>& y,
                ExprRef start = nullptr) const {
    if (pairs) throw Error("internal: a plain chain in the pair order");
    const int acc = b.local("chain", Type{ScalarType::f32, lanes});
    b.assign(acc, start ? start : zero(lanes));
    b.for_range("k", idx(k0), idx(k1), 1, [&](ExprRef k) { b.assign(acc, fma(x(k), y(k), b.get(acc))); });
    return b.get(acc);
  }

  // ---- gemv 'T': y[r] = A_r . x over K, by the row's place in MKL's 4-row blocking.
  enum class RowKind { Block4, Single, SecondOfPair };
  ExprRef gemv_t_row(const Row& a, const Row& x, int64_t K, RowKind kind) const {
    const ExprRef p0 = b.let("p0", mul(get(a, idx(0)), get(x, idx(0))));
    if (K == 1) return p0;
    if (kind != RowKind::Block4) return add(halve(dot16(a, x, 1, K - 1, kind == RowKind::Single)), p0);
    // Block4: p0 in lane 0 of an accumulator over the whole 16-chunks of elements 1 .. K-1, halved;
    // then that sum in lane 0 of a fresh accumulator for the partial chunk, halved again.
    const int64_t whole = (K - 1) / kLanes, tail = K - 1 - whole * kLanes;
    ExprRef h = p0;
    if (whole > 0) h = b.let("h", halve(dot16(a, x, 1, whole * kLanes, false, only_lane0(p0))));
    if (tail > 0) h = halve(dot16(a, x, 1 + whole * kLanes, tail, false, only_lane0(h)));
    return h;
  }
  // Rows [first, first + count) of one gemv 'T' part: whole 4-row blocks, then the rest.
  void gemv_t_rows(int64_t first, int64_t count, const std::function<void(ExprRef row, RowKind)>& row) const {
    const int64_t blocks_end = first + count / 4 * 4;
    if (blocks_end > first) b.for_range("r", idx(first), idx(blocks_end), 1, [&](ExprRef r) { row(r, RowKind::Block4); });
    for (int64_t r = blocks_end; r < first + count; ++r)
      row(idx(r), (r == blocks_end + 1 && first + count - blocks_end >= 2) ? RowKind::SecondOfPair : RowKind::Single);
  }
  // Threaded, MKL cuts the rows in two halves when the work is large enough (fitted bounds).
  void gemv_t(int64_t rows, int64_t K, bool split, const std::function<void(ExprRef row, RowKind)>& row) const {
    if (split && rows * K > 8192 && rows * (K + 288) > 41680) {
      const int64_t half = (rows + 1) / 2;
      gemv_t_rows(0, half, row);
      gemv_t_rows(half, rows - half, row);
    } else {
      gemv_t_rows(0, rows, row);
    }
  }

  // ---- gemv 'N': y0[e] + sum_{k0 <= k < k1} V[k][e] * x[k] for the columns e .. e + lanes - 1,
  // by MKL's single-thread kernel: lanes = 16 is one of its 16-column vectors, lanes = 1 a column
  // past them. y0 may be null (no C0).
  ExprRef gemv_n_value(const Row& x, const Matrix& v, const ExprRef& e, int lanes, int64_t k0, int64_t k1, ExprRef y0) const {
    auto vk = [&](ExprRef k) { return get(Row{&v, std::move(k)}, e, lanes); };
    auto xk = [&](ExprRef k) {
      ExprRef s = times(get(x, std::move(k)), x_alpha);
      return lanes > 1 ? broadcast(s, lanes) : s;
    };
    if (lanes == 1) return chain(k0, k1, 1, vk, xk, std::move(y0));
    const int y = b.local("gemv.y", kVec);
    b.assign(y, y0 ? std::move(y0) : zero(kLanes));
    const int64_t groups_end = k0 + (k1 - k0) / 8 * 8;
    if (groups_end > k0)
      b.for_range("k", idx(k0), idx(groups_end), 8, [&](ExprRef kb) {
        auto term = [&](int t, ExprRef acc) {
          const ExprRef k = t ? add(kb, idx(t)) : kb;
          return fma(vk(k), xk(k), std::move(acc));
        };
        const ExprRef u = add(term(4, term(6, b.get(y))), term(5, term(7, zero(kLanes))));
        const ExprRef w = add(term(0, term(2, zero(kLanes))), term(1, term(3, zero(kLanes))));
        b.assign(y, add(u, w));
      });
    for (int64_t k = groups_end; k < k1; ++k) b.assign(y, fma(vk(idx(k)), xk(idx(k)), b.get(y)));
    return b.get(y);
  }
  // The columns [e0, e1) as one gemv 'N' call sees them: whole 16-vectors, then single columns.
  void gemv_n_columns(int64_t e0, int64_t e1, const std::function<void(ExprRef e, int lanes)>& column) const {
    const int64_t vec_end = e0 + (e1 - e0) / kLanes * kLanes;
    if (vec_end > e0) b.for_range("e", idx(e0), idx(vec_end), kLanes, [&](ExprRef e) { column(e, kLanes); });
    if (e1 > vec_end) b.for_range("e", idx(vec_end), idx(e1), 1, [&](ExprRef e) { column(e, 1); });
  }

  // ---- gemm_bf16bf16f32's gemv kernels (measured on an Intel host without avx512_bf16).
  // 'T': lane l of a 4-lane accumulator sums k = l, l + 4, ... in order; then (l0 + l2) + (l1 + l3),
  // then the K mod 4 last products in order.
  // alpha: each element of A_r first multiplied by it, rounded; the Intel host (`fused`) then
  // fuses each product with its sum (an AMD host rounds it: measured that way with alpha = sc).
  ExprRef gemv_t4(const Row& a, const Row& x, int64_t K, float alpha = 1.0f, bool fused = false) const {
    const Type v4{ScalarType::f32, 4};
    auto ak = [&](ExprRef k, int lanes) {
      ExprRef y = get(a, std::move(k), lanes);
      if (alpha == 1.0f) return y;
      ExprRef s = constant(kF32, static_cast<double>(alpha));
      return mul(std::move(y), lanes > 1 ? broadcast(s, lanes) : s);
    };
    // Products of two bf16 values are exact: fused or not differs only for a scaled operand.
    auto step = [&](ExprRef sum, ExprRef a_k, ExprRef x_k) {
      if (fused && alpha != 1.0f) return fma(std::move(a_k), std::move(x_k), std::move(sum));
      return add(std::move(sum), mul(std::move(a_k), std::move(x_k)));
    };
    const int acc = b.local("gemv4", v4);
    b.assign(acc, zero(4));
    const int64_t whole = K / 4 * 4;
    if (whole > 0) b.for_range("k", idx(0), idx(whole), 4, [&](ExprRef k) { b.assign(acc, step(b.get(acc), ak(k, 4), get(x, k, 4))); });
    ExprRef h = add(add(extract(b.get(acc), 0), extract(b.get(acc), 2)), add(extract(b.get(acc), 1), extract(b.get(acc), 3)));
    for (int64_t k = whole; k < K; ++k) h = step(h, ak(idx(k), 1), get(x, idx(k)));
    return h;
  }
  // 'N', over k in [k0, k1) for the columns e .. e + lanes - 1: the products of k0, k0 + 2, ...
  // summed in order from +0, those of k0 + 1, k0 + 3, ... likewise, the two sums added, then C0
  // plus that, then the last product when the count is odd.
  ExprRef gemv_n_pairs(const Row& x, const Matrix& v, const ExprRef& e, int lanes, int64_t k0, int64_t k1, ExprRef y0) const {
    const Type t{ScalarType::f32, lanes};
    auto product = [&](ExprRef k) { return mul(get(Row{&v, k}, e, lanes), broadcast(get(x, k), lanes)); };
    const int even = b.local("gemv.even", t), odd = b.local("gemv.odd", t);
    b.assign(even, zero(lanes));
    b.assign(odd, zero(lanes));
    const int64_t pairs_end = k0 + (k1 - k0) / 2 * 2;
    if (pairs_end > k0)
      b.for_range("k", idx(k0), idx(pairs_end), 2, [&](ExprRef k) {
        b.assign(even, add(b.get(even), product(k)));
        b.assign(odd, add(b.get(odd), product(add(k, idx(1)))));
      });
    ExprRef y = add(b.get(even), b.get(odd));
    if (y0) y = add(std::move(y0), y);
    if (pairs_end < k1) y = add(y, product(idx(pairs_end)));
    return y;
  }

  // ---- gemm_bf16bf16f32's vdpbf16ps kernels (an Intel host with avx512_bf16). Each instruction
  // adds a pair of exact products to a lane, the odd one first: lane = (lane + p[k+1]) + p[k].
  // Elements first + 2l of a row in lane l < count; the other lanes repeat the last (unused).
  ExprRef get_every_other(const Row& r, ExprRef first, int64_t count) const {
    ExprRef l = iota(kLanes);
    if (count < kLanes) l = binary(Op::Min, l, broadcast(idx(count - 1), kLanes));
    ExprRef cols = add(broadcast(std::move(first), kLanes), mul(l, broadcast(idx(2), kLanes)));
    if (r.m->step != 1) cols = mul(cols, broadcast(idx(r.m->step), kLanes));
    const ExprRef row_start = add(r.m->base, mul(r.row, idx(r.m->stride)));
    return as_f32(gather(b.kernel(), r.m->buffer, add(broadcast(row_start, kLanes), cols)));
  }
  // gemv 'T': y = A_r . x with pair t (k = 2t, 2t + 1) in lane t mod 16 of one accumulator (an
  // odd K's last product after its zero partner, +0); then lane l + 8
  // onto lane l, adjacent lanes paired, N_i = M_2i + M_2i+1, and y = (N0 + N1) + (N2 + N3).
  ExprRef gemv_t_pairs(const Row& a, const Row& x, int64_t K) const {
    const int acc = b.local("gemv.pairs", kVec);
    b.assign(acc, zero(kLanes));
    // The pairs [t0, t0 + count) in lanes 0 .. count-1 (t0 a multiple of 16).
    auto chunk = [&](ExprRef t0, int64_t count) {
      const ExprRef k0 = b.let("k_pairs", mul(t0, idx(2)));
      const ExprRef k1 = b.let("k_odd", add(k0, idx(1)));
      const ExprRef sum = bf16_pair_dot(b.get(acc), get_every_other(a, k1, count), get_every_other(x, k1, count),
                                        get_every_other(a, k0, count), get_every_other(x, k0, count));
      b.assign(acc, count < kLanes ? select(lanes_below(count), sum, b.get(acc)) : sum);
    };
    const int64_t pairs = K / 2, whole = pairs / kLanes * kLanes;
    if (whole > 0) b.for_range("t", idx(0), idx(whole), kLanes, [&](ExprRef t0) { chunk(t0, kLanes); });
    if (pairs > whole) chunk(idx(whole), pairs - whole);
    if (K % 2) {
      const ExprRef lane = broadcast(idx(pairs % kLanes), kLanes);
      const ExprRef last_a = broadcast(get(a, idx(K - 1)), kLanes);
      const ExprRef last_x = broadcast(get(x, idx(K - 1)), kLanes);
      // its zero partner first: -0 + +0 is +0
      const ExprRef last = bf16_pair_dot(b.get(acc), zero(kLanes), zero(kLanes), last_a, last_x);
      b.assign(acc, select(binary(Op::Eq, iota(kLanes), lane), last, b.get(acc)));
    }
    const ExprRef v = b.let("lanes", b.get(acc));
    std::vector<ExprRef> m8;
    for (int l = 0; l < 8; ++l) m8.push_back(add(extract(v, l), extract(v, l + 8)));
    std::vector<ExprRef> n4;
    for (int i = 0; i < 4; ++i) n4.push_back(add(m8[size_t(2 * i)], m8[size_t(2 * i + 1)]));
    return add(add(n4[0], n4[1]), add(n4[2], n4[3]));
  }
  // gemv 'N' over k in [k0, k1) for the columns e .. e + lanes - 1: y = ((y0 + B0) + B1) + ...,
  // B_i a pair chain from +0 over the k block [k0 + 8i, k0 + 8i + 8) (the last may be shorter).
  // y0 may be null: y starts at -0, which B0 joins exactly.
  ExprRef gemv_n_pair_blocks(const Row& x, const Matrix& v, const ExprRef& e, int lanes, int64_t k0, int64_t k1, ExprRef y0) const {
    // V's row k and x's element k as the factors of one lane.
    auto factors = [&](ExprRef k) {
      const ExprRef xk = get(x, k);
      return std::pair<ExprRef, ExprRef>{get(Row{&v, k}, e, lanes), lanes > 1 ? broadcast(xk, lanes) : xk};
    };
    auto block = [&](const ExprRef& kb, int64_t count) {
      ExprRef acc = zero(lanes);
      for (int64_t t = 0; t + 1 < count; t += 2) {
        auto [v_odd, x_odd] = factors(add(kb, idx(t + 1)));
        auto [v_even, x_even] = factors(t ? add(kb, idx(t)) : kb);
        acc = bf16_pair_dot(std::move(acc), v_odd, x_odd, v_even, x_even);
      }
      if (count % 2) {  // after its zero partner (+0)
        auto [v_last, x_last] = factors(add(kb, idx(count - 1)));
        acc = bf16_pair_dot(std::move(acc), zero(lanes), zero(lanes), v_last, x_last);
      }
      return acc;
    };
    const int y = b.local("gemv.y", Type{ScalarType::f32, lanes});
    ExprRef minus_zero = constant(kF32, -0.0);
    b.assign(y, y0 ? std::move(y0) : lanes > 1 ? broadcast(minus_zero, lanes) : minus_zero);
    const int64_t blocks_end = k0 + (k1 - k0) / 8 * 8;
    if (blocks_end > k0) b.for_range("kb", idx(k0), idx(blocks_end), 8, [&](ExprRef kb) { b.assign(y, add(b.get(y), block(kb, 8))); });
    if (k1 > blocks_end) b.assign(y, add(b.get(y), block(idx(blocks_end), k1 - blocks_end)));
    return b.get(y);
  }
  // K blocks of the general kernel: one up to 384, two (the larger first) up to 1536, else
  // 768-blocks and the remainder last (measured on 1 and 2 threads up to K = 2600; unlike sgemm,
  // the shape of C does not change them).
  static std::vector<int64_t> bf16_k_blocks(int64_t K) {
    if (K <= 384) return {K};
    if (K <= 1536) return {K - K / 2, K / 2};
    std::vector<int64_t> parts;
    for (int64_t k = 0; k < K; k += 768) parts.push_back(std::min<int64_t>(768, K - k));
    return parts;
  }

  // ---- K blocks of the general sgemm: one block up to 384; up to 768 two blocks (the larger
  // first); beyond, 384-blocks until at most 768 remain, which split in two again. When both
  // dimensions of C are at least 192 (measured: 176 and 191 still split, 192 does not), uniform
  // 384-blocks and the remainder last.
  static std::vector<int64_t> k_blocks(int64_t K, int64_t n, int64_t m) {
    constexpr int64_t kc = 384;
    if (K > 2 * kc && n >= 192 && m >= 192) return uniform_k_blocks(K);
    std::vector<int64_t> parts;
    int64_t rest = K;
    while (rest > 2 * kc) {
      parts.push_back(kc);
      rest -= kc;
    }
    if (rest > kc) {
      parts.push_back(rest - rest / 2);
      parts.push_back(rest / 2);
    } else if (rest > 0) {
      parts.push_back(rest);
    }
    return parts;
  }
  // 384-blocks over K, the remainder last.
  static std::vector<int64_t> uniform_k_blocks(int64_t K) {
    std::vector<int64_t> parts;
    for (int64_t k = 0; k < K; k += 384) parts.push_back(std::min<int64_t>(384, K - k));
    return parts;
  }
  // n independent blocked chains (see blocked_chain) of `lanes` lanes sharing one k loop per K
  // block: chain t steps acc_t = fma(x, y, acc_t) from +0, where (x, y) = factors(t, k) (after
  // each k's `at_k`, which binds what the chains share), and its result is ((sums[t] + b0) + b1)
  // + ..., sums[t] left out when null. Each chain has blocked_chain's bits; sharing the loop keeps
  // the fma pipes busy where one chain at a time waited on its latency.
  std::vector<ExprRef> blocked_chains(const std::vector<int64_t>& parts, int lanes, std::vector<ExprRef> sums,
                                      const std::function<void(ExprRef)>& at_k,
                                      const std::function<std::pair<ExprRef, ExprRef>(size_t, ExprRef)>& factors) const {
    // One K block [begin, end) of every chain, each from +0: the chains' locals.
    // `length`: the block's length where it is a constant (the pair order needs it), else -1.
    auto block_chains = [&](ExprRef begin, ExprRef end, int64_t length) {
      std::vector<int> acc;
      for (size_t t = 0; t < sums.size(); ++t) {
        acc.push_back(b.local("chain", Type{ScalarType::f32, lanes}));
        b.assign(acc.back(), zero(lanes));
      }
      if (!pairs) {
        b.for_range("k", std::move(begin), std::move(end), 1, [&](const ExprRef& k) {
          at_k(k);
          for (size_t t = 0; t < sums.size(); ++t) {
            auto [x, y] = factors(t, k);
            b.assign(acc[t], fma(std::move(x), std::move(y), b.get(acc[t])));
          }
        });
        return acc;
      }
      if (length < 0) throw Error("internal: the pair order of a K block of unknown length");
      // Every chain's factors at k_odd, then at k_even (null: the zero partner), then one pair step each.
      auto pair_step = [&](const ExprRef& k_odd, const ExprRef& k_even) {
        std::vector<std::pair<ExprRef, ExprRef>> odd(sums.size()), even(sums.size());
        if (k_odd) {
          pair_half = PairHalf::odd;
          at_k(k_odd);
          for (size_t t = 0; t < sums.size(); ++t) odd[t] = factors(t, k_odd);
        }
        pair_half = PairHalf::even;
        at_k(k_even);
        for (size_t t = 0; t < sums.size(); ++t) even[t] = factors(t, k_even);
        pair_half = PairHalf::none;
        for (size_t t = 0; t < sums.size(); ++t) {
          auto [x_odd, y_odd] = k_odd ? odd[t] : std::pair<ExprRef, ExprRef>{zero(lanes), zero(lanes)};
          b.assign(acc[t], bf16_pair_dot(b.get(acc[t]), x_odd, y_odd, even[t].first, even[t].second));
        }
      };
      const ExprRef pairs_end = b.let("pairs_end", add(begin, idx(length / 2 * 2)));
      b.for_range("k", begin, pairs_end, 2, [&](ExprRef k) { pair_step(b.let("k_odd", add(k, idx(1))), k); });
      // the last pair's zero partner first: -0 + +0 is +0 (a flushed sum may be -0)
      if (length % 2) pair_step(nullptr, pairs_end);
      return acc;
    };
    // Blocks of one length (the last may be shorter) run as a loop over the blocks: the same
    // sums, with one copy of the k loop's code instead of one per block (codegen time grows with
    // the code). Chains without C0 (the callers give all or none) start their totals at -0,
    // which the first block's sum joins exactly: -0 + x is x for every x, -0 included.
    bool loop = parts.size() >= 2 && !pairs;
    for (size_t i = 0; loop && i < parts.size(); ++i) loop = parts[i] == parts[0] || (i + 1 == parts.size() && parts[i] < parts[0]);
    if (!loop) {
      int64_t k0 = 0;
      for (int64_t part : parts) {
        const std::vector<int> acc = block_chains(idx(k0), idx(k0 + part), part);
        for (size_t t = 0; t < sums.size(); ++t) {
          ExprRef block = times(b.get(acc[t]), block_alpha);
          sums[t] = b.let("blocks", sums[t] ? add(sums[t], block) : block);
        }
        k0 += part;
      }
      return sums;
    }
    const int64_t K = std::accumulate(parts.begin(), parts.end(), int64_t(0)), block = parts[0];
    std::vector<int> total;
    for (size_t t = 0; t < sums.size(); ++t) {
      total.push_back(b.local("blocks", Type{ScalarType::f32, lanes}));
      ExprRef minus_zero = constant(kF32, -0.0);
      b.assign(total.back(), sums[t] ? sums[t] : lanes > 1 ? broadcast(minus_zero, lanes) : minus_zero);
    }
    b.for_range("k_block", idx(0), idx(K), block, [&](ExprRef kb) {
      const std::vector<int> acc = block_chains(kb, binary(Op::Min, add(kb, idx(block)), idx(K)), -1);
      for (size_t t = 0; t < sums.size(); ++t) b.assign(total[t], add(b.get(total[t]), times(b.get(acc[t]), block_alpha)));
    });
    for (size_t t = 0; t < sums.size(); ++t) sums[t] = b.let("blocks", b.get(total[t]));
    return sums;
  }
  // The same with one factor shared by every chain: fma(shared(k), own(t, k), acc_t).
  std::vector<ExprRef> blocked_chains(const std::vector<int64_t>& parts, int lanes, std::vector<ExprRef> sums,
                                      const std::function<ExprRef(ExprRef)>& shared,
                                      const std::function<ExprRef(size_t, ExprRef)>& own) const {
    ExprRef s;
    return blocked_chains(
        parts, lanes, std::move(sums), [&](ExprRef k) { s = b.let("shared_k", shared(std::move(k))); },
        [&](size_t t, ExprRef k) { return std::pair<ExprRef, ExprRef>{s, own(t, std::move(k))}; });
  }

  // C[j][i] for the keys i of row j of the general 'T','N' kernel, each a scalar blocked chain
  // over K (x: A_j, y: B_i, `scale_b` applied to B's element), kChainGroup keys per k loop.
  static constexpr int64_t kChainGroup = 8;
  void general_row_nt(const Matrix& a, const Matrix& bm, const Matrix& c, const ExprRef& j, int64_t m, const std::vector<int64_t>& parts,
                      const std::function<ExprRef(ExprRef)>& scale_b) const {
    const Row x{&a, j};
    auto keys = [&](ExprRef i0, int64_t n) {
      std::vector<Row> ys;
      for (int64_t t = 0; t < n; ++t) ys.push_back(Row{&bm, t ? b.let("key", add(i0, idx(t))) : i0});
      const std::vector<ExprRef> sums = blocked_chains(
          parts, 1, std::vector<ExprRef>(static_cast<size_t>(n)), [&](ExprRef k) { return get(x, std::move(k)); },
          [&](size_t t, ExprRef k) { return scale_b(get(ys[t], std::move(k))); });
      for (size_t t = 0; t < ys.size(); ++t) store(c, j, ys[t].row, sums[t]);
    };
    const int64_t full = m - m % kChainGroup;
    if (full > 0) b.for_range("i", idx(0), idx(full), kChainGroup, [&](ExprRef i0) { keys(i0, kChainGroup); });
    if (m % kChainGroup) keys(idx(full), m % kChainGroup);
  }

  // Rows [j0, j1) of the general 'T','N' kernel, as general_row_nt computes them, with the chains
  // of 16 keys at a time as the lanes of a vector: those keys' elements (scaled) are copied
  // k-major into scratch, and several rows of C run side by side. Lane t of a row's vector chain
  // is key t's scalar chain step for step, so the bits are general_row_nt's. With AVX-512's 32
  // registers a block is 6 rows by 32 keys (12 chains: enough to cover the fma latency on both
  // pipes, and 8 loads per 12 fmas), else 4 rows by 16 keys; the rows past the last block go one
  // at a time (a loop: less code to compile than another unrolled block). The keys past the
  // last 16 take general_row_nt.
  void general_nt_vectors(const Matrix& a, const Matrix& bm, const Matrix& c, int64_t j0, int64_t j1, int64_t m, int64_t K,
                          const std::vector<int64_t>& parts, const std::function<ExprRef(ExprRef)>& scale_b) const {
    constexpr int kKeys = 16;
    const int64_t kRows = wide_registers() ? 6 : 4, kGroups = wide_registers() ? 2 : 1;
    const int64_t groups = m / kKeys;
    // In the pair order, where the K blocks pair k + 1 with every even k (global_pairs), the copy
    // holds pair words (pair_word): row p is the pair (2p + 1, 2p) of every key, an odd K's last
    // pair with a zero odd factor.
    const bool words = pairs && global_pairs(parts);
    // The keys [i0, i0 + G * 16) against rows [j0, j1).
    auto key_block = [&](int kt, ExprRef i0, int64_t G) {
      const int64_t width = G * kKeys;
      // Row k of the copy at the block's key t: in the block's own copy, or in the (batch, head)'s.
      const ExprRef origin = packed ? b.let("packed_key", add(packed->first_key, i0)) : nullptr;
      auto at = [&](const ExprRef& k, ExprRef t) {
        return packed ? add(mul(k, idx(packed->stride)), add(origin, std::move(t))) : add(mul(k, idx(width)), std::move(t));
      };
      auto copy_keys = [&] {
        b.for_range("t", idx(0), idx(width), 1, [&](ExprRef t) {
          const Row y{&bm, add(i0, t)};
          if (!words) return b.for_range("k", idx(0), idx(K), 1, [&](ExprRef k) { b.store(kt, at(k, t), scale_b(get(y, k))); });
          b.for_range("p", idx(0), idx(K / 2), 1, [&](ExprRef p) {
            const ExprRef k = b.let("k_even", mul(p, idx(2)));
            b.store(kt, at(p, t), pair_word(scale_b(get(y, add(k, idx(1)))), scale_b(get(y, k))));
          });
          if (K % 2) b.store(kt, at(idx(K / 2), t), pair_word(zero(1), scale_b(get(y, idx(K - 1)))));
        });
      };
      if (packed) b.if_(packed->fill, copy_keys);
      else copy_keys();
      auto rows = [&](ExprRef r0, int64_t n) {
        std::vector<ExprRef> js;
        for (int64_t u = 0; u < n; ++u) js.push_back(u ? b.let("j", add(r0, idx(u))) : r0);
        // Chain t is row js[t / G] at keys i0 + 16 (t % G) ...: the key vectors are shared by
        // the rows, a row's element (broadcast) by the key vectors.
        std::vector<ExprRef> keys_k(static_cast<size_t>(G)), words_k(static_cast<size_t>(G));
        const std::vector<ExprRef> sums = blocked_chains(
            parts, kKeys, std::vector<ExprRef>(static_cast<size_t>(n * G)),
            [&](ExprRef k) {
              if (!words) {
                for (int64_t g = 0; g < G; ++g) keys_k[size_t(g)] = b.let("keys_k", load(b.kernel(), kt, at(k, idx(g * kKeys)), kKeys));
                return;
              }
              for (int64_t g = 0; g < G; ++g)
                keys_k[size_t(g)] = pair_factor(words_k[size_t(g)], [&] {
                  return b.let("key_words", load(b.kernel(), kt, at(binary(Op::Shr, k, idx(1)), idx(g * kKeys)), kKeys));
                });
            },
            [&](size_t t, ExprRef k) {
              return std::pair<ExprRef, ExprRef>{keys_k[t % size_t(G)], broadcast(get(Row{&a, js[t / size_t(G)]}, std::move(k)), kKeys)};
            });
        for (size_t t = 0; t < sums.size(); ++t) {
          const int64_t g = int64_t(t % size_t(G));
          store(c, js[t / size_t(G)], g ? add(i0, idx(g * kKeys)) : i0, sums[t]);
        }
      };
      const int64_t n = j1 - j0, full = j0 + n / kRows * kRows;
      if (full > j0) b.for_range("j", idx(j0), idx(full), kRows, [&](ExprRef r0) { rows(r0, kRows); });
      if (n % kRows) b.for_range("j", idx(full), idx(j1), 1, [&](ExprRef j) { rows(j, 1); });
    };
    if (groups > 0) {
      const int kt = packed ? packed->buffer : b.buffer("keys_t", ScalarType::f32, true, Extent::scratch, K * kKeys * std::min(groups, kGroups));
      const int64_t blocks = groups / kGroups;
      if (blocks > 0)
        b.for_range("key_block", idx(0), idx(blocks), 1, [&](ExprRef g) { key_block(kt, b.let("i0", mul(g, idx(kGroups * kKeys))), kGroups); });
      if (const int64_t rest = groups % kGroups; rest > 0) key_block(kt, idx(blocks * kGroups * kKeys), rest);
    }
    if (m % kKeys == 0) return;
    const int64_t done = groups * kKeys;
    const Matrix rest_keys{bm.buffer, add(bm.base, idx(done * bm.stride)), bm.stride, bm.align, bm.step, bm.ld};
    const Matrix rest_out{c.buffer, add(c.base, idx(done)), c.stride, c.align, c.step, c.ld};
    b.for_range("j", idx(j0), idx(j1), 1, [&](ExprRef j) { general_row_nt(a, rest_keys, rest_out, j, m - done, parts, scale_b); });
  }

  // Rows [j0, j1) of the general 'N','N' kernel: C[j][e] = ((C0 + b0) + b1) + ..., b_i one fma
  // chain from +0 over K block i (`parts`) in k order, times block_alpha; C0 = c0(j, e, lanes),
  // left out where null (all or none); V's elements pass through scale_v.
  // Several rows of C and column vectors share one k loop, each element still its own
  // blocked_chain step for step: one chain at a time waited on its fma latency, and a row at a
  // time read all of V's block for every row. On a CPU target nn_block_rows() rows share each
  // load of V, with as many column vectors (up to 4) as keep the accumulators within
  // accumulator_registers(); the rows past the last block go one at a time (a loop, not another
  // unrolled block: less code to compile). CUDA keeps one row per step (a thread's registers,
  // not vector registers).
  void general_nn_rows(const Matrix& p, const Matrix& v, const Matrix& c, int64_t j0, int64_t j1, int64_t m, const std::vector<int64_t>& parts,
                       const std::function<ExprRef(const ExprRef& j, const ExprRef& e, int lanes)>& c0,
                       const std::function<ExprRef(ExprRef)>& scale_v) const {
    const int lanes = column_lanes(m);
    const int64_t vectors = m / lanes;
    const int64_t registers = std::max(1, lanes / register_floats);
    const int64_t rows = vector_chains ? nn_block_rows() : 1;
    auto group_for = [&](int64_t block_rows) {
      const int64_t max_group = vector_chains ? std::max<int64_t>(1, accumulator_registers() / (block_rows * registers)) : 4;
      for (int64_t g : {4, 2})
        if (g <= max_group && vectors % g == 0) return g;
      return int64_t(1);
    };
    // In the pair order, where the K blocks pair k + 1 with every even k (global_pairs), V is first
    // copied as pair words (pair_word): row p of the copy holds V's rows 2p + 1 and 2p, an odd
    // K's last row with a zero odd factor. The copy costs a pass over
    // V per call; reading two bf16 rows per pair instead took two shifts and two ors per 16
    // products, on the port vdpbf16ps runs on (P @ v took a fifth longer than q @ k^T).
    int64_t K = 0;
    for (int64_t part : parts) K += part;
    const bool words = pairs && global_pairs(parts);
    const Matrix v_words{words ? b.buffer("v_words", ScalarType::f32, true, Extent::scratch, (K + 1) / 2 * m) : -1, idx(0), m};
    auto copy_pair = [&](const ExprRef& p, bool has_odd) {
      const ExprRef k = b.let("k_even", mul(p, idx(2)));
      b.for_range("e", idx(0), idx(m), lanes, [&](ExprRef e) {
        const ExprRef odd = has_odd ? scale_v(get(Row{&v, add(k, idx(1))}, e, lanes)) : zero(lanes);
        b.store(v_words.buffer, add(mul(p, idx(m)), e), pair_word(odd, scale_v(get(Row{&v, k}, e, lanes))));
      });
    };
    if (words && K / 2 > 0) b.for_range("p", idx(0), idx(K / 2), 1, [&](ExprRef p) { copy_pair(p, true); });
    if (words && K % 2) copy_pair(idx(K / 2), false);
    auto row_block = [&](ExprRef r0, int64_t n) {
      const int64_t group = group_for(n);
      std::vector<ExprRef> js;
      for (int64_t u = 0; u < n; ++u) js.push_back(u ? b.let("j", add(r0, idx(u))) : r0);
      b.for_range("e", idx(0), idx(m), lanes * group, [&](ExprRef e0) {
        std::vector<ExprRef> es, c0s;
        for (int64_t g = 0; g < group; ++g) es.push_back(g ? b.let("e", add(e0, idx(g * lanes))) : e0);
        for (const ExprRef& j : js)
          for (const ExprRef& e : es) c0s.push_back(c0(j, e, lanes));
        // Chain t is row js[t / group] at columns es[t % group]: V's k row is shared by the rows,
        // P[j][k] (broadcast) by the column vectors.
        std::vector<ExprRef> v_k(es.size()), words_k(es.size());
        const size_t G = es.size();
        const std::vector<ExprRef> sums = blocked_chains(
            parts, lanes, c0s,
            [&](ExprRef k) {
              if (!words) {
                for (size_t g = 0; g < G; ++g) v_k[g] = b.let("v_k", scale_v(get(Row{&v, k}, es[g], lanes)));
                return;
              }
              for (size_t g = 0; g < G; ++g)
                v_k[g] = pair_factor(words_k[g], [&] { return b.let("v_words_k", get(Row{&v_words, binary(Op::Shr, k, idx(1))}, es[g], lanes)); });
            },
            [&](size_t t, ExprRef k) {
              ExprRef pk = get(Row{&p, js[t / G]}, std::move(k));
              return std::pair<ExprRef, ExprRef>{lanes > 1 ? broadcast(pk, lanes) : pk, v_k[t % G]};
            });
        for (size_t t = 0; t < sums.size(); ++t) store(c, js[t / G], es[t % G], sums[t]);
      });
    };
    const int64_t n = j1 - j0, full = j0 + n / rows * rows;
    if (full > j0) b.for_range("j", idx(j0), idx(full), rows, [&](ExprRef r0) { row_block(r0, rows); });
    if (j1 > full) b.for_range("j", idx(full), idx(j1), 1, [&](ExprRef j) { row_block(j, 1); });
  }

  // The blocked chain: ((C0 + b0) + b1) + ..., with C0 left out when absent.
  ExprRef blocked_chain(const std::vector<int64_t>& parts, int lanes, const std::function<ExprRef(ExprRef)>& x,
                        const std::function<ExprRef(ExprRef)>& y, ExprRef c0) const {
    ExprRef sum = std::move(c0);
    int64_t k = 0;
    for (int64_t p : parts) {
      ExprRef block = times(chain(k, k + p, lanes, x, y), block_alpha);
      sum = sum ? b.let("blocks", add(sum, block)) : block;
      k += p;
    }
    return sum;
  }
};

// MKL's small-matrix kernel for 'T','N' takes these shapes (measured on one thread, n, m >= 2).
bool takes_pst(int64_t m, int64_t n, int64_t K) { return (m == 2 && n <= 15) || (m == 3 && n <= 10) || (4 <= m && m <= 11 && n < m && K <= m); }

// Whether the Intel host's general sgemm kernel copies (packs) MKL's A operand, which it then
// scales by alpha, rather than multiplying each K block's sum by alpha (measured with the
// attention backward's calls, docs/research/torch2.15-attention-backward.md; with alpha = 1 the
// two agree). On one thread 'T','N' copies the key rows when m >= 192, or m > n and
// m >= max(12, K); 'N','N' and 'N','T' copy V when both sides of C are at least 192. `threaded`:
// MKL on 2 threads, which runs a call of m*n*K > 192000 (192000 is not threaded, 192003 is;
// measured with smalln-shaped and general 'T','N' calls) otherwise: 'T','N' copies when n >= 57
// and m >= 57 (with at most 15 rows and a leading dimension a multiple of 256 it is two calls,
// intel_nt_key_cut); 'N','N' when n >= 57 and
// m >= 57, 'N','T' when n >= 57, and both when n >= 17, m >= 32 and a leading dimension (V's lda,
// P's ldb, C's ldc: the backward's gradients are H*E apart) is a multiple of 256. Fitted with
// 2 threads on grids of the backward's shapes, then per unit step at each bound with direct calls
// (E 8 to 256, H 1 to 4; docs/research/torch2.15-attention-backward.md §4.6).
constexpr int64_t kIntelThreadedWork = 192000;  // MKL threads a call of more
bool intel_nt_copies(int64_t n, int64_t m, int64_t K, bool threaded) {
  if (threaded && m * n * K > kIntelThreadedWork) return n >= 57 && m >= 57;
  return m >= 192 || (m > n && m >= std::max<int64_t>(12, K));
}
// A threaded 'T','N' call of at most 15 rows (not smalln's shape) with a leading dimension that
// is a multiple of 256 (lda: the key rows', ldb: the query rows', ldc: C's) runs as two one-thread
// calls over its keys, cut at 16*ceil(ceil(m/2)/16): each part takes the kernel and copy rule of a
// call of its own shape (fitted on 2 threads with the strides of PyTorch's tensors, docs/research/
// torch2.15-attention-backward.md §4.6). The cut, or 0 where the call is not cut.
int64_t intel_nt_key_cut(int64_t n, int64_t m, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  if (n > 15 || m * n * K <= kIntelThreadedWork || (lda % 256 != 0 && ldb % 256 != 0 && ldc % 256 != 0)) return 0;
  const int64_t cut = 16 * (((m + 1) / 2 + 15) / 16);
  return cut < m ? cut : 0;
}
bool intel_nn_copies(int64_t n, int64_t m, int64_t K, bool threaded, bool transposed_b, int64_t lda, int64_t ldb, int64_t ldc) {
  if (threaded && m * n * K > kIntelThreadedWork) {
    const bool ld256 = lda % 256 == 0 || ldb % 256 == 0 || ldc % 256 == 0;
    return (transposed_b ? n >= 57 : n >= 57 && m >= 57) || (n >= 17 && m >= 32 && ld256);
  }
  return m >= 192 && n >= 192;
}

// A 'T','N' call of smalln's shape (2 <= n < 16, K >= 24n) that MKL threads runs the general
// kernel without copying (alpha on each K block's sum) instead of smalln, unless n <= 3 or a
// leading dimension (lda: the key rows', ldb: the query rows', ldc: C's) is a multiple of 256.
// Then MKL cuts the keys at 16*ceil(ceil(m/2)/16); only m = 33..35 leaves a part of 1 to 3 keys,
// which runs the small-matrix kernel (3 keys only for n <= 10). Fitted on 2 threads, 0 of 2898
// random shapes differ (docs/research/torch2.15-attention-backward.md §4.6). With K >= 756 MKL
// cuts K instead, past any attention head dim.
bool intel_threaded_smalln_is_general(int64_t n, int64_t m, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  return m * n * K > kIntelThreadedWork && n >= 4 && lda % 256 != 0 && ldb % 256 != 0 && ldc % 256 != 0;
}

// How a threaded 'N','N' call with K over 768 and beta = 0 (the composites' p @ v and dq) sums
// each element, by its n rows and m columns of C and the row strides of P, V and C:
//   one_thread_chain  384-blocks while more than 768 remain, then the rest in two halves (the
//                     one-thread chain, without its uniform blocks for wide C);
//   uniform           384-blocks, the rest last;
//   k_split           K cut at ceil(K/2), each half summed in its own blocks, the halves added.
// Fitted on 2 threads (0 of 410 random shapes and 757 boundary shapes differ; the same through
// torch's composite on 40; docs/research/torch2.15-attention.md). A leading dimension matters
// through the multiples of 256; offsets do not.
enum class IntelLongK { one_thread_chain, uniform, k_split };
IntelLongK intel_threaded_long_k(int64_t n, int64_t m, int64_t K, int64_t ldp, int64_t ldv, int64_t ldc) {
  if (n * m * K <= kIntelThreadedWork) return IntelLongK::one_thread_chain;  // not threaded
  if (m <= 56 && n >= 379 && (ldp % 256 != 0 || m <= 31)) return IntelLongK::one_thread_chain;  // rows cut between threads
  if (n <= 56 && 379 <= m && m <= 755 && (n <= 16 || (ldv % 256 != 0 && ldc % 256 != 0 && ldp % 256 != 0)))
    return IntelLongK::one_thread_chain;  // columns cut between threads
  if (8 * std::min(n, m) > K && (std::max(n, m) >= 379 || 3 * n + m + 241 >= K)) return IntelLongK::uniform;
  return IntelLongK::k_split;
}

// The AMD host: its small-matrix kernel takes m < 12, n < 4 or K <= 1 (m: the columns of C, n its
// rows; n, m >= 2); on 2 threads MKL runs a call of 5..11 rows, not a multiple of 4, as its rows in
// fours (the general kernel) and the rest (the small-matrix one), when the call is large enough:
// K >= 17, or m >= 17 with K >= 5, or m >= 101 with K >= 2 (measured with the backward's calls,
// docs/research/torch2.15-attention-backward.md section 4.1; no forward shape falls outside).
bool amd_takes_pst(int64_t m, int64_t n, int64_t K) { return m < 12 || n < 4 || K <= 1; }
bool amd_splits_fours(int64_t n, int64_t m, int64_t K) {
  return n < 12 && n % 4 != 0 && (K >= 17 || (m >= 17 && K >= 5) || (m >= 101 && K >= 2));
}

void emit_amd_nt(Builder& b, const GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, Matrix a, const Matrix& bm,
                 const Matrix& c, bool threaded, int64_t n_call, float alpha);
void emit_amd_nn(Builder& b, const GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, const Matrix& p, const Matrix& v,
                 const Matrix& c, bool accumulate, bool threaded, const ExprRef& c_align, int64_t n_call, float alpha);
void emit_intel_nn(Builder& b, const GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, const Matrix& p,
                   const Matrix& v, const Matrix& c, bool accumulate, bool threaded, const ExprRef& c_align_at, int64_t n_call,
                   float alpha);

// On 3 threads (the Intel host, sgemm, measured with direct calls on 2 cores): MKL threads a
// product of m*n*K > 144000 that is not a gemv; its gemv 'N' (one row of p @ v) cuts K in three
// when K >= 384 and m is outside 41..69; its gemv 'T' (one query or one key of q @ k^T, `rows` the
// other side) cuts the rows in three when (rows/3)*K >= 4096 and rows*(K + 288) > 41680. Every
// other call gives one thread's bits, which the model reproduces; the splits it does not.
bool intel_three_threads_as_one(bool nt, int64_t n, int64_t m, int64_t K) {
  if (K == 1) return true;
  if (nt && (n == 1 || m == 1)) {
    const int64_t rows = n == 1 ? m : n;
    return rows == 1 || !(rows / 3 * K >= 4096 && rows * (K + 288) > 41680);
  }
  if (!nt && n == 1) return K < 384 || (41 <= m && m <= 69);
  return m * n * K <= 144000;
}

// Whether a call on order.threads threads, more than 2, gives one thread's bits (and runs by the
// one-thread model): on 3 threads of the Intel host's sgemm, intel_three_threads_as_one.
bool more_threads_as_one(const GemmOrder& order, GemmInputs inputs, bool nt, int64_t n, int64_t m, int64_t K) {
  return order.kind != GemmOrder::Kind::MklAmd && inputs == GemmInputs::f32 && order.threads == 3 &&
         intel_three_threads_as_one(nt, n, m, K);
}

// MKL's splits of a threaded call were measured on 2 threads (and which calls 3 threads leave
// whole, more_threads_as_one). For a launch of one (batch, head) PyTorch calls MKL outside its
// parallel loop, on all its threads, so on more than 2 that launch is refused here unless the
// call gives one thread's bits (the kernels refuse the loop's launches themselves, by
// mkl_threading).
void refuse_unmeasured_threads(Builder& b, const GemmOrder& order, bool threaded) {
  if (threaded && order.threads > 2)
    b.refuse_launch(1, fmt::format("one (batch, head) with torch on {} threads: PyTorch then runs MKL on all of them, and MKL's "
                                   "splits of a call are measured on 2 threads only (docs/research/torch2.15-attention.md); "
                                   "give the order threads=2 or threads=1 if torch ran on that many",
                                   order.threads));
}

// gemm_bf16bf16f32 on an Intel host with avx512_bf16 (GemmOrder::Kind::MklIntelAvx512Bf16),
// measured against torch 2.15 and with direct calls (docs/research/torch2.15-attention.md): vdpbf16ps
// kernels, each adding a pair of products to a lane, (lane + p[k+1]) + p[k]. The products of two
// bf16 values are exact in f32, so an fma step is the instruction's add; it reads subnormal inputs
// as zeros and flushes each subnormal sum to zero (measured: with v near 1e-36 or 1e-38 the
// unflushed chains differ from torch in most outputs, the flushed ones in none), while the sums
// of the K blocks, C0 and the gemv's final lane tree are plain adds.
//   'T','N': one query (n == 1) or one key (m == 1): gemv_t_pairs per element, times alpha;
//            otherwise every element a pair chain over bf16_k_blocks, each block's sum times alpha,
//            added in order (alpha measured with the backward's scale: no operand is scaled
//            first, at any size). No smalln or pst kernel, and MKL's threads (a cut of the keys)
//            leave every element's bits alone.
//   'N','N': one query row: gemv_n_pair_blocks; MKL on 2 threads outside PyTorch's loop cuts K at
//            ceil(K/2) when D > 32 (measured for D = 33..256; up to 32 not), the first half from
//            C0, the second from -0, the halves added. Otherwise the pair chains after C0.
void emit_intel_bf16_nt(Builder& b, const GemmOrder& order, int64_t n, int64_t m, int64_t K, const Matrix& a, const Matrix& bm,
                        const Matrix& c, int64_t n_call, float alpha, const PackedKeys* packed) {
  Emitter E{b};
  if (n_call == 1 || m == 1) {  // gemv 'T' over the key rows (one query) or the query rows (one key)
    const Row x = n_call == 1 ? Row{&a, idx(0)} : Row{&bm, idx(0)};
    const Matrix& rows = n_call == 1 ? bm : a;
    b.for_range("r", idx(0), idx(n_call == 1 ? m : n), 1, [&](ExprRef r) {
      const ExprRef y = Emitter::times(E.gemv_t_pairs(Row{&rows, r}, x, K), alpha);
      if (n_call == 1) E.store(c, idx(0), r, y);
      else E.store(c, r, idx(0), y);
    });
    return;
  }
  E.register_floats = order.register_floats;
  E.pairs = true;
  E.block_alpha = alpha;
  E.packed = packed;
  const std::vector<int64_t> parts = Emitter::bf16_k_blocks(K);
  const std::function<ExprRef(ExprRef)> keys = [](ExprRef y) { return y; };
  if (order.vector_chains) return E.general_nt_vectors(a, bm, c, 0, n, m, K, parts, keys);
  b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) { E.general_row_nt(a, bm, c, j, m, parts, keys); });
}

void emit_intel_bf16_nn(Builder& b, const GemmOrder& order, int64_t n, int64_t m, int64_t K, const Matrix& p, const Matrix& v,
                        const Matrix& c, bool accumulate, bool threaded) {
  Emitter E{b};
  if (n == 1) {
    const Row x{&p, idx(0)};
    const bool k_split = threaded && order.threads > 1 && K > 1 && m > 32;
    E.gemv_n_columns(0, m, [&](ExprRef e, int lanes) {
      ExprRef y0 = accumulate ? E.stored(c, idx(0), e, lanes) : nullptr;
      if (!k_split) return E.store(c, idx(0), e, E.gemv_n_pair_blocks(x, v, e, lanes, 0, K, std::move(y0)));
      const int64_t half = (K + 1) / 2;
      const ExprRef first = b.let("half", E.gemv_n_pair_blocks(x, v, e, lanes, 0, half, std::move(y0)));
      E.store(c, idx(0), e, add(first, E.gemv_n_pair_blocks(x, v, e, lanes, half, K, nullptr)));
    });
    return;
  }
  E.register_floats = order.register_floats;
  E.vector_chains = order.vector_chains;
  E.pairs = true;
  E.general_nn_rows(
      p, v, c, 0, n, m, Emitter::bf16_k_blocks(K),
      [&](const ExprRef& j, const ExprRef& e, int lanes) { return accumulate ? E.stored(c, j, e, lanes) : nullptr; },
      [](ExprRef y) { return y; });
}

}  // namespace

MklThreading mkl_threading(const GemmOrder& order, GemmInputs inputs, bool outside_loop) {
  if (order.threads == 1) return MklThreading::one_thread;
  if (outside_loop) return order.threads == 2 ? MklThreading::two_threads : MklThreading::unmeasured;
  if (order.kind == GemmOrder::Kind::MklAmd || inputs != GemmInputs::f32) return MklThreading::one_thread;
  return order.threads == 2 && order.mkl_threads == 2 ? MklThreading::two_threads : MklThreading::unmeasured;
}

bool gemm_call_threaded(bool launch_threaded, bool outside_loop, int64_t n, int64_t m) {
  return launch_threaded && (outside_loop || (n > 1 && m > 1));
}

std::string unmeasured_loop_threads(const GemmOrder& order) {
  if (order.threads > 2)
    return fmt::format("torch on {} threads: PyTorch's parallel loop then runs MKL with {} threads on its first thread and {} "
                       "(mkl_threads) on the others, and MKL's splits of a call are measured on 2 threads only "
                       "(docs/research/torch2.15-attention.md); give the order threads=2 or threads=1 if torch ran on that many",
                       order.threads, order.threads, order.mkl_threads);
  return fmt::format("torch on 2 threads with MKL's own thread count mkl_threads={}: PyTorch's parallel loop then runs MKL with 2 "
                     "threads on its first thread and {} on the other, and that mix is not measured "
                     "(docs/research/torch2.15-attention.md); mkl_threads=2 is what MKL takes on a 2-core host",
                     order.mkl_threads, order.mkl_threads);
}

// The general kernel: not a gemv (one row or one column; in bf16 too), not smalln, not pst; on the
// AMD host not the small-matrix kernel, nor a call its threads would split in fours.
bool gemm_nt_splits_rows(const GemmOrder& order, GemmInputs inputs, int64_t n_call, int64_t m, int64_t K) {
  if (inputs == GemmInputs::bf16 && order.kind == GemmOrder::Kind::MklIntelAvx512Bf16) return n_call > 1 && m > 1;
  if (order.kind == GemmOrder::Kind::MklAmd) return n_call > 1 && m > 1 && !amd_takes_pst(m, n_call, K) && !amd_splits_fours(n_call, m, K);
  return n_call > 1 && m > 1 && !(K >= 24 * n_call && n_call < 16) && !takes_pst(m, n_call, K);
}
bool gemm_nn_splits_rows(const GemmOrder& order, GemmInputs, int64_t n_call, int64_t m, int64_t K) {
  if (order.kind == GemmOrder::Kind::MklAmd) return n_call > 1 && m > 1 && !amd_takes_pst(m, n_call, K) && !amd_splits_fours(n_call, m, K);
  return n_call > 1;
}

std::optional<float> gemm_nn_beta0_start(const GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, bool threaded) {
  const bool on_threads = threaded && order.threads > 1;
  if (n < 2 || K < 2) return std::nullopt;
  if (inputs == GemmInputs::bf16 && order.kind == GemmOrder::Kind::MklIntelAvx512Bf16) return -0.0f;  // the pair chains after C0
  if (order.kind == GemmOrder::Kind::MklAmd) {  // AmdEmitter::general_nn
    if (m < 2 || amd_takes_pst(m, n, K) || (inputs == GemmInputs::f16 && on_threads) || (on_threads && amd_splits_fours(n, m, K)))
      return std::nullopt;
    return 0.0f;
  }
  if (on_threads && K > 768) return std::nullopt;  // emit_intel_nn's K split, beta = 0 only
  return -0.0f;
}

// On the AMD host only the f32 split in fours (amd_splits_fours) and gemm_bf16bf16f32's key split
// (12 <= m: a half below 12 keys takes the small-matrix kernel) differ from one thread on 2
// threads. More threads are not measured, so there every call counts as differing.
bool gemm_threads_matter(const GemmOrder& order, GemmInputs inputs, bool nt, int64_t n, int64_t m, int64_t K) {
  if (order.threads == 1) return false;
  // 3 threads: the loop's other threads run MKL on mkl_threads, whose calls below 192000 (2
  // threads) or 144000 (3) and whose gemv inside the loop are one thread's too.
  if (more_threads_as_one(order, inputs, nt, n, m, K) && order.mkl_threads <= 3) return false;
  if (order.kind != GemmOrder::Kind::MklAmd || order.threads > 2) return true;  // more than 2: unmeasured
  if (inputs != GemmInputs::f32) return true;
  return n > 1 && m > 1 && !amd_takes_pst(m, n, K) && amd_splits_fours(n, m, K);
}

void emit_naive_nt(Builder& b, int64_t n, int64_t m, int64_t K, const Matrix& a, const Matrix& bm, const Matrix& c) {
  const Emitter E{b};
  b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) {
    b.for_range("i", idx(0), idx(m), 1, [&](ExprRef i) {
      const int acc = b.local("naive", kF32);
      b.assign(acc, zero(1));
      b.for_range("k", idx(0), idx(K), 1, [&](ExprRef k) { b.assign(acc, add(b.get(acc), mul(E.get(Row{&a, j}, k), E.get(Row{&bm, i}, k)))); });
      E.store(c, j, i, b.get(acc));
    });
  });
}
void emit_naive_nn(Builder& b, int64_t n, int64_t m, int64_t K, const Matrix& p, const Matrix& v, const Matrix& c) {
  const Emitter E{b};
  b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) {
    b.for_range("e", idx(0), idx(m), 1, [&](ExprRef e) {
      const int acc = b.local("naive", kF32);
      b.assign(acc, zero(1));
      b.for_range("k", idx(0), idx(K), 1, [&](ExprRef k) { b.assign(acc, add(b.get(acc), mul(E.get(Row{&p, j}, k), E.get(Row{&v, k}, e)))); });
      E.store(c, j, e, b.get(acc));
    });
  });
}

namespace {
// The packed keys of a call over the keys from `first` on of another's.
PackedKeys packed_from(Builder& b, const PackedKeys* packed, int64_t first) {
  if (!packed) return {};
  return PackedKeys{packed->buffer, packed->stride, b.let("packed_key", add(packed->first_key, idx(first))), packed->fill};
}
}  // namespace

void emit_gemm_nt(Builder& b, const GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, const Matrix& a,
                  const Matrix& bm, const Matrix& c, bool threaded, int64_t n_call, float alpha, const PackedKeys* packed) {
  if (n_call == 0) n_call = n;
  if (n_call != n && !gemm_nt_splits_rows(order, inputs, n_call, m, K))
    throw Error(fmt::format("internal: q @ k^T of {} rows emitted in part ({} rows) outside MKL's general kernel", n_call, n));
  if (threaded && order.threads > 2 && more_threads_as_one(order, inputs, true, n_call, m, K)) threaded = false;
  refuse_unmeasured_threads(b, order, threaded);
  if (inputs == GemmInputs::bf16 && order.kind == GemmOrder::Kind::MklIntelAvx512Bf16)
    return emit_intel_bf16_nt(b, order, n, m, K, a, bm, c, n_call, alpha, packed);
  const Emitter E{b};
  // Intel, alpha: the result of gemv, smalln and pst times alpha; the general kernel packs the key
  // rows (MKL's A) times alpha when it copies them, else multiplies each K block's sum.
  auto scaled = [alpha](ExprRef y) { return Emitter::times(std::move(y), alpha); };
  const bool split = threaded && order.threads > 1;
  // gemm_bf16bf16f32's gemv 'T' and its threaded key split are the same on both hosts.
  // alpha (measured): the gemv scales the matrix operand (fused with its sum on the Intel host);
  // the others as in f32 on the AMD host (emit_amd_nt), and on the Intel host as below.
  if (inputs == GemmInputs::bf16 && (n_call == 1 || m == 1)) {  // bf16 gemv 'T': 4 lanes
    const Row x = n_call == 1 ? Row{&a, idx(0)} : Row{&bm, idx(0)};
    const Matrix& rows = n_call == 1 ? bm : a;
    const bool fused = order.kind != GemmOrder::Kind::MklAmd;
    b.for_range("r", idx(0), idx(n_call == 1 ? m : n), 1, [&](ExprRef r) {
      const ExprRef y = E.gemv_t4(Row{&rows, r}, x, K, alpha, fused);
      if (n_call == 1) E.store(c, idx(0), r, y);
      else E.store(c, r, idx(0), y);
    });
    return;
  }
  // gemm_f16f16f32 on the Intel host converts both operands to f32 and enters the sgemm kernels
  // below past their gemv branches: one query or one key takes smalln, pst or the general kernel
  // (measured on an Intel host without avx512_fp16, docs/research/torch2.15-attention-f16.md).
  const bool intel_f16 = inputs == GemmInputs::f16 && order.kind != GemmOrder::Kind::MklAmd;
  // MKL's small-matrix kernel (pst), every row j its own dot, paired for even j, times alpha; on
  // the keys from first_key on.
  auto emit_pst = [&](int64_t first_key) {
    for (int64_t j = 0; j < n; ++j)
      b.for_range("i", idx(first_key), idx(m), 1,
                  [&](ExprRef i) { E.store(c, idx(j), i, scaled(E.halve(E.dot16(Row{&a, idx(j)}, Row{&bm, i}, 0, K, j % 2 == 0)))); });
  };
  if (inputs == GemmInputs::bf16 && order.kind != GemmOrder::Kind::MklAmd && split && m == 3 && 11 <= n_call && n_call <= 15) {
    // Threaded, gemm_bf16bf16f32 on the Intel host cuts 3 keys' 11..15 query rows at row 6 and runs
    // both parts by pst, whatever a part alone would take (measured on 2 threads with K = E up to
    // 256, docs/research/torch2.15-attention-backward.md §5.5). Row 6 is even, so each row's
    // pairing is the whole call's.
    emit_pst(0);
    return;
  }
  if (inputs != GemmInputs::f32 && order.kind == GemmOrder::Kind::MklAmd && split && m == 3 && n_call >= 11)
    b.refuse_launch(1, fmt::format("one (batch, head) on 2 threads with a 16-bit block of 3 keys against {} queries: MKL on an "
                                   "AMD host cuts that product's rows at a place not found (docs/research/torch2.15-attention.md); "
                                   "the order reproduces it on 1 thread, or with 2 or more (batch, head)s",
                                   n_call));
  if (inputs != GemmInputs::f32 && split && (m >= 4 || (intel_f16 && m >= 2))) {
    // Threaded, gemm_bf16bf16f32 cuts the keys in two, floor(m/2) and the rest, and runs each part
    // as a call of its own (its kernel chosen by that part's shape, and on the Intel host its place
    // of alpha too). Fitted on 2 threads: 1938 shapes with n up to 32, m up to 512 and K from 8 to
    // 256 agree but for m = 3 with n >= 11: on the Intel host the cut above; on the AMD host left
    // unsplit here and not reproduced (docs/research/torch2.15-attention.md). gemm_f16f16f32 on the
    // Intel host cuts every m >= 2 the same way, one query included (measured on 2 threads).
    const int64_t half = m / 2;
    emit_gemm_nt(b, order, inputs, n, half, K, a, bm, c, false, n_call, alpha, packed);
    const Matrix rest_keys{bm.buffer, b.let("keys_rest", add(bm.base, idx(half * bm.stride))), bm.stride, bm.align, 1, bm.ld};
    const Matrix rest_out{c.buffer, b.let("out_rest", add(c.base, idx(half))), c.stride, c.align, 1, c.ld};
    const PackedKeys rest_packed = packed_from(b, packed, half);
    emit_gemm_nt(b, order, inputs, n, m - half, K, a, rest_keys, rest_out, false, n_call, alpha, packed ? &rest_packed : nullptr);
    return;
  }
  if (order.kind == GemmOrder::Kind::MklAmd) return emit_amd_nt(b, order, inputs, n, m, K, a, bm, c, threaded, n_call, alpha);
  if (n_call == 1 && !intel_f16) {  // one query: gemv 'T' over the key rows
    const Row x{&a, idx(0)};
    E.gemv_t(m, K, split, [&](ExprRef i, Emitter::RowKind kind) { E.store(c, idx(0), i, scaled(E.gemv_t_row(Row{&bm, i}, x, K, kind))); });
    return;
  }
  if (m == 1 && !intel_f16) {  // one key: gemv 'T' over the query rows
    const Row x{&bm, idx(0)};
    E.gemv_t(n, K, split, [&](ExprRef j, Emitter::RowKind kind) { E.store(c, j, idx(0), scaled(E.gemv_t_row(Row{&a, j}, x, K, kind))); });
    return;
  }
  const bool smalln_shape = K >= 24 * n_call && n_call < 16 && n_call >= 2;
  if (smalln_shape && split && inputs == GemmInputs::f32 && intel_threaded_smalln_is_general(n_call, m, K, bm.mkl_ld(), a.mkl_ld(), c.mkl_ld())) {
    if (K >= 756) throw Error(fmt::format("internal: MKL's threaded K split of a smalln-shaped call (K = {}) is not modelled", K));
    const int64_t pst_from = m >= 33 && m <= 35 && (m < 35 || n_call <= 10) ? 32 : m;
    Emitter general{b};
    general.register_floats = order.register_floats;
    general.block_alpha = alpha;
    const std::vector<int64_t> parts = Emitter::k_blocks(K, n_call, m);
    const std::function<ExprRef(ExprRef)> keys = [](ExprRef y) { return y; };
    general.packed = packed;  // the keys as they are
    if (order.vector_chains) general.general_nt_vectors(a, bm, c, 0, n, pst_from, K, parts, keys);
    else b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) { general.general_row_nt(a, bm, c, j, pst_from, parts, keys); });
    if (pst_from < m) emit_pst(pst_from);  // the last part of 1 to 3 keys
    return;
  }
  if (smalln_shape) {
    b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) {
      b.for_range("i", idx(0), idx(m), 1,
                  [&](ExprRef i) { E.store(c, j, i, scaled(E.fold_smalln(E.dot16(Row{&a, j}, Row{&bm, i}, 0, K, false)))); });
    });
    return;
  }
  if (split && inputs == GemmInputs::f32) {  // (smalln's shape returned above)
    if (const int64_t cut = intel_nt_key_cut(n_call, m, K, bm.mkl_ld(), a.mkl_ld(), c.mkl_ld())) {
      emit_gemm_nt(b, order, inputs, n, cut, K, a, bm, c, false, n_call, alpha, packed);
      const Matrix rest_keys{bm.buffer, b.let("keys_rest", add(bm.base, idx(cut * bm.stride))), bm.stride, bm.align, 1, bm.ld};
      const Matrix rest_out{c.buffer, b.let("out_rest", add(c.base, idx(cut))), c.stride, c.align, 1, c.ld};
      const PackedKeys rest_packed = packed_from(b, packed, cut);
      emit_gemm_nt(b, order, inputs, n, m - cut, K, a, rest_keys, rest_out, false, n_call, alpha, packed ? &rest_packed : nullptr);
      return;
    }
  }
  // gemm_f16f16f32 (Intel) also runs one key of up to 15 query rows by pst.
  if (takes_pst(m, n_call, K) || (intel_f16 && m == 1 && n_call <= 15)) {
    emit_pst(0);
    return;
  }
  const std::vector<int64_t> parts = Emitter::k_blocks(K, n_call, m);
  // gemm_bf16bf16f32 runs a threaded call as one-thread calls (the key cut above): its alpha
  // follows the one-thread rule (measured: A pre-scaled iff m >= 192, or m > n and m >= K).
  const bool copies = intel_nt_copies(n_call, m, K, split && inputs == GemmInputs::f32);
  Emitter general{b};  // the key rows scaled as packed, or each K block's sum
  general.register_floats = order.register_floats;
  if (!copies) general.block_alpha = alpha;
  const std::function<ExprRef(ExprRef)> keys = [&](ExprRef y) { return copies ? scaled(std::move(y)) : y; };
  if (!copies || alpha == 1.0f) general.packed = packed;  // the keys as they are
  if (order.vector_chains) return general.general_nt_vectors(a, bm, c, 0, n, m, K, parts, keys);
  b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) { general.general_row_nt(a, bm, c, j, m, parts, keys); });
}

void emit_gemm_nn(Builder& b, const GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, const Matrix& p,
                  const Matrix& v, const Matrix& c, bool accumulate, bool threaded, const ExprRef& c_align_at, int64_t n_call, float alpha) {
  if (n_call == 0) n_call = n;
  if (alpha != 1.0f && inputs != GemmInputs::f32) throw Error("internal: where MKL applies alpha is measured for sgemm only");
  if (threaded && order.threads > 2 && more_threads_as_one(order, inputs, false, n_call, m, K)) threaded = false;
  refuse_unmeasured_threads(b, order, threaded);
  if (n_call != n && !gemm_nn_splits_rows(order, inputs, n_call, m, K))
    throw Error(fmt::format("internal: p @ v of {} rows emitted in part ({} rows) outside MKL's general kernel", n_call, n));
  if (inputs == GemmInputs::bf16 && order.kind == GemmOrder::Kind::MklIntelAvx512Bf16)
    return emit_intel_bf16_nn(b, order, n, m, K, p, v, c, accumulate, threaded);
  auto host_kernels = [&] {
    if (order.kind == GemmOrder::Kind::MklAmd)
      emit_amd_nn(b, order, inputs, n, m, K, p, v, c, accumulate, threaded, c_align_at, n_call, alpha);
    else
      emit_intel_nn(b, order, inputs, n, m, K, p, v, c, accumulate, threaded, c_align_at, n_call, alpha);
  };
  // K = 1, beta = 0, one (batch, head): on both hosts bmm over a single matrix stores each rounded
  // product as it is, with no sum from +0 (measured: products of -0 stay -0 there, and become +0
  // with several matrices or K = 2; the composite's backward with S_q = 1 shows it in dv and dk).
  if (K == 1 && !accumulate && alpha == 1.0f && inputs == GemmInputs::f32) {
    if (order.kind == GemmOrder::Kind::MklAmd && m == 1) throw Error("internal: the AMD model's p @ v of one column (D = 1) is not measured");
    const Emitter E{b};
    b.if_else(
        binary(Op::Eq, grid_extent(0), idx(1)),
        [&] {
          b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) {
            b.for_range("e", idx(0), idx(m), 1, [&](ExprRef e) { E.store(c, j, e, mul(E.get(Row{&p, j}, idx(0)), E.get(Row{&v, idx(0)}, e))); });
          });
        },
        host_kernels);
    return;
  }
  host_kernels();
}

namespace {

// The Intel host's p @ v (emit_gemm_nn).
void emit_intel_nn(Builder& b, const GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, const Matrix& p,
                   const Matrix& v, const Matrix& c, bool accumulate, bool threaded, const ExprRef& c_align_at, int64_t n_call,
                   float alpha) {
  if (c_align_at->op != Op::Const) throw Error("internal: the Intel model's p @ v takes a constant alignment of C");
  const int64_t c_align = c_align_at->imm_i;
  // alpha: gemv 'N' and the K = 1 product multiply each element of P (MKL's B) by it first; the
  // general kernel packs V (MKL's A) times alpha when it copies, else multiplies each K block's sum.
  const bool copies =
      n_call > 1 &&
      intel_nn_copies(n_call, m, K, threaded && order.threads > 1, p.step != 1, v.mkl_ld(), p.step != 1 ? p.step : p.mkl_ld(), c.mkl_ld());
  Emitter E{b};
  E.x_alpha = alpha;
  if (!copies) E.block_alpha = alpha;
  E.vector_chains = order.vector_chains;
  E.register_floats = order.register_floats;
  if (inputs == GemmInputs::bf16 && n_call == 1) {  // bf16 gemv 'N': even and odd k apart
    const Row x{&p, idx(0)};
    const bool halves = threaded && order.threads > 1 && K > 1 && m > 32;
    const int lanes = m % 16 == 0 ? 16 : 8;
    b.for_range("e", idx(0), idx(m), lanes, [&](ExprRef e) {
      const ExprRef y0 = accumulate ? E.stored(c, idx(0), e, lanes) : nullptr;
      if (!halves) {
        E.store(c, idx(0), e, E.gemv_n_pairs(x, v, e, lanes, 0, K, y0));
        return;
      }
      // Threaded (fitted on 2 threads, E > 32): K cut at ceil(K/2), C0 into the first half.
      const int64_t h = (K + 1) / 2;
      const ExprRef first = b.let("half", E.gemv_n_pairs(x, v, e, lanes, 0, h, y0));
      E.store(c, idx(0), e, add(first, E.gemv_n_pairs(x, v, e, lanes, h, K, nullptr)));
    });
    return;
  }

  // gemm_f16f16f32 (Intel) has no gemv 'N': one query row takes the general kernel below.
  if (n_call == 1 && inputs != GemmInputs::f16) {  // one query row: gemv 'N'
    const Row x{&p, idx(0)};
    auto y0 = [&](const ExprRef& e, int lanes) { return accumulate ? E.stored(c, idx(0), e, lanes) : nullptr; };
    auto plain = [&](int64_t e0, int64_t e1) {
      E.gemv_n_columns(e0, e1, [&](ExprRef e, int lanes) { E.store(c, idx(0), e, E.gemv_n_value(x, v, e, lanes, 0, K, y0(e, lanes))); });
    };
    if (threaded && order.threads > 1) {
      // MKL's threaded gemv 'N' (fitted on 2 threads). A large K outside 40 < E < 70 is cut at
      // ceil(K/2): each half summed from +0, the halves added, then added to C0.
      if (K >= 256 && !(40 < m && m < 70)) {
        const int64_t h = (K + 1) / 2;
        E.gemv_n_columns(0, m, [&](ExprRef e, int lanes) {
          const ExprRef first = b.let("half", E.gemv_n_value(x, v, e, lanes, 0, h, nullptr));
          const ExprRef halves = add(first, E.gemv_n_value(x, v, e, lanes, h, K, nullptr));
          E.store(c, idx(0), e, accumulate ? add(y0(e, lanes), halves) : halves);
        });
        return;
      }
      // Else a product large enough is cut by columns at a 64-byte line of C: the first part
      // takes ceil(lines / 2) lines; each part is a gemv 'N' of its own.
      if (K * (m + 288) > 41680) {
        const int64_t a = c_align % 16;
        const int64_t lines = (a + m + 15) / 16;
        const int64_t cut = 16 * ((lines + 1) / 2) - a;
        if (lines >= 3 && cut > 0 && cut < m) {
          plain(0, cut);
          plain(cut, m);
          return;
        }
      }
    }
    plain(0, m);
    return;
  }
  const int lanes = column_lanes(m);
  // Threaded with a K over 768 (without C0: the products PyTorch's composites make), MKL sums by
  // one of intel_threaded_long_k's forms; in its K split each thread sums its half in blocks (one
  // up to 384, two halves up to 768, else 384-blocks and the rest), and the halves are added.
  // 'N','T' (P transposed) keeps the K split, measured with a small side of C only.
  std::optional<IntelLongK> long_k;
  if (threaded && order.threads > 1 && K > 768 && !accumulate)
    long_k = p.step == 1 ? intel_threaded_long_k(n_call, m, K, p.mkl_ld(), v.mkl_ld(), c.mkl_ld()) : IntelLongK::k_split;
  const bool k_split = long_k == IntelLongK::k_split;
  if (k_split && alpha != 1.0f) throw Error("internal: the Intel model's threaded K split is measured with alpha = 1 only");
  auto half_blocks = [](int64_t h) { return h <= 768 ? Emitter::k_blocks(h, 1, 1) : Emitter::uniform_k_blocks(h); };
  const int64_t h = (K + 1) / 2;
  std::vector<int64_t> parts = K == 1 && accumulate ? std::vector<int64_t>{} : Emitter::k_blocks(K, n_call, m);
  if (long_k == IntelLongK::one_thread_chain) parts = Emitter::k_blocks(K, 1, 1);
  if (long_k == IntelLongK::uniform) parts = Emitter::uniform_k_blocks(K);
  auto scale_v = [&](ExprRef y) { return copies ? Emitter::times(std::move(y), alpha) : y; };
  if (!k_split && !parts.empty()) {
    E.general_nn_rows(p, v, c, 0, n, m, parts,
                      [&](const ExprRef& j, const ExprRef& e, int lanes) { return accumulate ? b.let("c0", E.stored(c, j, e, lanes)) : nullptr; },
                      scale_v);
    return;
  }
  b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) {
    b.for_range("e", idx(0), idx(m), lanes, [&](ExprRef e) {
      const Row x{&p, j};
      auto pk = [&](ExprRef k) {
        ExprRef p = E.get(x, std::move(k));
        return lanes > 1 ? broadcast(p, lanes) : p;
      };
      auto vk = [&](ExprRef k) { return scale_v(E.get(Row{&v, std::move(k)}, e, lanes)); };
      if (k_split) {
        const ExprRef first = b.let("half", E.blocked_chain(half_blocks(h), lanes, pk, vk, nullptr));
        auto pk2 = [&](ExprRef k) { return pk(add(k, idx(h))); };
        auto vk2 = [&](ExprRef k) { return vk(add(k, idx(h))); };
        E.store(c, j, e, add(first, E.blocked_chain(half_blocks(K - h), lanes, pk2, vk2, nullptr)));
        return;
      }
      if (parts.empty()) {  // K = 1 with beta = 1: one fma into C, P's element times alpha
        const ExprRef p0 = Emitter::times(E.get(x, idx(0)), alpha);
        E.store(c, j, e, fma(lanes > 1 ? broadcast(p0, lanes) : p0, E.get(Row{&v, idx(0)}, e, lanes), E.stored(c, j, e, lanes)));
        return;
      }
      E.store(c, j, e, E.blocked_chain(parts, lanes, pk, vk, accumulate ? E.stored(c, j, e, lanes) : nullptr));
    });
  });
}

}  // namespace

// ---- The AMD host (GemmOrder::Kind::MklAmd). MKL runs its generic kernels here, measured
// against torch 2.15.0 on an AMD EPYC with AVX-512 and avx512_bf16 (docs/research/torch2.15-attention.md):
//   sse row   (gemv 'T', and the small-matrix kernel's 'T','N') y = A_r . x: every product rounded,
//             no fma. The first `peel` products summed in order from +0 into lane 0 of a 4-lane
//             accumulator (the others 0); then, by the row's kind, "four": 4 products per step
//             added lane-wise; "pair": products 8t..8t+3 into one accumulator and 8t+4..8t+7 into
//             another, which are then added; "second": 8 per step into one accumulator, its first
//             four then its last four; then (l0 + l2) + (l1 + l3), then the rest in order.
//             gemv 'T' rows of whole 4-row blocks are "four" and peel up to A_r's 16-byte
//             boundary (1 to 4 products); the rows left over peel up to x's ("pair", the second
//             of a left-over pair "second"). The small-matrix kernel peels C[j][i]'s dot product
//             up to the query row's boundary (0 to 3 products), "four" for the keys of whole
//             4-key blocks, "pair" for the rest.
//   sse col   (gemv 'N', and the small-matrix kernel's 'N','N') C[j][e] = C0 + sum_k P[j][k] V[k][e]:
//             products rounded, no fma. The columns before C's row reaches a 16-byte boundary
//             (0 to 3): per group of 8 k, t0 = (((y + p0) + p1) + p2) + p3, t1 = ((p4 + p5) + p6)
//             + p7, y = t0 + t1 (y from C0, or +0), then the last K mod 8 in order; every other
//             column one sequential sum from C0 (or +0).
//   chain     the general kernel: an fma chain from +0 per K block (amd_k_blocks), the block sums
//             added in order after C0, which is +0 when beta = 0 (measured: a sum whose terms
//             are -0 or underflow to it is +0, not the -0 an fma chain alone leaves).
//   K = 1     with beta = 0 and bmm over a single matrix: each rounded product stored as it is
//             (emit_amd_nn).
//   bf16 gemv 'T' as the Intel host's without avx512_bf16 (gemv_t4); 'N': per group of 4 k,
//             y = y + ((p0 + p2) + (p1 + p3)) from C0 (or +0), then the last K mod 4 products
//             from the last k down. Every other bf16 product is converted to f32 into MKL's own
//             aligned buffers and takes the f32 kernels with the query rows at a boundary.
namespace {

// K <= 192: one block; up to 384: two of floor(K/2), then one of 1 when K is odd; beyond: blocks
// of 192 and the rest last.
std::vector<int64_t> amd_k_blocks(int64_t K) {
  constexpr int64_t kc = 192;
  if (K <= kc) return {K};
  if (K <= 2 * kc) {
    std::vector<int64_t> parts = {K / 2, K / 2};
    if (K % 2) parts.push_back(1);
    return parts;
  }
  std::vector<int64_t> parts(size_t(K / kc), kc);
  if (K % kc) parts.push_back(K % kc);
  return parts;
}

struct AmdEmitter : Emitter {
  enum class SseRow { Four, Pair, Second };
  float alpha = 1.0f;  // the call's alpha; each kernel applies it where MKL does (emit_gemm_nt, emit_gemm_nn)

  // x * alpha, rounded (x itself when alpha is 1).
  ExprRef scaled(ExprRef x) const {
    if (alpha == 1.0f) return x;
    ExprRef a = constant(kF32, static_cast<double>(alpha));
    const int lanes = x->type.lanes;
    return mul(std::move(x), lanes > 1 ? broadcast(a, lanes) : a);
  }

  static Type v4() { return Type{ScalarType::f32, 4}; }
  ExprRef lane0_of4(ExprRef s) const {
    return select(binary(Op::Eq, iota(4), broadcast(idx(0), 4)), broadcast(std::move(s), 4), zero(4));
  }
  ExprRef products4(const Row& a, const Row& x, ExprRef k) const { return mul(get(a, k, 4), get(x, k, 4)); }

  // The sse row kernel: A_r . x over K, `peel` scalar products first (see the top of this part).
  ExprRef sse_row(const Row& a, const Row& x, int64_t K, int64_t peel, SseRow kind) const {
    peel = std::min(peel, K);
    ExprRef s = zero(1);
    for (int64_t k = 0; k < peel; ++k) s = add(s, mul(get(a, idx(k)), get(x, idx(k))));
    s = b.let("peel", s);
    const int64_t step = kind == SseRow::Four ? 4 : 8;
    const int64_t done = peel + (K - peel) / step * step;
    const int acc = b.local("sse", v4());
    b.assign(acc, lane0_of4(s));
    if (kind == SseRow::Pair) {
      const int second = b.local("sse.b", v4());
      b.assign(second, zero(4));
      if (done > peel)
        b.for_range("k", idx(peel), idx(done), 8, [&](ExprRef k) {
          b.assign(acc, add(b.get(acc), products4(a, x, k)));
          b.assign(second, add(b.get(second), products4(a, x, add(k, idx(4)))));
        });
      b.assign(acc, add(b.get(acc), b.get(second)));
    } else if (done > peel) {
      b.for_range("k", idx(peel), idx(done), step, [&](ExprRef k) {
        b.assign(acc, add(b.get(acc), products4(a, x, k)));
        if (kind == SseRow::Second) b.assign(acc, add(b.get(acc), products4(a, x, add(k, idx(4)))));
      });
    }
    const ExprRef l = b.let("sse.lanes", b.get(acc));
    ExprRef h = add(add(extract(l, 0), extract(l, 2)), add(extract(l, 1), extract(l, 3)));
    for (int64_t k = done; k < K; ++k) h = add(h, mul(get(a, idx(k)), get(x, idx(k))));
    return h;
  }

  // gemv 'T': y[r] = rows_r . x for r < count.
  void gemv_t(const Matrix& rows, const Row& x, int64_t x_align, int64_t count, int64_t K,
              const std::function<void(ExprRef r, ExprRef y)>& store_row) const {
    const int64_t blocks_end = count / 4 * 4;
    const int64_t row_peel = 4 - rows.align % 4, x_peel = 4 - x_align % 4;
    if (blocks_end > 0)
      b.for_range("r", idx(0), idx(blocks_end), 1,
                  [&](ExprRef r) { store_row(r, sse_row(Row{&rows, r}, x, K, row_peel, SseRow::Four)); });
    for (int64_t r = blocks_end; r < count; ++r) {
      const SseRow kind = r == blocks_end + 1 && count - blocks_end >= 2 ? SseRow::Second : SseRow::Pair;
      store_row(idx(r), sse_row(Row{&rows, idx(r)}, x, K, count == 1 ? row_peel : x_peel, kind));
    }
  }

  // The small-matrix kernel 'T','N' for the query rows [j0, j1): C[j][i] = A_j . B_i.
  void pst_nt(const Matrix& a, const Matrix& bm, const Matrix& c, int64_t j0, int64_t j1, int64_t m, int64_t K) const {
    const int64_t peel = (4 - (a.align + j0 * a.stride) % 4) % 4;
    const int64_t blocks_end = m / 4 * 4;
    b.for_range("j", idx(j0), idx(j1), 1, [&](ExprRef j) {
      if (blocks_end > 0)
        b.for_range("i", idx(0), idx(blocks_end), 1,
                    [&](ExprRef i) { store(c, j, i, scaled(sse_row(Row{&a, j}, Row{&bm, i}, K, peel, SseRow::Four))); });
      if (m > blocks_end)
        b.for_range("i", idx(blocks_end), idx(m), 1,
                    [&](ExprRef i) { store(c, j, i, scaled(sse_row(Row{&a, j}, Row{&bm, i}, K, peel, SseRow::Pair))); });
    });
  }

  // The sse col kernel for row j of C over its m columns: x = P_j. `peel` (i64, 0 .. 3, may depend
  // on program_id): the columns before C's row reaches a 16-byte boundary.
  void sse_cols(const Matrix& p, const Matrix& v, const Matrix& c, const ExprRef& j, int64_t m, int64_t K, bool accumulate,
                const ExprRef& peel) const {
    const Row x{&p, j};
    auto product = [&](ExprRef k, const ExprRef& e, int lanes) {
      ExprRef xk = scaled(get(x, k));
      return mul(get(Row{&v, std::move(k)}, e, lanes), lanes > 1 ? broadcast(xk, lanes) : xk);
    };
    const int64_t fixed = peel->op == Op::Const ? peel->imm_i : -1;
    const int64_t peel_columns = fixed >= 0 ? std::min(fixed, m) : std::min<int64_t>(3, m);
    // The peeled columns' values first: C0 is read before the chains overwrite it.
    std::vector<ExprRef> peeled;
    for (int64_t e = 0; e < peel_columns; ++e) {
      const int y = b.local("peel.y", kF32);
      b.assign(y, accumulate ? stored(c, j, idx(e)) : zero(1));
      const int64_t groups_end = K / 8 * 8;
      if (groups_end > 0)
        b.for_range("k", idx(0), idx(groups_end), 8, [&](ExprRef kb) {
          auto pk = [&](int t) { return product(t ? add(kb, idx(t)) : kb, idx(e), 1); };
          const ExprRef t0 = add(add(add(add(b.get(y), pk(0)), pk(1)), pk(2)), pk(3));
          const ExprRef t1 = add(add(add(pk(4), pk(5)), pk(6)), pk(7));
          b.assign(y, add(t0, t1));
        });
      for (int64_t k = groups_end; k < K; ++k) b.assign(y, add(b.get(y), product(idx(k), idx(e), 1)));
      peeled.push_back(b.let("peeled", b.get(y)));
    }
    const int lanes = column_lanes(m);
    b.for_range("e", idx(0), idx(m), lanes, [&](ExprRef e) {
      const int y = b.local("chain", Type{ScalarType::f32, lanes});
      b.assign(y, accumulate ? stored(c, j, e, lanes) : zero(lanes));
      b.for_range("k", idx(0), idx(K), 1, [&](ExprRef k) { b.assign(y, add(b.get(y), product(k, e, lanes))); });
      store(c, j, e, b.get(y));
    });
    for (int64_t e = 0; e < peel_columns; ++e)
      store(c, j, idx(e), fixed >= 0 ? peeled[size_t(e)] : select(binary(Op::Lt, idx(e), peel), peeled[size_t(e)], stored(c, j, idx(e))));
  }

  // bf16 gemv 'N' for the columns e .. e + lanes - 1 (see the top of this part).
  ExprRef bf16_gemv_n(const Row& x, const Matrix& v, const ExprRef& e, int lanes, int64_t K, ExprRef y0) const {
    auto product = [&](ExprRef k) { return mul(get(Row{&v, k}, e, lanes), broadcast(get(x, k), lanes)); };
    const int y = b.local("gemv.y", Type{ScalarType::f32, lanes});
    b.assign(y, y0 ? std::move(y0) : zero(lanes));
    const int64_t groups_end = K / 4 * 4;
    if (groups_end > 0)
      b.for_range("k", idx(0), idx(groups_end), 4, [&](ExprRef k) {
        auto pk = [&](int t) { return product(t ? add(k, idx(t)) : k); };
        b.assign(y, add(b.get(y), add(add(pk(0), pk(2)), add(pk(1), pk(3)))));
      });
    for (int64_t k = K - 1; k >= groups_end; --k) b.assign(y, add(b.get(y), product(idx(k))));
    return b.get(y);
  }

  // The general kernel for rows [j0, j1) of C.
  void general_nt(const Matrix& a, const Matrix& bm, const Matrix& c, int64_t j0, int64_t j1, int64_t m, int64_t K) const {
    const std::vector<int64_t> parts = amd_k_blocks(K);
    auto scale_b = [&](ExprRef y) { return scaled(y); };
    if (vector_chains) return general_nt_vectors(a, bm, c, j0, j1, m, K, parts, scale_b);
    b.for_range("j", idx(j0), idx(j1), 1, [&](ExprRef j) { general_row_nt(a, bm, c, j, m, parts, scale_b); });
  }
  void general_nn(const Matrix& p, const Matrix& v, const Matrix& c, int64_t j0, int64_t j1, int64_t m, int64_t K, bool accumulate) const {
    // C0 is +0 without beta: a block sum of -0 (or one that underflows to it) ends as +0.
    general_nn_rows(p, v, c, j0, j1, m, amd_k_blocks(K),
                    [&](const ExprRef& j, const ExprRef& e, int lanes) { return accumulate ? b.let("c0", stored(c, j, e, lanes)) : zero(lanes); },
                    [&](ExprRef y) { return scaled(std::move(y)); });
  }
};

void emit_amd_nt(Builder& b, const GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, Matrix a, const Matrix& bm,
                 const Matrix& c, bool threaded, int64_t n_call, float alpha) {
  const AmdEmitter E{{b, 1.0f, 1.0f, order.vector_chains, order.register_floats}, alpha};
  if (a.stride % 4 != 0 || bm.stride % 4 != 0) throw Error("internal: the AMD model's q @ k^T takes rows of a multiple of 4 elements");
  if (inputs != GemmInputs::f32) a.align = 0;  // converted into MKL's aligned buffer
  // gemm_f16f16f32 has no gemv kernel: one query or key takes the small-matrix kernel.
  if (inputs == GemmInputs::f16) return amd_takes_pst(m, n_call, K) ? E.pst_nt(a, bm, c, 0, n, m, K) : E.general_nt(a, bm, c, 0, n, m, K);
  if (n_call == 1) {  // one query: gemv 'T' over the key rows
    E.gemv_t(bm, Row{&a, idx(0)}, a.align, m, K, [&](ExprRef i, ExprRef y) { E.store(c, idx(0), std::move(i), E.scaled(std::move(y))); });
    return;
  }
  if (m == 1) {  // one key: gemv 'T' over the query rows
    E.gemv_t(a, Row{&bm, idx(0)}, bm.align, n, K, [&](ExprRef j, ExprRef y) { E.store(c, std::move(j), idx(0), E.scaled(std::move(y))); });
    return;
  }
  if (amd_takes_pst(m, n_call, K)) return E.pst_nt(a, bm, c, 0, n, m, K);
  if (threaded && order.threads > 1 && amd_splits_fours(n_call, m, K)) {
    const int64_t fours = n_call / 4 * 4;
    E.general_nt(a, bm, c, 0, fours, m, K);
    E.pst_nt(a, bm, c, fours, n, m, K);
    return;
  }
  E.general_nt(a, bm, c, 0, n, m, K);
}

// The AMD model's kernels for p @ v (see emit_amd_nn).
void emit_amd_nn_kernels(Builder& b, const AmdEmitter& E, const GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K,
                         const Matrix& p, const Matrix& v, const Matrix& c, bool accumulate, bool threaded, const ExprRef& c_align,
                         int64_t n_call) {
  if (c.stride % 4 != 0) throw Error("internal: the AMD model's p @ v takes rows of C of a multiple of 4 floats");
  if (inputs == GemmInputs::bf16 && n_call == 1) {  // bf16 gemv 'N'
    const Row x{&p, idx(0)};
    const int lanes = column_lanes(m);
    b.for_range("e", idx(0), idx(m), lanes, [&](ExprRef e) {
      E.store(c, idx(0), e, E.bf16_gemv_n(x, v, e, lanes, K, accumulate ? E.stored(c, idx(0), e, lanes) : nullptr));
    });
    return;
  }
  // Every row of C starts at C's alignment (its stride is a multiple of 4 floats): the columns up
  // to the 16-byte boundary.
  const ExprRef peel = c_align->op == Op::Const ? idx((4 - c_align->imm_i % 4) % 4)
                                                : b.let("peel_columns", binary(Op::Rem, sub(idx(4), binary(Op::Rem, c_align, idx(4))), idx(4)));
  auto pst = [&](int64_t j0, int64_t j1) {
    b.for_range("j", idx(j0), idx(j1), 1, [&](ExprRef j) { E.sse_cols(p, v, c, j, m, K, accumulate, peel); });
  };
  if (n_call == 1 || amd_takes_pst(m, n_call, K)) return pst(0, n);  // gemv 'N' is the same kernel as the small-matrix one's rows
  if (threaded && order.threads > 1 && amd_splits_fours(n_call, m, K)) {
    const int64_t fours = n_call / 4 * 4;
    E.general_nn(p, v, c, 0, fours, m, K, accumulate);
    pst(fours, n);
    return;
  }
  E.general_nn(p, v, c, 0, n, m, K, accumulate);
}

void emit_amd_nn(Builder& b, const GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, const Matrix& p, const Matrix& v,
                 const Matrix& c, bool accumulate, bool threaded, const ExprRef& c_align, int64_t n_call, float alpha) {
  const AmdEmitter E{{b, 1.0f, 1.0f, order.vector_chains, order.register_floats}, alpha};
  if (m == 1) throw Error("internal: the AMD model's p @ v of one column (D = 1) is not measured");
  if (inputs == GemmInputs::f16 && threaded && order.threads > 1) {
    if (m <= 8) {  // one sequential sum per element from C0 (its products are exact)
      b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) {
        b.for_range("e", idx(0), idx(m), 1, [&](ExprRef e) {
          const int y = b.local("seq", Type{ScalarType::f32, 1});
          b.assign(y, accumulate ? E.stored(c, j, e) : zero(1));
          b.for_range("k", idx(0), idx(K), 1, [&](ExprRef k) { b.assign(y, add(b.get(y), mul(E.get(Row{&p, j}, k), E.get(Row{&v, k}, e)))); });
          E.store(c, j, e, b.get(y));
        });
      });
      return;
    }
    // The columns cut at floor(m/2), each part a one-thread call on its own columns of C.
    const int64_t h = m / 2;
    emit_amd_nn_kernels(b, E, order, inputs, n, h, K, p, v, c, accumulate, false, c_align, n_call);
    const Matrix v_rest{v.buffer, b.let("v_rest", add(v.base, idx(h))), v.stride, v.align, v.step, v.ld};
    const Matrix c_rest{c.buffer, b.let("c_rest", add(c.base, idx(h))), c.stride, c.align, c.step, c.ld};
    emit_amd_nn_kernels(b, E, order, inputs, n, m - h, K, p, v_rest, c_rest, accumulate, false, add(c_align, idx(h)), n_call);
    return;
  }
  emit_amd_nn_kernels(b, E, order, inputs, n, m, K, p, v, c, accumulate, threaded, c_align, n_call);
}

}  // namespace

}  // namespace ordo::gen
