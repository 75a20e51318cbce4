// Scaled-dot-product attention forward, per (batch, head) = row of the launch:
//   out[i] = sum_j p_ij v_j,  p_i = softmax_j(scale(q_i . k_j) + mask_ij), key j masked (-inf) when causal and j > i
//   lse[i] = log(sum_j exp(scale(q_i . k_j) + mask_ij))   (optional output, f32)
// mask: Request::mask's additive mask, added to the finished score (the flash orders; in log2
// units under exp2, the mask times log2(e)); a row whose every key is -inf gets out = 0 and
// lse = -inf.
//
// Program instance (row, block) holds the query rows block*L .. block*L + L-1 of its (batch,
// head) in the L vector lanes of every per-query value, so all arithmetic is lane by lane and
// one q.k or p.v step serves L queries. Lanes past the last query repeat the last query: they
// compute the same bits and store them to the same addresses, so every launch shape is served
// by one kernel with uniform control flow. The AttentionOrder (ir/order.hpp) decides the order
// of each dot product and reduction; see it for the three kinds.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "gen/blocks/constants.hpp"
#include "gen/blocks/math.hpp"
#include "gen/blocks/row.hpp"
#include "gen/blocks/warp.hpp"
#include "gen/gen.hpp"
#include "gen/blocks/attention_mask.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

// Threads per query row in flash's team form: halve the row's D dims between threads until each
// share is at most 128 (a thread's accumulator stays in registers), but only while each share is
// whole vectors of 8 dims: D = 136 stays on one thread (17 vectors), where two shares of 68 dims
// would have left dims 64..67 and 132..135 unwritten.
int flash_team_split(int64_t D) {
  int split = 1;
  while (D / split > 128 && D % (16 * split) == 0) split *= 2;
  return split;
}

constexpr float kInf = std::numeric_limits<float>::infinity();

// Keys whose scores are computed together, interleaved over d: independent dot products, so no
// bit depends on the count. Their accumulators (a vector of L query lanes each) should fill the
// fma pipes without spilling: 8 where an L-lane vector is one register, 12 registers' worth
// otherwise (6 keys of 16 lanes with AVX2; 8 keys spilled there and ran `fast` attention about
// 25% slower, measured on an AVX2 EPYC).
int key_group_for(const Request& r, int lanes) { return std::max(1, std::min(8, 12 / registers_per_vector(r, lanes))); }


// Whether x (f32, any lanes) is zero or has a magnitude in [2^range.lo, 2^range.hi), lane by
// lane; false for NaN and infinities.
struct Range {
  int lo, hi;
};
ExprRef magnitude_in(Builder& b, ExprRef x, Range range) {
  const int lanes = x->type.lanes;
  ExprRef mask = broadcast(constant(Type{ScalarType::i32, 1}, 0x7fffffff), lanes);
  ExprRef m = b.let("magnitude", bitcast(binary(Op::BitAnd, bitcast(std::move(x), ScalarType::i32), mask), ScalarType::f32));
  ExprRef inside = binary(Op::And, binary(Op::Le, f32c(std::ldexp(1.0f, range.lo), lanes), m),
                          binary(Op::Lt, m, f32c(std::ldexp(1.0f, range.hi), lanes)));
  return binary(Op::Or, inside, binary(Op::Eq, m, f32c(0.0f, lanes)));
}
// Whether every lane of a bool vector is true, as a scalar.
ExprRef all_lanes(const ExprRef& ok) {
  ExprRef r = extract(ok, 0);
  for (int l = 1; l < ok->type.lanes; ++l) r = binary(Op::And, r, extract(ok, l));
  return r;
}
// Whether p @ v rounds each product and partial sum to the storage type (PyTorch 1.13's bf16).
bool pv_rounds_each_step(const AttentionOrder& o) { return o.round_to_storage && o.pv_round_each_step; }

// exact-tiled bf16's p @ v split (Attention::accumulate_pv_bf16): the ranges of v and of p that
// make its cheaper operations give the general ones' bits.
constexpr Range kVRange{-40, 40}, kPRange{-78, 58};

// The value of an i64 constant (a key count known when the kernel is built), else nullopt.
std::optional<int64_t> constant_count(const ExprRef& e) {
  if (e->op == Op::Const) return e->imm_i;
  return std::nullopt;
}

struct Attention {
  const Request& r;
  const AttentionOrder& o;
  Builder& b;
  int64_t D, Sq, Sk;  // Sk: 0 when S_k is given at launch (sk_launch)
  int L;
  ScalarType storage;
  int q = -1, k = -1, v = -1, out = -1, lse = -1;  // arguments
  int qt = -1;  // scratch f32[D*L]: qt[d*L + l] = q[query of lane l][d]
  ExprRef query{};        // i64 x L: the query row of each lane
  ExprRef q_base{}, kv_base{}, lse_base{};
  // Only the log-sum-exp, into local lse_local (the backward's recomputation): flash() leaves out
  // the output accumulator and P @ v, which do not feed m and l.
  bool lse_only = false;
  int lse_local = -1;
  int key_group = key_group_for(r, L);
  // k and v are f32 workspaces that a first stage widened the 16-bit K and V into (widens_kv_once).
  bool kv_widened = false;
  // exact_tiled's panel: scratch of S_k vectors holding each key's raw dot products for the
  // instance's queries. The first pass fills it; the later passes read their scores from it
  // instead of computing them again (the same values, so the same bits).
  enum class PanelMode { none, fill, reuse };
  PanelMode panel_mode = PanelMode::none;
  int panel = -1;

  // Request::seq_k_at_launch: S_k as the kernel's size argument 0 (flash only); null otherwise.
  ExprRef sk_launch{};
  // Request::mask (the flash orders): the input, and the instance's (batch, head)'s first element.
  const MaskInput* mask = nullptr;
  ExprRef mask_head{};

  void setup_mask() {
    if (mask) mask_head = mask->head_base(b, idx(0));
  }
  // A finished score plus the mask at (query, key), either an index or a vector of them: in
  // log2 units under exp2 (the mask times log2(e), rounded). Unchanged without a mask.
  ExprRef with_mask(ExprRef sc, const ExprRef& query_at, const ExprRef& key_at) const {
    if (!mask) return sc;
    ExprRef m = mask->at(b, mask_head, query_at, key_at);
    if (o.exp2) m = mul(m, f32c(1.4426950408889634, m->type.lanes));
    return add(std::move(sc), std::move(m));
  }
  // The same for keys key .. key+lanes-1 of one query (an index): the mask's elements for them are
  // contiguous, so one vector load instead of a gather (the same elements, the same bits).
  ExprRef with_mask_at_keys(ExprRef sc, const ExprRef& query_at, const ExprRef& key, int lanes) const {
    if (!mask) return sc;
    ExprRef m = mask->at_keys(b, mask->row_base(b, mask_head, query_at), key, lanes);
    if (o.exp2) m = mul(m, f32c(1.4426950408889634, m->type.lanes));
    return add(std::move(sc), std::move(m));
  }
  // 1/l for the output, or 0 where a masked row has no key (l = 0: its out is 0, not 0/0).
  ExprRef inverse_sum(const ExprRef& l) const {
    const int lanes = l->type.lanes;
    ExprRef inv = div(f32c(1.0f, lanes), l);
    return mask ? select(binary(Op::Eq, l, f32c(0.0f, lanes)), f32c(0.0f, lanes), inv) : inv;
  }

  Type vec() const { return Type{ScalarType::f32, L}; }
  // Elements of one (batch, head)'s K or V: S_k * D.
  ExprRef kv_elements() const { return sk_launch ? mul(sk_launch, idx(D)) : idx(Sk * D); }
  ExprRef splat(ExprRef s) const { return broadcast(std::move(s), L); }
  // Rounds f32 to the storage type and back when the order keeps intermediates in storage.
  ExprRef to_storage(ExprRef x) const {
    if (storage == ScalarType::f32) return x;
    return cast(cast(std::move(x), storage), ScalarType::f32);
  }
  ExprRef load_f32(int buffer, ExprRef at, int lanes = 1) const {
    ExprRef x = load(b.kernel(), buffer, std::move(at), lanes);
    return x->type.scalar == ScalarType::f32 ? x : cast(x, ScalarType::f32);
  }
  ExprRef stored(ExprRef x, int buffer) const {
    const ScalarType t = b.kernel().buffers[size_t(buffer)].elem;
    return t == ScalarType::f32 ? x : cast(std::move(x), t);
  }

  void setup() {
    ExprRef first = mul(program_id(1), idx(L));
    ExprRef lanes = add(splat(first), iota(L));
    query = b.let("query", binary(Op::Min, lanes, splat(idx(Sq - 1))));
    q_base = b.let("q_base", mul(program_id(0), idx(Sq * D)));
    kv_base = b.let("kv_base", mul(program_id(0), kv_elements()));
    lse_base = b.let("lse_base", mul(program_id(0), idx(Sq)));
  }

  // qt: the instance's query rows, transposed into lanes once, read by every score.
  void load_queries() {
    qt = b.buffer("qt", ScalarType::f32, true, Extent::scratch, D * L);
    ExprRef rows = b.let("q_rows", add(splat(q_base), mul(query, splat(idx(D)))));
    b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
      ExprRef x = gather(b.kernel(), q, add(rows, splat(d)));
      b.store(qt, mul(d, idx(L)), x->type.scalar == ScalarType::f32 ? x : cast(x, ScalarType::f32));
    });
  }

  // One step of a dot product accumulating in `acc`: per the order, in storage precision with
  // the product rounded, with an fma, or as a rounded product added.
  ExprRef dot_step(ExprRef acc, ExprRef a, ExprRef x, bool round_each_step) const {
    if (round_each_step) return to_storage(add(std::move(acc), to_storage(mul(std::move(a), std::move(x)))));
    if (o.dot_fma) return fma(std::move(a), std::move(x), std::move(acc));
    return add(std::move(acc), mul(std::move(a), std::move(x)));
  }

  // The scaling of a raw score, as an f32 constant and whether it divides.
  float scale_constant() const {
    const double scale = r.scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
    if (o.exp2) return static_cast<float>(scale * 1.4426950408889634);  // log2(e) folded in
    if (!o.scale_divides) return static_cast<float>(scale);
    // Eager `s / math.sqrt(D)`: the divisor is the double sqrt(D) rounded to f32 (to storage for
    // 16-bit tensors, where the scalar is cast to the tensor's type first).
    const float divisor = r.scale ? static_cast<float>(1.0 / *r.scale) : static_cast<float>(std::sqrt(static_cast<double>(D)));
    return divisor;
  }
  ExprRef scale_constant_expr() const {
    float c = scale_constant();
    ExprRef e = constant(Type{ScalarType::f32, 1}, static_cast<double>(c));
    if (o.round_to_storage) e = to_storage(e);
    return splat(e);
  }

  // Scores of keys j0 .. j0+n-1 for the instance's queries, scaled and masked, in key order:
  // use(t, score of key j0+t). The n dot products run interleaved over d, each sequential in d.
  void scores(ExprRef j0, int n, const std::function<void(int, ExprRef)>& use) {
    if (n == 0) return;
    const std::vector<ExprRef> raw = raw_scores(j0, n);
    for (int t = 0; t < n; ++t) use(t, b.let("score", finish_score(raw[size_t(t)], add(j0, idx(t)))));
  }

  // The same scores with the per-key work rolled into one loop: the dot products go to scratch
  // `group` (key_group vectors), then body(t, score of key j0+t) runs for t in [0, n) with one
  // copy of its code (and of the score's scaling and rounding) instead of n. Same operations,
  // same bits; less machine code to compile where that work is large (16-bit rounding, exp).
  void scores_rolled(ExprRef j0, int n, int group, const std::function<void(ExprRef, ExprRef)>& body) {
    if (n == 0) return;
    if (panel_mode == PanelMode::reuse) {  // the dot products are in the panel already
      b.for_range("t", idx(0), idx(n), 1, [&](ExprRef t) {
        ExprRef key = add(j0, t);
        body(t, b.let("score", finish_score(load(b.kernel(), panel, mul(key, idx(L)), L), key)));
      });
      return;
    }
    const std::vector<ExprRef> raw = raw_scores(j0, n);
    for (int t = 0; t < n; ++t) b.store(group, idx(int64_t(t) * L), raw[size_t(t)]);
    b.for_range("t", idx(0), idx(n), 1, [&](ExprRef t) {
      body(t, b.let("score", finish_score(load(b.kernel(), group, mul(t, idx(L)), L), add(j0, t))));
    });
  }

  // The raw dot products q.k of keys j0 .. j0+n-1: computed (and, filling the panel, kept in
  // it), or read back from the panel.
  std::vector<ExprRef> raw_scores(ExprRef j0, int n) {
    std::vector<ExprRef> raw;
    if (panel_mode == PanelMode::reuse) {
      for (int t = 0; t < n; ++t) raw.push_back(load(b.kernel(), panel, mul(add(j0, idx(t)), idx(L)), L));
      return raw;
    }
    const std::vector<int> acc = dot_products(j0, n);
    for (int t = 0; t < n; ++t) {
      raw.push_back(b.get(acc[size_t(t)]));
      if (panel_mode == PanelMode::fill) b.store(panel, mul(add(j0, idx(t)), idx(L)), raw.back());
    }
    return raw;
  }

  // Locals holding q.k for keys j0 .. j0+n-1, accumulated over d in order.
  std::vector<int> dot_products(ExprRef j0, int n) {
    const bool each = o.round_to_storage && o.qk_round_each_step;
    std::vector<int> acc(static_cast<size_t>(n), -1);
    for (int t = 0; t < n; ++t) {
      acc[size_t(t)] = b.local("s", vec());
      b.assign(acc[size_t(t)], f32c(0.0f, L));
    }
    std::vector<ExprRef> key_rows;
    for (int t = 0; t < n; ++t) key_rows.push_back(b.let("k_row", add(kv_base, mul(add(j0, idx(t)), idx(D)))));
    b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
      ExprRef qd = b.let("qd", load(b.kernel(), qt, mul(d, idx(L)), L));
      for (int t = 0; t < n; ++t) {
        ExprRef kd = splat(load_f32(k, add(key_rows[size_t(t)], d)));
        b.assign(acc[size_t(t)], dot_step(b.get(acc[size_t(t)]), kd, qd, each));
      }
    });
    return acc;
  }

  // A dot product made a score: rounded, scaled, rounded, masked (causal) against `key`, and
  // the additive mask added.
  ExprRef finish_score(ExprRef s, ExprRef key) const {
    if (o.round_to_storage) s = to_storage(s);
    ExprRef sc = o.scale_divides && !o.exp2 ? div(s, scale_constant_expr()) : mul(s, scale_constant_expr());
    if (o.round_to_storage) sc = to_storage(sc);
    if (r.causal) sc = select(binary(Op::Lt, query, splat(key)), f32c(-kInf, L), sc);
    return with_mask(std::move(sc), query, key);
  }

  // for every group of key_group keys in [begin, begin + count), then the remainder:
  // body(first key, keys in the group).
  void key_groups(ExprRef begin, int64_t count, const std::function<void(ExprRef, int)>& body) {
    const int64_t full = count - count % key_group;
    if (full > 0)
      b.for_range("j", idx(0), idx(full), key_group, [&](ExprRef j) { body(b.let("j0", add(begin, j)), key_group); });
    if (count % key_group) body(b.let("j0", add(begin, idx(full))), int(count % key_group));
  }
  // The same for a count known at launch: whole groups, then the remaining keys one at a time
  // (a key's score and its place in the order do not depend on its group).
  void key_groups(ExprRef begin, const ExprRef& count, const std::function<void(ExprRef, int)>& body) {
    if (std::optional<int64_t> known = constant_count(count)) return key_groups(std::move(begin), *known, body);
    ExprRef full = b.let("j.full", sub(count, binary(Op::Rem, count, idx(key_group))));
    b.for_range("j", idx(0), full, key_group, [&](ExprRef j) { body(b.let("j0", add(begin, j)), key_group); });
    b.for_range("j", full, count, 1, [&](ExprRef j) { body(b.let("j0", add(begin, j)), 1); });
  }

  // acc[d*L + l] (scratch) += p_t * v[j0 + t][d] for t = 0..n-1 in order, p_t = load(p, t*L):
  // each output element sums its keys in key order.
  void accumulate_pv(int acc, int p, ExprRef j0, int n, bool round_each_step) { accumulate_pv(acc, p, std::move(j0), idx(n), round_each_step); }
  void accumulate_pv(int acc, int p, ExprRef j0, const ExprRef& n, bool round_each_step) {
    accumulate_pv_steps(acc, p, j0, n, [&](ExprRef sum, ExprRef pt, ExprRef v_at) {
      return dot_step(std::move(sum), std::move(pt), splat(load_f32(v, std::move(v_at))), round_each_step);
    });
  }
  // The loops of accumulate_pv with its step as a parameter: sum = step(sum, p_t, index of v[j0 + t][d]).
  void accumulate_pv_steps(int acc, int p, ExprRef j0, int n, const std::function<ExprRef(ExprRef, ExprRef, ExprRef)>& step) {
    accumulate_pv_steps(acc, p, std::move(j0), idx(n), step);
  }
  void accumulate_pv_steps(int acc, int p, ExprRef j0, const ExprRef& n, const std::function<ExprRef(ExprRef, ExprRef, ExprRef)>& step) {
    // Dims per loop step, each its own chain: 8 keep two fma pipes busy through a 4-cycle latency
    // (4 left half of them idle: fast's forward went from 0.48 to 0.56 of the peak). D is a multiple of 8.
    constexpr int kUnroll = 8;
    b.for_range("d", idx(0), idx(D), kUnroll, [&](ExprRef d) {
      std::vector<int> a(kUnroll);
      for (int u = 0; u < kUnroll; ++u) {
        a[size_t(u)] = b.local("o", vec());
        b.assign(a[size_t(u)], load(b.kernel(), acc, mul(add(d, idx(u)), idx(L)), L));
      }
      b.for_range("t", idx(0), n, 1, [&](ExprRef t) {
        ExprRef pt = b.let("p", load(b.kernel(), p, mul(t, idx(L)), L));
        ExprRef v_row = b.let("v_row", add(kv_base, mul(add(j0, t), idx(D))));
        for (int u = 0; u < kUnroll; ++u) b.assign(a[size_t(u)], step(b.get(a[size_t(u)]), pt, add(v_row, add(d, idx(u)))));
      });
      for (int u = 0; u < kUnroll; ++u) b.store(acc, mul(add(d, idx(u)), idx(L)), b.get(a[size_t(u)]));
    });
  }

  int kv_flags = -1;  // workspace: per (batch, head), 1 where every v is in kVRange (the widening stage)
  // Whether every v of this (batch, head) is in kVRange, as a scalar bool.
  ExprRef values_in_range() const {
    return binary(Op::Eq, load(b.kernel(), kv_flags, program_id(0)), constant(Type{ScalarType::f32, 1}, 1.0));
  }

  // PyTorch 1.13's bf16 p @ v (pv_round_each_step) on the CPU: acc = bf16(acc + bf16(p * v)) per
  // key, as accumulate_pv computes it, with a cheaper form of each rounding where the data
  // allows it. Rounding f32 x to bf16 and back is 7 vector operations (integer round-to-nearest-
  // even and the NaN case). Veltkamp's split with sigma = 2^16 + 1,
  //   c = x * sigma,  d = c - x,  h = c - d,
  // gives the same h for every f32 x that is zero or has 2^-126 <= |x| < 0x1.fffep+111 (checked
  // against the integer rounding on every such f32 bit pattern; below, subnormals round to the
  // wrong grid, above, c overflows). The product's rounding takes two of them here: v * sigma is
  // exact for a bf16 v (8 significant bits times 17 make 24; the workspace v_split holds it), so
  // c = p * (v * sigma) is c of the exact product p*v, and d = fma(-p, v, c) is c - p*v. 7
  // operations per key instead of 16.
  //
  // The split is taken for a key group when the data proves every rounded value lies in that
  // range: every v of the (batch, head) is zero or in [kVRange] in magnitude (so v * sigma is
  // finite; kv_flags), and every p of this group and of the row's earlier groups zero or in
  // [kPRange]. Then each product is zero or normal with 16 significant bits, so exact in f32, and
  // in [2^-118, 2^98); so every product is a multiple of 2^-126, and so is every partial sum by
  // induction: zero or at least 2^-126, never subnormal. A partial sum never exceeds 2^11 times
  // the largest product (past 2^9 times, an addend is below half an ulp of the sum and moves it
  // by at most one tie), so it stays below 2^110. A NaN or infinity fails the test, and the group
  // takes the integer rounding. Once a group has, the sums it left may be anything (infinite,
  // subnormal), so every later group of the row does too: `split_ok` records that. The bounds
  // are fixed, not the data's extremes, so the test is lane-wise compares and one fold of lanes.
  int v_split = -1;   // workspace: v * sigma (the widening stage, build_attention)
  int split_ok = -1;  // scalar bool local: the row's groups so far all passed
  void accumulate_pv_bf16(int acc, int p, ExprRef j0, int n) {
    ExprRef p_ok = magnitude_in(b, load(b.kernel(), p, idx(0), L), kPRange);
    for (int t = 1; t < n; ++t) p_ok = binary(Op::And, p_ok, magnitude_in(b, load(b.kernel(), p, idx(int64_t(t) * L), L), kPRange));
    b.assign(split_ok, binary(Op::And, b.get(split_ok), all_lanes(b.let("p_ok", p_ok))));
    b.if_else_per_instance(
        b.get(split_ok),
        [&] {
          const ExprRef sigma = f32c(65537.0f, L);
          accumulate_pv_steps(acc, p, j0, n, [&](ExprRef sum, ExprRef pt, ExprRef v_at) {
            ExprRef c = b.let("c", mul(pt, splat(load(b.kernel(), v_split, v_at))));
            ExprRef d = b.let("d", fma(unary(Op::Neg, pt), splat(load(b.kernel(), v, v_at)), c));  // c - p*v, rounded once
            ExprRef s = b.let("s", add(std::move(sum), sub(c, d)));
            ExprRef c2 = b.let("c", mul(s, sigma));
            return sub(c2, sub(c2, s));
          });
        },
        [&] { accumulate_pv(acc, p, j0, n, true); });
  }

  void zero(int buffer, int64_t vectors) {
    b.for_range("i", idx(0), idx(vectors), 1, [&](ExprRef i) { b.store(buffer, mul(i, idx(L)), f32c(0.0f, L)); });
  }

  // out[query][d] = finish(acc[d*L + lane]), rounded to storage; finish is the identity for the
  // eager orders and the multiply by 1/l for flash.
  void write_out(int acc, const std::function<ExprRef(ExprRef)>& finish) {
    ExprRef rows = b.let("out_rows", add(splat(q_base), mul(query, splat(idx(D)))));
    b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
      b.store(out, add(rows, splat(d)), stored(finish(load(b.kernel(), acc, mul(d, idx(L)), L)), out));
    });
  }
  // The log-sum-exp, built only when the request asks for it (its log is many IR nodes).
  void write_lse(const std::function<ExprRef()>& value) {
    if (lse_local >= 0) b.assign(lse_local, value());
    else if (lse >= 0) b.store(lse, add(splat(lse_base), query), value());
  }

  // ----------------------------------------------------------------------------------------
  // Materialized: scores kept per query row (scratch L x Sk, storage type), the softmax op's
  // row code on each, then out = P @ v with d in lanes.
  void materialized() {
    load_queries();
    const int sc = b.buffer("scores", storage, true, Extent::scratch, L * Sk);
    ExprRef row_starts = b.let("score_rows", mul(iota(L), splat(idx(Sk))));
    b.region("scores", "s = q.k per key, sequential in d; then scaled and masked", [&] {
      key_groups(idx(0), Sk, [&](ExprRef j0, int n) {
        scores(j0, n, [&](int t, ExprRef s) { b.store(sc, add(row_starts, splat(add(j0, idx(t)))), stored(s, sc)); });
      });
    });
    auto q_row_of = [&](const ExprRef& l) { return b.let("q_row", binary(Op::Min, add(mul(program_id(1), idx(L)), l), idx(Sq - 1))); };
    b.for_range("l", idx(0), idx(L), 1, [&](ExprRef l) {
      ExprRef first = b.let("score_row", mul(l, idx(Sk)));
      SoftmaxStats st;
      b.region("softmax", describe(o.softmax), [&] { st = softmax_row(b, o.softmax, Row(b, Sk, first), sc, sc); });
      if (lse >= 0) b.store(lse, add(lse_base, q_row_of(l)), add(st.max, log_f32(b, o.softmax.log, st.sum)));
    });
    // Every row's softmax first, then p @ v on pv_rows() rows at a time: each row's sums are its
    // own, so the bits are those of a row at a time.
    const int R = pv_rows();
    b.for_range("l", idx(0), idx(L), R, [&](ExprRef l0) {
      std::vector<ExprRef> firsts, q_rows;
      for (int r = 0; r < R; ++r) {
        ExprRef l = r ? b.let("l", add(l0, idx(r))) : l0;
        firsts.push_back(b.let("score_row", mul(l, idx(Sk))));
        q_rows.push_back(q_row_of(l));
      }
      b.region("p@v", "out[d] = sum_j p_j v_j[d], j in order, d in lanes", [&] { pv(sc, firsts, q_rows); });
    });
  }

  bool pv_rounds_each_step() const { return gen::pv_rounds_each_step(o); }
  // p @ v's dims per vector: 16 when the order's pv_lanes is 16 and D a multiple of 16, else 8.
  int pv_vector() const { return o.pv_lanes == 16 && D % 16 == 0 ? 16 : 8; }
  // Query rows per p @ v step: 8 chains of 8 dims fill AVX2's adds. With vectors of 16 dims
  // (AVX-512) 4 rows make 16 chains (f32, B*H = 8, S = 1024, D = 64: 34.2 ms with one row, 28.0
  // with two, 25.5 with four); where each step rounds to bf16, 2 (4 ran no faster and took the
  // cold compile from 40 to 52-68 ms).
  int pv_rows() const {
    if (pv_vector() != 16) return 1;
    const int rows = pv_rounds_each_step() ? 2 : 4;
    return L % rows == 0 ? rows : 1;
  }

  // Query rows of P @ v with dims in lanes: blocks of 64 dims (8 vectors of 8, or 4 of 16), then
  // one block of the dims left (D is a multiple of 8), the rows' chains side by side sharing
  // each load of v. Each dim of each row is its own sum, so the blocking is free.
  void pv(int sc, const std::vector<ExprRef>& firsts, const std::vector<ExprRef>& q_rows) {
    const int V = pv_vector(), kBlock = 64 / V, R = static_cast<int>(firsts.size());
    const bool each = pv_rounds_each_step();
    std::vector<ExprRef> out_rows;
    for (const ExprRef& q_row : q_rows) out_rows.push_back(b.let("out_row", add(q_base, mul(q_row, idx(D)))));
    auto block = [&](ExprRef d0, int U) {
      std::vector<int> a(static_cast<size_t>(U * R), -1);  // row r, vector u: a[r * U + u]
      for (int& acc : a) {
        acc = b.local("o", Type{ScalarType::f32, V});
        b.assign(acc, f32c(0.0f, V));
      }
      b.for_range("j", idx(0), idx(Sk), 1, [&](ExprRef j) {
        std::vector<ExprRef> p;
        for (int r = 0; r < R; ++r) p.push_back(b.let("p", broadcast(load_f32(sc, add(firsts[size_t(r)], j)), V)));
        ExprRef v_at = b.let("v_at", add(add(kv_base, mul(j, idx(D))), d0));
        for (int u = 0; u < U; ++u) {
          ExprRef x = b.let("v_j", load_f32(v, add(v_at, idx(u * V)), V));
          // eager p @ v: reference BLAS adds p*v to the sum; torch's bf16 kernel rounds v*p.
          for (int r = 0; r < R; ++r) {
            const int acc = a[size_t(r * U + u)];
            b.assign(acc, dot_step(b.get(acc), x, p[size_t(r)], each));
          }
        }
      });
      for (int r = 0; r < R; ++r)
        for (int u = 0; u < U; ++u)
          b.store(out, add(out_rows[size_t(r)], add(d0, idx(u * V))), stored(b.get(a[size_t(r * U + u)]), out));
    };
    const int64_t full = D - D % (V * kBlock);
    if (full > 0) b.for_range("d", idx(0), idx(full), V * kBlock, [&](ExprRef d0) { block(d0, kBlock); });
    if (D > full) block(idx(full), static_cast<int>((D - full) / V));
  }

  // ----------------------------------------------------------------------------------------
  // ExactTiled: the softmax op's TwoPass reduce_all in query-lane form. Key j feeds tree lane
  // j mod V: for S_k >= V the first V keys start the lanes, later keys combine into their lane
  // in key order, and the lanes fold by the order's LaneFold; shorter rows combine in key order.
  // `identity`: op(identity, x) is x, bit for bit, for every x (-inf for softmax_max, -0 for the
  // sum). The lanes start there and every key, the first V included, runs in one loop: the same
  // bits with one copy of the key group's code instead of two.
  //
  // The per-key work is rolled (lanes_over_keys): one copy of value's code (the sum's exp)
  // instead of one per key of the group.
  ExprRef reduce_keys(const std::function<ExprRef(ExprRef)>& value, const std::function<ExprRef(ExprRef, ExprRef)>& op,
                      float identity, const std::string& name, int group) {
    const int V = o.softmax.lanes;
    if (Sk < V) {
      int result = b.local(name, vec());
      scores(idx(0), int(Sk), [&](int t, ExprRef s) {
        ExprRef x = value(s);
        b.assign(result, t == 0 ? x : op(b.get(result), x));
      });
      return b.get(result);
    }
    return lanes_over_keys(Sk - Sk % V, int(Sk % V), identity, name, group, [&](ExprRef lane, ExprRef s) { return op(lane, value(s)); },
                           op);
  }

  // The tree lanes of exact-tiled's reductions, in scratch: lane l starts at `identity`; keys
  // [0, full) (a multiple of V), then `partial` more, go key j into lane j mod V in key order by
  // take(lane, score of j), each key group's dot products through `group` (scores_rolled); then
  // the lanes fold by the order's LaneFold with `fold_op`.
  ExprRef lanes_over_keys(int64_t full, int partial, float identity, const std::string& name, int group,
                          const std::function<ExprRef(ExprRef, ExprRef)>& take, const std::function<ExprRef(ExprRef, ExprRef)>& fold_op) {
    const int V = o.softmax.lanes;
    const int lanes = b.buffer(name + "_lanes", ScalarType::f32, true, Extent::scratch, int64_t(V) * L);
    for (int l = 0; l < V; ++l) b.store(lanes, idx(int64_t(l) * L), f32c(identity, L));
    auto keys = [&](ExprRef j0, int n) {
      for (int c = 0; c < n; c += key_group)
        scores_rolled(c == 0 ? j0 : b.let("j0", add(j0, idx(c))), std::min(key_group, n - c), group, [&](ExprRef t, ExprRef s) {
          ExprRef lane_at = b.let("lane_at", mul(add(t, idx(c)), idx(L)));
          b.store(lanes, lane_at, take(load(b.kernel(), lanes, lane_at, L), s));
        });
    };
    if (full > 0) b.for_range("j", idx(0), idx(full), V, [&](ExprRef j0) { keys(j0, V); });
    if (partial > 0) keys(idx(full), partial);
    std::vector<ExprRef> folded;
    for (int l = 0; l < V; ++l) folded.push_back(load(b.kernel(), lanes, idx(int64_t(l) * L), L));
    return fold_lanes(b, std::move(folded), o.softmax.fold, fold_op, name + ".fold");
  }

  // The bf16 softmax (SoftmaxOrder::Kind::Staged) in query-lane form: the max over pairs of
  // V-key vectors from -inf lanes (key j in lane j mod V), folded, then the keys past the last
  // pair by std::max in order; the sum over full V-key vectors from zero lanes, folded, then the
  // remaining keys in order with the tail's exp. Same bits as softmax_row on the stored row.
  // The pairs run as single V-key vectors: each lane sees the same keys in the same order.
  ExprRef staged_max(int group) {
    const int V = o.softmax.lanes;
    const int64_t pairs_end = Sk - Sk % (2 * V);
    int mx = b.local("max", vec());
    b.assign(mx, lanes_over_keys(pairs_end, 0, -kInf, "max", group, softmax_max, softmax_max));
    key_groups(idx(pairs_end), Sk - pairs_end, [&](ExprRef j0, int n) {
      scores(j0, n, [&](int, ExprRef sc) { b.assign(mx, softmax_scalar_max(b.get(mx), sc)); });
    });
    return b.get(mx);
  }
  ExprRef staged_sum(const ExprRef& mx, int group) {
    const int V = o.softmax.lanes;
    const int64_t full_end = Sk - Sk % V;
    auto sum_of = [](ExprRef a, ExprRef c) { return add(a, c); };
    int sum = b.local("sum", vec());
    b.assign(sum, lanes_over_keys(full_end, 0, 0.0f, "sum", group,
                                  [&](ExprRef lane, ExprRef sc) { return add(lane, exp_f32(b, o.softmax.exp, sub(sc, mx))); }, sum_of));
    key_groups(idx(full_end), Sk - full_end, [&](ExprRef j0, int n) {
      scores(j0, n, [&](int, ExprRef sc) { b.assign(sum, add(b.get(sum), exp_f32(b, o.softmax.tail_exp, sub(sc, mx)))); });
    });
    return b.get(sum);
  }

  void exact_tiled() {
    const SoftmaxOrder& so = o.softmax;
    const bool staged = so.kind == SoftmaxOrder::Kind::Staged;
    if (so.kind == SoftmaxOrder::Kind::Online) throw Error("internal: exact-tiled attention needs a two-pass or staged softmax order");
    load_queries();
    // A key group's dot products, then (pass 3) its probabilities.
    const int p = b.buffer("p", ScalarType::f32, true, Extent::scratch, key_group * L);
    // Pass 1's dot products kept for passes 2 and 3 where they fit (profiled, f32, S = 1024,
    // D = 64: each pass's dot products took 21% of the time); past kPanelBytes, and on the CUDA
    // targets (where scratch is each thread's local memory), computed again.
    constexpr int64_t kPanelBytes = int64_t(256) << 10;
    const int64_t panel_bytes = Sk * L * int64_t(sizeof(float));
    if (!cuda_target(r) && (panel_bytes <= kPanelBytes || (o.keep_scores && panel_bytes <= AttentionOrder::kKeptScoresBytes))) {
      panel = b.buffer("panel", ScalarType::f32, true, Extent::scratch, Sk * L);
      panel_mode = PanelMode::fill;
    }
    ExprRef mx, sum;
    b.region("max", "pass 1: " + describe(so), [&] {
      mx = b.let("max", staged ? staged_max(p) : reduce_keys([](ExprRef s) { return s; }, softmax_max, -kInf, "max", p));
    });
    if (panel_mode == PanelMode::fill) panel_mode = PanelMode::reuse;
    b.region("sum", "pass 2: sum of exp(s - max), same tree", [&] {
      sum = b.let("sum", staged ? staged_sum(mx, p)
                                : reduce_keys([&](ExprRef s) { return exp_f32(b, so.exp, sub(s, mx)); },
                                              [](ExprRef a, ExprRef c) { return add(a, c); }, -0.0f, "sum", p));
    });
    ExprRef inv = so.multiply_by_reciprocal ? b.let("inv_sum", div(f32c(1.0f, L), sum)) : nullptr;
    const int acc = b.buffer("acc", ScalarType::f32, true, Extent::scratch, D * L);
    // Staged: keys past the last full V-key vector take the tail's exp, as in the row softmax.
    const int64_t vector_end = staged ? Sk - Sk % so.lanes : Sk;
    b.region("p@v", "pass 3: p = exp(s - max) * (1/sum); out[d] = sum_j p_j v_j[d], j in order", [&] {
      zero(acc, D);
      if (v_split >= 0) {  // accumulate_pv_bf16's split (only where p @ v rounds each step): the sums start at zero
        split_ok = b.local("split_ok", Type{ScalarType::boolean, 1});
        b.assign(split_ok, values_in_range());
      }
      auto pass = [&](ExprRef begin, int64_t count, MathImpl exp_impl) {
        key_groups(begin, count, [&](ExprRef j0, int n) {
          // The group's dot products into p, then one loop makes each its probability in place.
          scores_rolled(j0, n, p, [&](ExprRef t, ExprRef s) {
            ExprRef e = exp_f32(b, exp_impl, sub(s, mx));
            ExprRef pt = inv ? mul(e, inv) : div(e, sum);
            b.store(p, mul(t, idx(L)), o.round_to_storage ? to_storage(pt) : pt);
          });
          if (split_ok >= 0) accumulate_pv_bf16(acc, p, j0, n);
          else accumulate_pv(acc, p, j0, n, pv_rounds_each_step());
        });
      };
      pass(idx(0), vector_end, so.exp);
      if (vector_end < Sk) pass(idx(vector_end), Sk - vector_end, so.tail_exp);
      write_out(acc, [](ExprRef x) { return x; });
    });
    write_lse([&] { return add(mx, log_f32(b, so.log, sum)); });
  }

  // ----------------------------------------------------------------------------------------
  // Flash: online softmax over key blocks.
  ExprRef expo(ExprRef x) { return o.exp2 ? exp2_f32(b, std::move(x)) : exp_f32(b, MathImpl::SleefU10, std::move(x)); }

  // The key blocks of flash: [0, full) in blocks of Bc, then the partial block [full, Sk). When
  // causal, an instance serving `queries` query rows visits only the blocks holding a key its
  // last query sees (keys 0 .. min(last + 1, S_k) - 1): every later block is masked for all of
  // its queries. The loops are per-instance (ir.hpp): their bounds read program_id. The
  // backward's recomputation of lse (lse_only) visits every block: its instances are not query
  // blocks numbered by program_id(1), and a masked block leaves m and l as they were, bit for bit
  // (alpha is exactly 1 and each p exactly 0), so lse is the same.
  // block(first key, key count): the count a constant, or with S_k given at launch (sk_launch)
  // the partial block's count, a uniform local.
  void key_blocks(int64_t Bc, int64_t queries, const std::function<void(ExprRef, ExprRef)>& block) {
    if (sk_launch) return key_blocks_at_launch(Bc, queries, block);
    const int64_t full = Sk - Sk % Bc;
    if (!r.causal || lse_only) {
      b.for_range("kb", idx(0), idx(full), Bc, [&](ExprRef kb) { block(kb, idx(Bc)); });
      if (Sk % Bc) block(idx(full), idx(Sk % Bc));
      return;
    }
    ExprRef last = binary(Op::Min, add(mul(program_id(1), idx(queries)), idx(queries - 1)), idx(Sq - 1));
    ExprRef seen = binary(Op::Min, add(last, idx(1)), idx(Sk));
    ExprRef blocks_end = mul(div(add(seen, idx(Bc - 1)), idx(Bc)), idx(Bc));
    b.for_per_instance("kb", idx(0), binary(Op::Min, blocks_end, idx(full)), Bc, [&](ExprRef kb) { block(kb, idx(Bc)); });
    // The partial block, once when a seen key is in it: [full, min(seen, full + 1)).
    if (Sk % Bc)
      b.for_per_instance("kb.tail", idx(full), binary(Op::Min, seen, idx(full + 1)), 1, [&](ExprRef kb) { block(kb, idx(Sk % Bc)); });
  }
  // The same blocks, in the same order, for S_k given at launch: full = S_k - S_k mod Bc and the
  // partial block's count are computed from the size argument, and the partial block runs when
  // its count is not 0.
  void key_blocks_at_launch(int64_t Bc, int64_t queries, const std::function<void(ExprRef, ExprRef)>& block) {
    ExprRef tail = b.let("keys.tail", binary(Op::Rem, sk_launch, idx(Bc)));
    ExprRef full = b.let("keys.full", sub(sk_launch, tail));
    if (!r.causal || lse_only) {
      b.for_range("kb", idx(0), full, Bc, [&](ExprRef kb) { block(kb, idx(Bc)); });
      b.if_(binary(Op::Lt, idx(0), tail), [&] { block(full, tail); });
      return;
    }
    ExprRef last = binary(Op::Min, add(mul(program_id(1), idx(queries)), idx(queries - 1)), idx(Sq - 1));
    ExprRef seen = binary(Op::Min, add(last, idx(1)), sk_launch);
    ExprRef blocks_end = mul(div(add(seen, idx(Bc - 1)), idx(Bc)), idx(Bc));
    b.for_per_instance("kb", idx(0), binary(Op::Min, blocks_end, full), Bc, [&](ExprRef kb) { block(kb, idx(Bc)); });
    // The partial block, once when a seen key is in it (an empty range when the count is 0).
    b.for_per_instance("kb.tail", full, binary(Op::Min, seen, add(full, idx(1))), 1, [&](ExprRef kb) { block(kb, tail); });
  }

  // Flash as a team (AttentionOrder::team = T): a query row is served by `split` threads
  // (split = D/128 rounded up to a power of two, at least 1, so that each thread's share of the
  // accumulator, D/split floats, stays in registers), T/split queries per instance. Thread t
  // serves query block*(T/split) + t/split (past the end, the last query again, which stores
  // the same bits) and its dims [(t mod split)*D/split, ...). Per key block, the team first
  // copies the block's K and V rows to team memory as f32 (exact); then every thread runs
  // flash's steps for its query on them, the full score of every key included (the threads of a
  // query compute it alike): the same operations in the same order as flash() with one lane,
  // so the same bits. Scores and probabilities of the block live in team memory, one column
  // per thread.
  void flash_team() {
    const int T = o.team;
    const int split = flash_team_split(D);
    const int Q = T / split;  // queries per instance
    const int64_t Bc = std::min<int64_t>(o.key_block, Sk);
    const int kt = b.buffer("k_tile", ScalarType::f32, true, Extent::scratch, Bc * D);
    const int vt = b.buffer("v_tile", ScalarType::f32, true, Extent::scratch, Bc * D);
    const int sblk = b.buffer("block", ScalarType::f32, true, Extent::scratch, Bc * T);
    const int U = static_cast<int>(D / 8 / split);  // this thread's accumulator: U vectors of 8 dims
    const Type f8{ScalarType::f32, 8};
    const Type f1{ScalarType::f32, 1};
    const Type i1{ScalarType::i64, 1};
    const int qrow = b.local("query", i1), dim0 = b.local("dim0", i1), m = b.local("max", f1), l = b.local("sum", f1);
    std::vector<int> acc;
    for (int u = 0; u < U; ++u) acc.push_back(b.local("acc", f8));
    ExprRef c = scale_constant_expr();
    kv_base = b.let("kv_base", mul(program_id(0), idx(Sk * D)));
    b.team([&](ExprRef tid) {
      ExprRef slot = split > 1 ? div(tid, idx(split)) : tid;
      b.assign(qrow, binary(Op::Min, add(mul(program_id(1), idx(Q)), slot), idx(Sq - 1)));
      b.assign(dim0, split > 1 ? mul(binary(Op::Rem, tid, idx(split)), idx(D / split)) : idx(0));
      b.assign(m, f32c(-kInf, 1));
      b.assign(l, f32c(0.0f, 1));
      for (int u = 0; u < U; ++u) b.assign(acc[size_t(u)], f32c(0.0f, 8));
    });
    auto block = [&](ExprRef begin, const ExprRef& count_expr) {
      const std::optional<int64_t> known = constant_count(count_expr);
      if (!known) throw Error("internal: a team's flash blocks need S_k at compile time");
      const int64_t count = *known;
      b.team([&](ExprRef tid) {  // K and V rows [begin, begin + count), coalesced over the team
        ExprRef first = b.let("tile_first", add(kv_base, mul(begin, idx(D))));
        b.for_range("e", tid, idx(count * D), T, [&](ExprRef e) {
          b.store(kt, e, load_f32(k, add(first, e)));
          b.store(vt, e, load_f32(v, add(first, e)));
        });
      });
      b.team([&](ExprRef tid) {
        ExprRef q_at = b.let("q_at", add(mul(program_id(0), idx(Sq * D)), mul(b.get(qrow), idx(D))));
        int bm = b.local("block_max", f1);
        b.assign(bm, f32c(-kInf, 1));
        b.for_range("t", idx(0), idx(count), 1, [&](ExprRef t) {
          int acc_s = b.local("s", f1);
          b.assign(acc_s, f32c(0.0f, 1));
          ExprRef k_at = b.let("k_at", mul(t, idx(D)));
          b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
            b.assign(acc_s, dot_step(b.get(acc_s), load(b.kernel(), kt, add(k_at, d)), load_f32(q, add(q_at, d)), false));
          });
          ExprRef sc = o.scale_divides && !o.exp2 ? div(b.get(acc_s), c) : mul(b.get(acc_s), c);
          if (r.causal) sc = select(binary(Op::Lt, b.get(qrow), add(begin, t)), f32c(-kInf, 1), sc);
          ExprRef score = b.let("score", with_mask(sc, b.get(qrow), add(begin, t)));
          b.store(sblk, add(mul(t, idx(T)), tid), score);
          b.assign(bm, binary(Op::Max, b.get(bm), score));
        });
        ExprRef m_new = b.let("max.new", binary(Op::Max, b.get(m), b.get(bm)));
        ExprRef alpha = b.let("alpha", select(binary(Op::Eq, b.get(m), m_new), f32c(1.0f, 1), expo(sub(b.get(m), m_new))));
        b.assign(l, mul(b.get(l), alpha));
        b.for_range("t", idx(0), idx(count), 1, [&](ExprRef t) {
          ExprRef at = b.let("at", add(mul(t, idx(T)), tid));
          ExprRef sv = b.let("s", load(b.kernel(), sblk, at));
          ExprRef pt = b.let("p", select(binary(Op::Eq, sv, f32c(-kInf, 1)), f32c(0.0f, 1), expo(sub(sv, m_new))));
          b.store(sblk, at, pt);
          b.assign(l, add(b.get(l), pt));
        });
        for (int u = 0; u < U; ++u) b.assign(acc[size_t(u)], mul(b.get(acc[size_t(u)]), broadcast(alpha, 8)));
        b.for_range("t", idx(0), idx(count), 1, [&](ExprRef t) {
          ExprRef pt = b.let("p", broadcast(load(b.kernel(), sblk, add(mul(t, idx(T)), tid)), 8));
          ExprRef v_at = b.let("v_at", add(mul(t, idx(D)), b.get(dim0)));
          for (int u = 0; u < U; ++u)
            b.assign(acc[size_t(u)], dot_step(b.get(acc[size_t(u)]), pt, load(b.kernel(), vt, add(v_at, idx(8 * u)), 8), false));
        });
        b.assign(m, m_new);
      });
    };
    b.region("flash", describe(o), [&] {
      key_blocks(Bc, Q, block);
      b.team([&](ExprRef) {
        ExprRef inv = b.let("inv_sum", inverse_sum(b.get(l)));
        ExprRef out_at = b.let("out_at", add(add(mul(program_id(0), idx(Sq * D)), mul(b.get(qrow), idx(D))), b.get(dim0)));
        for (int u = 0; u < U; ++u) b.store(out, add(out_at, idx(8 * u)), stored(mul(b.get(acc[size_t(u)]), broadcast(inv, 8)), out));
        if (lse >= 0)
          b.if_(binary(Op::Eq, b.get(dim0), idx(0)), [&] {  // one thread of the query writes it
            ExprRef mx = o.exp2 ? mul(b.get(m), f32c(static_cast<float>(std::log(2.0)), 1)) : b.get(m);
            b.store(lse, add(mul(program_id(0), idx(Sq)), b.get(qrow)), add(mx, log_f32(b, MathImpl::SleefU10, b.get(l))));
          });
      });
    });
  }

  // 16-bit K and V, on the CPU: each key block's rows are first widened to f32 tiles (exact), 32,
  // 16 or 8 values per step (the widest that divides the block), so that the scores and P @ v
  // broadcast f32 values instead of widening one
  // 16-bit value for every two vector fmas. The tiles stand in for k and v while the block runs:
  // key j's row starts at kv_base + j * D in them too (kv_base = -begin * D). Not on the CUDA
  // targets, where the tiles would be each thread's local memory.
  struct Tiles {
    int k = -1, v = -1;
  };
  Tiles widened_tiles(int64_t Bc) {
    if (storage == ScalarType::f32 || cuda_target(r) || kv_widened) return {};
    Tiles t;
    t.k = b.buffer("k_tile", ScalarType::f32, true, Extent::scratch, Bc * D);
    if (!lse_only) t.v = b.buffer("v_tile", ScalarType::f32, true, Extent::scratch, Bc * D);
    return t;
  }
  // Runs body() with k, v and kv_base pointing at the block's widened tiles (when there are any).
  void on_tiles(const Tiles& t, const ExprRef& begin, const ExprRef& count_expr, const std::function<void()>& body) {
    if (t.k < 0) return body();
    ExprRef first = b.let("tile_first", add(kv_base, mul(begin, idx(D))));
    // D is a multiple of 8. Wider steps take fewer instructions per value: with 8 per step the
    // widening was about an eighth of fast's bf16 operations at D = 64. A count known only at
    // launch (S_k's partial block) takes the widest step that divides D.
    const std::optional<int64_t> count = constant_count(count_expr);
    const int64_t per_step = count ? *count * D : D;
    const int W = per_step % 32 == 0 ? 32 : per_step % 16 == 0 ? 16 : 8;
    b.for_range("e", idx(0), count ? idx(*count * D) : mul(count_expr, idx(D)), W, [&](ExprRef e) {
      b.store(t.k, e, cast(load(b.kernel(), k, add(first, e), W), ScalarType::f32));
      if (t.v >= 0) b.store(t.v, e, cast(load(b.kernel(), v, add(first, e), W), ScalarType::f32));
    });
    const int saved_k = k, saved_v = v;
    const ExprRef saved_base = kv_base;
    k = t.k;
    if (t.v >= 0) v = t.v;
    kv_base = b.let("tile_base", sub(idx(0), mul(begin, idx(D))));
    body();
    k = saved_k;
    v = saved_v;
    kv_base = saved_base;
  }

  void flash() {
    load_queries();
    const int64_t Bc = sk_launch ? o.key_block : std::min<int64_t>(o.key_block, Sk);
    const int acc = lse_only ? -1 : b.buffer("acc", ScalarType::f32, true, Extent::scratch, D * L);
    const int sblk = b.buffer("block", ScalarType::f32, true, Extent::scratch, Bc * L);
    const Tiles tiles = widened_tiles(Bc);
    const int m = b.local("max", vec()), l = b.local("sum", vec());
    b.assign(m, f32c(-kInf, L));
    b.assign(l, f32c(0.0f, L));
    if (!lse_only) zero(acc, D);
    auto block = [&](ExprRef begin, const ExprRef& count) { on_tiles(tiles, begin, count, [&] { block_of(begin, count, acc, sblk, m, l); }); };
    b.region("flash", describe(o), [&] {
      key_blocks(Bc, L, block);
      if (lse_only) return;
      ExprRef inv = b.let("inv_sum", inverse_sum(b.get(l)));
      write_out(acc, [&](ExprRef x) { return mul(x, inv); });
    });
    // lse in natural-log units; with exp2 the running max is in log2 units.
    write_lse([&] {
      ExprRef mx = o.exp2 ? mul(b.get(m), f32c(static_cast<float>(std::log(2.0)), L)) : b.get(m);
      return add(mx, log_f32(b, MathImpl::SleefU10, b.get(l)));
    });
  }

  // Flash for few queries (decode: one query against a long K and V), keys in lanes: an instance
  // serves one query (L = 1), and the work the query-lane layout spreads over queries is spread
  // over keys and dims instead. Per key block, the scores of KL keys at a time are one vector,
  // each lane its key's dot product sequential in d from +0 (K's rows read across keys by
  // gathers, which the CPU backend makes hardware gathers); the block's max folds the scores in key order; the exponentials of KL keys at a
  // time are one vector, summed into l in key order; and P @ v keeps D/VL vectors of the
  // accumulator, each dim's sum over keys in key order. The same operations on every value as
  // flash(), in the same order, so the same bits; keys past the last whole group take the same
  // steps one key at a time.
  void flash_keys_in_lanes() {
    if (L != 1) throw Error("internal: flash_keys_in_lanes serves one query per instance");
    const int KL = registers_per_vector(r, 16) == 1 ? 16 : 8;  // keys per score vector
    const int VL = D % 16 == 0 && KL == 16 ? 16 : 8;            // dims per accumulator vector (D is a multiple of 8)
    const int64_t U = D / VL;
    const int64_t Bc = sk_launch ? o.key_block : std::min<int64_t>(o.key_block, Sk);
    const Type f1{ScalarType::f32, 1};
    const int qf = b.buffer("q_f32", ScalarType::f32, true, Extent::scratch, D);
    const int sblk = b.buffer("block", ScalarType::f32, true, Extent::scratch, Bc);
    ExprRef q_at = b.let("q_at", add(q_base, mul(query, idx(D))));
    b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) { b.store(qf, d, load_f32(q, add(q_at, d))); });
    const int m = b.local("max", f1), l = b.local("sum", f1);
    b.assign(m, f32c(-kInf, 1));
    b.assign(l, f32c(0.0f, 1));
    std::vector<int> acc;
    for (int64_t u = 0; u < U; ++u) {
      acc.push_back(b.local("acc", Type{ScalarType::f32, VL}));
      b.assign(acc.back(), f32c(0.0f, VL));
    }
    const float c = scale_constant();
    // Scores of keys slot0 .. slot0 + chains*n - 1 of the block (n = KL, or 1 past the last whole
    // group) into sblk, as flash's scores(): `chains` vectors of n keys, each lane its key's dot
    // product over d in order from +0 (element d of n key rows, D apart, by one gather), the
    // chains interleaved over d to hide the fma latency.
    auto scores_of = [&](ExprRef begin, ExprRef slot0, int chains, int n) {
      std::vector<int> sacc;
      for (int g = 0; g < chains; ++g) {
        sacc.push_back(b.local("s", Type{ScalarType::f32, n}));
        b.assign(sacc.back(), f32c(0.0f, n));
      }
      std::vector<ExprRef> rows;  // per chain: its first key's row, then (n > 1) each lane's
      for (int g = 0; g < chains; ++g) {
        ExprRef first = b.let("k_row", add(kv_base, mul(add(begin, add(slot0, idx(int64_t(g) * n))), idx(D))));
        rows.push_back(n == 1 ? first : b.let("k_rows", add(broadcast(first, n), mul(iota(n), broadcast(idx(D), n)))));
      }
      b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
        ExprRef qd = b.let("qd", load(b.kernel(), qf, d));
        for (int g = 0; g < chains; ++g) {
          ExprRef at = add(rows[size_t(g)], n == 1 ? d : broadcast(d, n));
          ExprRef kd = n == 1 ? load(b.kernel(), k, at) : gather(b.kernel(), k, at);
          if (kd->type.scalar != ScalarType::f32) kd = cast(kd, ScalarType::f32);
          b.assign(sacc[size_t(g)], dot_step(b.get(sacc[size_t(g)]), kd, n == 1 ? qd : broadcast(qd, n), false));
        }
      });
      for (int g = 0; g < chains; ++g) {
        ExprRef cv = f32c(c, n);
        ExprRef sc = o.scale_divides && !o.exp2 ? div(b.get(sacc[size_t(g)]), cv) : mul(b.get(sacc[size_t(g)]), cv);
        ExprRef slot = add(slot0, idx(int64_t(g) * n));
        ExprRef key = add(begin, slot);
        ExprRef keys = n == 1 ? key : add(broadcast(key, n), iota(n));
        if (r.causal) sc = select(binary(Op::Lt, n == 1 ? query : broadcast(query, n), keys), f32c(-kInf, n), sc);
        b.store(sblk, slot, with_mask_at_keys(sc, query, key, n));
      }
    };
    // p = exp(s - m') of keys [j0, j0 + n), over their scores in place.
    auto probabilities_of = [&](ExprRef begin, ExprRef j0, int n, ExprRef m_new) {
      ExprRef at = b.let("slot", sub(j0, begin));
      ExprRef sv = b.let("s", load(b.kernel(), sblk, at, n));
      b.store(sblk, at, select(binary(Op::Eq, sv, f32c(-kInf, n)), f32c(0.0f, n), expo(sub(sv, n == 1 ? m_new : broadcast(m_new, n)))));
    };
    // Whole groups of KL keys of [begin, begin + count), then the rest one by one.
    // (Offsets from the block's first key: loop bounds stay uniform under causal's per-instance blocks.)
    auto by_groups = [&](ExprRef begin, const ExprRef& count, const std::function<void(ExprRef, int)>& body) {
      ExprRef whole = b.let("keys.whole", sub(count, binary(Op::Rem, count, idx(KL))));
      b.for_range("j", idx(0), whole, KL, [&](ExprRef j) { body(b.let("j0", add(begin, j)), KL); });
      b.for_range("j", whole, count, 1, [&](ExprRef j) { body(b.let("j0", add(begin, j)), 1); });
    };
    // The chains one d loop interleaves: a whole block of Bc keys takes Bc / KL of them (at most 8).
    const int64_t block_chains = Bc % KL == 0 && Bc / KL <= 8 ? Bc / KL : 1;
    // 16-bit K and V: each block's rows widened to f32 tiles first (exact), as flash() does, so
    // that the gathers read f32 (a CPU has no gather of 16-bit elements).
    const Tiles tiles = widened_tiles(Bc);
    const auto block_on_tiles = [&](ExprRef begin, const ExprRef& count) {
      const std::optional<int64_t> known = constant_count(count);
      if (known && *known == Bc && block_chains > 1) {
        scores_of(begin, idx(0), int(block_chains), KL);
      } else {
        ExprRef whole = b.let("keys.whole", sub(count, binary(Op::Rem, count, idx(KL))));
        b.for_range("j", idx(0), whole, KL, [&](ExprRef j) { scores_of(begin, j, 1, KL); });
        b.for_range("j", whole, count, 1, [&](ExprRef j) { scores_of(begin, j, 1, 1); });
      }
      // The block's max in key order (block_of's fold).
      const int bm = b.local("block_max", f1);
      b.assign(bm, f32c(-kInf, 1));
      b.for_range("t", idx(0), count, 1, [&](ExprRef t) {
        ExprRef sv = b.let("s", load(b.kernel(), sblk, t));
        b.assign(bm, select(binary(Op::Lt, sv, b.get(bm)), b.get(bm), sv));
      });
      ExprRef m_new = b.let("max.new", binary(Op::Max, b.get(m), b.get(bm)));
      ExprRef alpha = b.let("alpha", select(binary(Op::Eq, b.get(m), m_new), f32c(1.0f, 1), expo(sub(b.get(m), m_new))));
      b.assign(l, mul(b.get(l), alpha));
      by_groups(begin, count, [&](ExprRef j0, int n) { probabilities_of(begin, j0, n, m_new); });
      b.for_range("t", idx(0), count, 1, [&](ExprRef t) { b.assign(l, add(b.get(l), load(b.kernel(), sblk, t))); });
      for (int64_t u = 0; u < U; ++u) b.assign(acc[size_t(u)], mul(b.get(acc[size_t(u)]), broadcast(alpha, VL)));
      b.for_range("t", idx(0), count, 1, [&](ExprRef t) {
        ExprRef pt = b.let("p", broadcast(load(b.kernel(), sblk, t), VL));
        ExprRef v_row = b.let("v_row", add(kv_base, mul(add(begin, t), idx(D))));
        for (int64_t u = 0; u < U; ++u)
          b.assign(acc[size_t(u)], dot_step(b.get(acc[size_t(u)]), pt, load_f32(v, add(v_row, idx(u * VL)), VL), false));
      });
      b.assign(m, m_new);
    };
    auto block = [&](ExprRef begin, const ExprRef& count) { on_tiles(tiles, begin, count, [&] { block_on_tiles(begin, count); }); };
    b.region("flash", describe(o) + ", keys in lanes", [&] {
      key_blocks(Bc, 1, block);
      ExprRef inv = b.let("inv_sum", inverse_sum(b.get(l)));
      ExprRef out_at = b.let("out_at", add(q_base, mul(query, idx(D))));
      for (int64_t u = 0; u < U; ++u)
        b.store(out, add(out_at, idx(u * VL)), stored(mul(b.get(acc[size_t(u)]), broadcast(inv, VL)), out));
    });
    if (lse >= 0) {
      ExprRef mx = o.exp2 ? mul(b.get(m), f32c(static_cast<float>(std::log(2.0)), 1)) : b.get(m);
      b.store(lse, add(lse_base, query), add(mx, log_f32(b, MathImpl::SleefU10, b.get(l))));
    }
  }

  // One key block of flash: keys [begin, begin + count) into the running max m, sum l and (unless
  // lse_only) the accumulator acc; sblk holds the block's scores, then its probabilities.
  void block_of(const ExprRef& begin, const ExprRef& count, int acc, int sblk, int m, int l) {
    // The block's max as `bm > s ? bm : s`, one x86 max instruction where IEEE maximum takes
    // five: it may drop a NaN score (and take either zero), but such a score's p below is NaN
    // and makes the query's l, out and lse NaN anyway, and m' = ±0 leaves p, l and lse as they
    // are (exp(s ∓ 0), m' + log l), so the results are IEEE maximum's, NaN payloads aside.
    int bm = b.local("block_max", vec());
    b.assign(bm, f32c(-kInf, L));
    key_groups(begin, count, [&](ExprRef j0, int n) {
      ExprRef slot = b.let("slot", sub(j0, begin));
      scores(j0, n, [&](int t, ExprRef s) {
        b.store(sblk, mul(add(slot, idx(t)), idx(L)), s);
        b.assign(bm, select(binary(Op::Lt, s, b.get(bm)), b.get(bm), s));
      });
    });
    ExprRef m_new = b.let("max.new", binary(Op::Max, b.get(m), b.get(bm)));
    // exp(m - m') moves the sums taken under m to m'; exactly 1 when they are equal (also
    // when both are still -inf, where m - m' is NaN).
    ExprRef alpha = b.let("alpha", select(binary(Op::Eq, b.get(m), m_new), f32c(1.0f, L), expo(sub(b.get(m), m_new))));
    b.assign(l, mul(b.get(l), alpha));
    b.for_range("t", idx(0), count, 1, [&](ExprRef t) {
      ExprRef s = b.let("s", load(b.kernel(), sblk, mul(t, idx(L)), L));
      // A masked key adds exactly 0, even while m' is -inf.
      ExprRef pt = b.let("p", select(binary(Op::Eq, s, f32c(-kInf, L)), f32c(0.0f, L), expo(sub(s, m_new))));
      b.store(sblk, mul(t, idx(L)), pt);
      b.assign(l, add(b.get(l), pt));
    });
    if (!lse_only) {
      b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
        b.store(acc, mul(d, idx(L)), mul(load(b.kernel(), acc, mul(d, idx(L)), L), alpha));
      });
      accumulate_pv(acc, sblk, begin, count, false);
    }
    b.assign(m, m_new);
  }
};

}  // namespace

ExprRef emit_attention_lse(Builder& b, const Request& r, const AttentionOrder& o, int q, int k, ExprRef query, const MaskInput* mask) {
  if (o.kind != AttentionOrder::Kind::Flash || o.team > 0)
    throw Error(fmt::format("order '{}': attention_backward recomputes lse only by a flash forward order; give lse", r.order));
  Attention a{r, o, b, r.cols, r.seq_q, r.seq_k, query->type.lanes, r.x_dtype};
  a.q = q;
  a.k = k;
  a.query = std::move(query);
  a.q_base = b.let("q_base", mul(program_id(0), idx(r.seq_q * r.cols)));
  a.kv_base = b.let("kv_base", mul(program_id(0), idx(r.seq_k * r.cols)));
  a.mask = mask;
  a.setup_mask();
  a.lse_only = true;
  a.lse_local = b.local("lse", a.vec());
  b.region("lse", "the forward's log-sum-exp: " + describe(o), [&] { a.flash(); });
  return b.get(a.lse_local);
}

// Whether a launch widens 16-bit K and V to f32 once, in a first stage, rather than every
// instance widening each key block again (Attention::on_tiles). Each instance of `fast` (32
// queries) re-widened all of its head's K and V: about one operation per element per 64 fmas, the
// difference between bf16's 0.56 of the FMA peak and f32's 0.67 (B*H = 8, S = 1024, D = 64). The
// workspaces take 8 bytes per element of K (12 with exact-tiled's v_split): beyond 2 MiB of K
// and V per (batch, head), the tiles stay (exact-tiled: its integer rounding throughout).
//
// exact-tiled bf16 widens them too: its dot products then broadcast f32 keys and values from
// memory (bf16, B*H = 8, S = 1024, D = 64: 0.63x -> 0.77x of torch's SDPA time with p @ v's
// split below), and where the order rounds p @ v at every step the stage also writes v * (2^16 +
// 1) and whether every v of the (batch, head) is in the split's range (v_split, kv_flags).
bool widens_kv_once(const Request& r, const AttentionOrder& o) {
  constexpr int64_t kMaxWorkspaceBytesPerRow = int64_t(2) << 20;
  // With S_k given at launch the workspace's size is not known when the kernel is built: each key
  // block's tiles are widened instead (exact either way).
  if (r.x_dtype == ScalarType::f32 || cuda_target(r) || r.seq_k_at_launch ||
      2 * r.seq_k * r.cols * int64_t(sizeof(float)) > kMaxWorkspaceBytesPerRow)
    return false;
  return (o.kind == AttentionOrder::Kind::Flash && o.team == 0) || (o.kind == AttentionOrder::Kind::ExactTiled && r.x_dtype == ScalarType::bf16);
}

std::vector<Kernel> build_attention(const Request& r, const Order& order) {
  const AttentionOrder& o = order.attention;
  if (o.kind == AttentionOrder::Kind::CpuFlash) return {build_cpu_flash_attention(r, order)};
  if (o.kind == AttentionOrder::Kind::CpuMatmul) return {build_cpu_matmul_attention(r, order)};
  const bool widen_once = widens_kv_once(r, o);
  // exact-tiled's p @ v split (Attention::accumulate_pv_bf16), where the order rounds p @ v at every step.
  const bool pv_split = widen_once && o.kind == AttentionOrder::Kind::ExactTiled && pv_rounds_each_step(o);
  std::vector<Kernel> stages(widen_once ? 2 : 1);
  // Every stage's arguments, in one order (gen/gen.hpp): the op's, then the workspaces.
  struct Arguments {
    int q = -1, k = -1, v = -1, out = -1, lse = -1, k_f32 = -1, v_f32 = -1, v_split = -1, kv_flags = -1;
    std::optional<MaskInput> mask;
  };
  auto arguments = [&](Builder& b) {
    Arguments a;
    a.q = b.buffer("q", r.x_dtype, false, Extent::rows_by_fixed, r.seq_q * r.cols);
    // With S_k given at launch, k and v hold rows * D * S_k elements (size argument 0).
    const int64_t kv_per_row = r.seq_k_at_launch ? r.cols : r.seq_k * r.cols;
    a.k = b.buffer("k", r.x_dtype, false, Extent::rows_by_fixed, kv_per_row);
    a.v = b.buffer("v", r.x_dtype, false, Extent::rows_by_fixed, kv_per_row);
    if (r.seq_k_at_launch) b.kernel().buffers[size_t(a.k)].per_row_size = b.kernel().buffers[size_t(a.v)].per_row_size = 0;
    if (r.mask) a.mask.emplace(b, r);
    a.out = b.buffer("out", r.x_dtype, true, Extent::rows_by_fixed, r.seq_q * r.cols);
    if (r.lse_output) a.lse = b.buffer("lse", ScalarType::f32, true, Extent::rows_by_fixed, r.seq_q);
    if (widen_once) {
      a.k_f32 = b.workspace("k_f32", ScalarType::f32, 1, r.seq_k * r.cols);
      a.v_f32 = b.workspace("v_f32", ScalarType::f32, 1, r.seq_k * r.cols);
    }
    if (pv_split) {
      a.v_split = b.workspace("v_split", ScalarType::f32, 1, r.seq_k * r.cols);
      a.kv_flags = b.workspace("kv_flags", ScalarType::f32, 1, 1);
    }
    return a;
  };
  if (widen_once) {
    // Stage 1, an instance per (batch, head): its K and V as f32, exact.
    Kernel& k = stages[0];
    k.name = "attention_widen_kv";
    Builder b(k);
    const Arguments a = arguments(b);
    const int64_t n = r.seq_k * r.cols;  // a multiple of 8 (D is)
    const int W = n % 32 == 0 ? 32 : n % 16 == 0 ? 16 : 8;
    b.region("widen", pv_split ? "K and V to f32, once per launch; v * (2^16 + 1) and whether every v is in range" : "K and V to f32, once per launch",
             [&] {
      int v_ok = -1;  // pv_split: whether every v so far is in kVRange, lane by lane
      if (pv_split) {
        v_ok = b.local("v_ok", Type{ScalarType::boolean, W});
        b.assign(v_ok, broadcast(constant(Type{ScalarType::boolean, 1}, 1), W));
      }
      ExprRef base = b.let("kv_base", mul(program_id(0), idx(n)));
      b.for_range("e", idx(0), idx(n), W, [&](ExprRef e) {
        ExprRef at = b.let("at", add(base, e));
        ExprRef vx = b.let("v", cast(load(b.kernel(), a.v, at, W), ScalarType::f32));
        b.store(a.k_f32, at, cast(load(b.kernel(), a.k, at, W), ScalarType::f32));
        b.store(a.v_f32, at, vx);
        if (pv_split) {
          b.store(a.v_split, at, mul(vx, f32c(65537.0f, W)));
          b.assign(v_ok, binary(Op::And, b.get(v_ok), magnitude_in(b, vx, kVRange)));
        }
      });
      if (pv_split)
        b.store(a.kv_flags, program_id(0), select(all_lanes(b.get(v_ok)), constant(Type{ScalarType::f32, 1}, 1.0), constant(Type{ScalarType::f32, 1}, 0.0)));
    });
  }
  Kernel& k = stages.back();
  k.name = "attention";
  if (r.seq_k_at_launch) k.sizes = {"S_k"};  // before the buffers that read it
  Builder b(k);
  // Few queries (a quarter of the query lanes or fewer: decode) leave most query lanes idle: such
  // a flash kernel puts keys and dims in lanes instead, an instance per query (flash_keys_in_lanes,
  // the same bits). CUDA keeps a thread per query.
  const bool keys_in_lanes = o.kind == AttentionOrder::Kind::Flash && o.team == 0 && !o.round_to_storage && !cuda_target(r) &&
                             r.seq_q * 4 <= o.query_lanes;
  // A team holds one query per thread: its per-query values are scalars (one lane).
  Attention a{r, o, b, r.cols, r.seq_q, r.seq_k, o.team > 0 || keys_in_lanes ? 1 : o.query_lanes, r.x_dtype};
  const Arguments args = arguments(b);
  a.q = args.q;
  a.k = widen_once ? args.k_f32 : args.k;
  a.v = widen_once ? args.v_f32 : args.v;
  a.kv_widened = widen_once;
  a.kv_flags = args.kv_flags;
  a.v_split = args.v_split;
  a.out = args.out;
  a.lse = args.lse;
  if (args.mask) {
    if (o.kind != AttentionOrder::Kind::Flash) throw Error(fmt::format("internal: order '{}' has a mask but is not a flash order", r.order));
    a.mask = &*args.mask;
  }
  if (r.seq_k_at_launch) {
    if (o.kind != AttentionOrder::Kind::Flash || o.team > 0)
      throw Error(fmt::format("internal: order '{}' has S_k at launch but is not a one-thread flash order", r.order));
    a.sk_launch = launch_size(0);
  }
  k.grid_rank = 2;
  if (o.kind == AttentionOrder::Kind::Flash && o.team > 0) {
    k.team = o.team;
    const int split = flash_team_split(r.cols);  // threads per query: flash_team()
    const int queries = std::max(1, o.team / split);
    k.grid_fixed = {(r.seq_q + queries - 1) / queries};
    b.region("attention", describe(o), [&] {
      a.setup_mask();
      a.flash_team();
    });
    return stages;
  }
  if (keys_in_lanes) {
    k.grid_fixed = {r.seq_q};
    b.region("attention", describe(o), [&] {
      a.setup();
      a.setup_mask();
      a.flash_keys_in_lanes();
    });
    return stages;
  }
  k.grid_fixed = {(r.seq_q + o.query_lanes - 1) / o.query_lanes};
  b.region("attention", describe(o), [&] {
    a.setup();
    a.setup_mask();
    switch (o.kind) {
      case AttentionOrder::Kind::Materialized: a.materialized(); break;
      case AttentionOrder::Kind::ExactTiled: a.exact_tiled(); break;
      case AttentionOrder::Kind::Flash: a.flash(); break;
      case AttentionOrder::Kind::CpuFlash:
      case AttentionOrder::Kind::CpuMatmul: break;  // built above
    }
  });
  return stages;
}

}  // namespace ordo::gen
