// Scaled-dot-product attention backward, per (batch, head) = row of the launch:
//   dv_j = sum_i P_ij dout_i,  dk_j = scale * sum_i dS_ij q_i,  dq_i = scale * sum_j dS_ij k_j
//   with P_ij = exp(s_ij - lse_i), dS_ij = P_ij (dout_i . v_j - dout_i . out_i)
// from q, k, v, the forward's out and lse (recomputed by the forward order when not given), and
// dout. AttentionBackwardOrder (ir/order.hpp) states the order of every sum.
//
// Two schedules of one order, with no atomics and the same bits:
//  - CUDA: two stages over the same arguments. Stage 1 holds `lanes` keys in the lanes of its
//    vectors and loops over every query, accumulating dk and dv; stage 2 holds `lanes` queries and
//    loops over every key, accumulating dq. Each stage recomputes P and dS: seven products of
//    S_q x S_k x D in all, over (batch*head) x blocks of instances.
//  - CPU: one kernel, an instance per (batch, head), running stage 1's key blocks in ascending
//    order (two per step where a vector is one register); each query's dS terms also go into its
//    dq, which is then summed over the keys in ascending order, as stage 2 sums it. Five
//    products; the dq accumulator is dq itself (f32) or an f32 scratch of S_q x D (16-bit). Past
//    kFusedScratchBytes of scratch that grows with S_q (fused_scratch_bytes) the CPU runs the two
//    stages too.
// Lanes past the last key (query) repeat the last one, computing and storing the same bits
// (gen/ops/attention.cpp does the same); the fused kernel adds only the real keys' terms to dq.
// Causal masking is a select: every instance runs the same loops. With an additive mask
// (Request::mask) s_ij = dot(q_i, k_j) * c + mask_ij, and a key whose s_ij is -inf is masked.
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "gen/blocks/constants.hpp"
#include "gen/gen.hpp"
#include "gen/blocks/math.hpp"
#include "gen/blocks/warp.hpp"
#include "gen/blocks/attention_mask.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {


// The fused CPU kernel's scratch that grows with S_q lives on the stack of the thread running the
// instance, as all scratch does: past this size the two stages run instead.
constexpr int64_t kFusedScratchBytes = int64_t(1) << 20;

// That scratch, in bytes: D_i of every query, lse when recomputed, and for 16-bit dq its f32 sum
// (S_q x D).
int64_t fused_scratch_bytes(const Request& r) {
  int64_t floats = r.seq_q;
  if (!r.saved_stats) floats += r.seq_q;
  if (r.x_dtype != ScalarType::f32) floats += r.seq_q * r.cols;
  return floats * 4;
}

// Queries (stage 1) or keys (stage 2) per step, see Backward::group: two L-lane chains each, 8
// registers' worth where a vector is one register, 6 where it is more (3 rows of 16 lanes with
// AVX2). CUDA keeps one row at a time (its registers are per thread, and the kernels' spill checks
// pin that).
int rows_per_step(const Request& r, int lanes) {
  if (cuda_target(r)) return 1;
  const int regs = registers_per_vector(r, lanes);
  return regs == 1 ? 4 : std::max(1, 6 / regs);
}

// Key blocks (vectors of `lanes` keys) a step of the fused CPU kernel takes together: each
// query's broadcast element then feeds one fma per block, so two blocks halve the loads per fma
// (profiled on AVX-512, f32, S = 1024, D = 64: the dot-product and dk/dv loops issued a load per
// fma and took 30% of the time each). Where a vector takes more than one register (AVX2), the
// accumulators of two would not fit: one.
int key_vectors_per_step(const Request& r, int lanes) { return registers_per_vector(r, lanes) == 1 ? 2 : 1; }

struct Backward {
  const Request& r;
  const Order& order;
  const AttentionBackwardOrder& o;
  Builder& b;
  int64_t D, Sq, Sk;  // Sk: 0 when S_k is given at launch (sk_launch)
  int L;
  int q = -1, k = -1, v = -1, out = -1, dout = -1, lse = -1, dq = -1, dk = -1, dv = -1;
  // Request::seq_k_at_launch: S_k as the kernel's size argument 0 (the fused CPU kernel only);
  // null otherwise.
  ExprRef sk_launch{};
  ExprRef keys() const { return sk_launch ? sk_launch : idx(Sk); }
  // Elements of a (batch, head)'s K (or V, dK, dV): S_k rows of D.
  ExprRef kv_elements() const { return sk_launch ? mul(sk_launch, idx(D)) : idx(Sk * D); }
  std::optional<MaskInput> mask{};  // Request::mask
  ExprRef mask_head{};              // the instance's (batch, head)'s first mask element
  // Queries (stage 1) or keys (stage 2) taken together (rows_per_step): their dot products are
  // independent chains, and their terms still reach each accumulator in order, so no bit depends
  // on it.
  int group = 1;

  // The arguments, one order for both stages.
  void arguments() {
    const ScalarType t = r.x_dtype;
    // With S_k at launch, k, v, dk and dv hold rows * D * S_k elements (size argument 0).
    const int64_t kv_per_row = sk_launch ? D : Sk * D;
    auto keyed = [&](int buffer) {
      if (sk_launch) b.kernel().buffers[size_t(buffer)].per_row_size = 0;
      return buffer;
    };
    q = b.buffer("q", t, false, Extent::rows_by_fixed, Sq * D);
    k = keyed(b.buffer("k", t, false, Extent::rows_by_fixed, kv_per_row));
    v = keyed(b.buffer("v", t, false, Extent::rows_by_fixed, kv_per_row));
    out = b.buffer("out", t, false, Extent::rows_by_fixed, Sq * D);
    dout = b.buffer("dout", t, false, Extent::rows_by_fixed, Sq * D);
    if (r.saved_stats) lse = b.buffer("lse", ScalarType::f32, false, Extent::rows_by_fixed, Sq);
    if (r.mask) {
      mask.emplace(b, r);
      mask_head = mask->head_base(b, idx(0));
    }
    dq = b.buffer("dq", t, true, Extent::rows_by_fixed, Sq * D);
    dk = keyed(b.buffer("dk", t, true, Extent::rows_by_fixed, kv_per_row));
    dv = keyed(b.buffer("dv", t, true, Extent::rows_by_fixed, kv_per_row));
  }

  Type vec() const { return Type{ScalarType::f32, L}; }
  ExprRef splat(ExprRef s) const { return broadcast(std::move(s), L); }
  ExprRef load_f32(int buffer, ExprRef at) const {
    ExprRef x = load(b.kernel(), buffer, std::move(at));
    return x->type.scalar == ScalarType::f32 ? x : cast(x, ScalarType::f32);
  }
  ExprRef load_f32(int buffer, ExprRef at, int lanes) const {
    ExprRef x = load(b.kernel(), buffer, std::move(at), lanes);
    return x->type.scalar == ScalarType::f32 ? x : cast(x, ScalarType::f32);
  }
  ExprRef gather_f32(int buffer, ExprRef at) const {
    ExprRef x = gather(b.kernel(), buffer, std::move(at));
    return x->type.scalar == ScalarType::f32 ? x : cast(x, ScalarType::f32);
  }
  ExprRef stored(ExprRef x, int buffer) const {
    const ScalarType t = b.kernel().buffers[size_t(buffer)].elem;
    return t == ScalarType::f32 ? x : cast(std::move(x), t);
  }
  // One step of a dot product or accumulation: fma(a, x, acc), or acc + a*x rounded twice.
  ExprRef step(ExprRef acc, ExprRef a, ExprRef x) const {
    if (o.fma) return fma(std::move(a), std::move(x), std::move(acc));
    return add(std::move(acc), mul(std::move(a), std::move(x)));
  }
  ExprRef scale(int lanes) const { return f32c(static_cast<float>(r.scale.value_or(1.0 / std::sqrt(static_cast<double>(D)))), lanes); }
  ExprRef scale() const { return scale(L); }
  int scratch(const char* name, int64_t elements) { return b.buffer(name, ScalarType::f32, true, Extent::scratch, elements); }
  void zero(int buffer, int blocks = 1) {
    b.for_range("d", idx(0), idx(D * blocks), 1, [&](ExprRef d) { b.store(buffer, mul(d, idx(L)), f32c(0.0f, L)); });
  }

  // P and dS from a score's and dP's dot products (raw, per lane), lse and D_i; `masked`: the
  // causal mask's lanes, or null. With an additive mask, `query` and `key` (an index or a vector
  // of them) address its value, added to the score, and a score of -inf is masked.
  std::pair<ExprRef, ExprRef> probabilities(ExprRef qk, ExprRef dp, ExprRef lse_i, ExprRef d_i, ExprRef masked, const ExprRef& query,
                                            const ExprRef& key) {
    ExprRef s = b.let("s", mul(std::move(qk), scale()));
    if (mask) {
      s = b.let("s.masked", add(s, mask->at(b, mask_head, query, key)));
      masked = binary(Op::Eq, s, f32c(-INFINITY, L));
    }
    ExprRef p = b.let("p", exp_f32(b, MathImpl::SleefU10, sub(s, std::move(lse_i))));
    ExprRef ds = mul(p, sub(std::move(dp), std::move(d_i)));
    if (masked) {
      p = b.let("p.masked", select(masked, f32c(0.0f, L), p));
      ds = select(masked, f32c(0.0f, L), ds);
    }
    return {p, b.let("ds", ds)};
  }

  // lse of every query, given or recomputed `lanes` queries at a time by the forward order into
  // scratch; returns the query's lse.
  std::function<ExprRef(ExprRef)> lse_of_queries() {
    if (lse >= 0) return [this](ExprRef i) { return load(b.kernel(), lse, add(mul(program_id(0), idx(Sq)), std::move(i))); };
    const int lse_s = scratch("lse_s", Sq);
    b.for_range("g", idx(0), idx((Sq + L - 1) / L), 1, [&](ExprRef g) {
      ExprRef query = b.let("query", binary(Op::Min, add(splat(mul(g, idx(L))), iota(L)), splat(idx(Sq - 1))));
      ExprRef value = emit_attention_lse(b, r, order.attention, q, k, query, mask ? &*mask : nullptr);
      b.store(lse_s, query, value);
    });
    return [this, lse_s](ExprRef i) { return load(b.kernel(), lse_s, std::move(i)); };
  }

  // Where the fused kernel sums dq: element i*D + d of query i's row, f32.
  struct DqSum {
    int buffer = -1;
    ExprRef base;  // the instance's first element in `buffer`
  };

  // body(d0, lanes) for the columns d0 .. d0+lanes-1 of a D-row, in vectors of L (a loop) and
  // then one of D mod L.
  void for_columns(const std::function<void(ExprRef, int)>& body) {
    const int64_t full = D - D % L;
    if (full > 0) b.for_range("d0", idx(0), idx(full), L, [&](ExprRef d0) { body(d0, L); });
    if (D % L) body(idx(full), int(D % L));
  }

  // Stage 1's work for the key blocks first_block .. first_block + W - 1, W = real_keys.size()
  // (block b: keys b*L ..., lanes past S_k - 1 repeating it), every query in order: dk and dv of
  // their keys, stored. With `dq_sum`, each query's dS terms of block w's first real_keys[w] keys
  // (a count, given or computed at launch) are also added to its dq sum, key by key, the blocks
  // in order. Each key's sums and each query's dq chain are those of one block at a time: W
  // changes no bit.
  // D_i of every query, when `di_of` is given, comes from it (the fused kernel computes each once);
  // else it is computed again in each block, by the same chain.
  void key_block(ExprRef first_block, const std::vector<ExprRef>& real_keys, const std::function<ExprRef(ExprRef)>& lse_of,
                 const std::function<ExprRef(ExprRef)>& di_of, const DqSum* dq_sum) {
    const int W = static_cast<int>(real_keys.size());
    ExprRef q_base = b.let("q_base", mul(program_id(0), idx(Sq * D)));
    ExprRef kv_base = b.let("kv_base", mul(program_id(0), kv_elements()));
    ExprRef last_key = b.let("last_key", sub(keys(), idx(1)));
    std::vector<ExprRef> block_of, key, key_rows;
    for (int w = 0; w < W; ++w) {
      block_of.push_back(w ? b.let("block", add(first_block, idx(w))) : first_block);
      key.push_back(b.let("key", binary(Op::Min, add(splat(mul(block_of[size_t(w)], idx(L))), iota(L)), splat(last_key))));
      key_rows.push_back(b.let("key_rows", add(splat(kv_base), mul(key[size_t(w)], splat(idx(D))))));
    }
    // Scratch slot of column d of block w: kt, vt, dk_acc and dv_acc hold D x W vectors of L.
    auto slot_of = [&](const ExprRef& d, int w) { return add(mul(d, idx(int64_t(W) * L)), idx(int64_t(w) * L)); };
    b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
      for (int w = 0; w < W; ++w) {
        b.store(kt, slot_of(d, w), gather_f32(k, add(key_rows[size_t(w)], splat(d))));
        b.store(vt, slot_of(d, w), gather_f32(v, add(key_rows[size_t(w)], splat(d))));
      }
    });
    zero(dk_acc, W);
    zero(dv_acc, W);
    b.region("dk,dv", describe(o) + (dq_sum ? ": key blocks, queries ascending; dq's terms of their keys" : ": stage 1, queries ascending"), [&] {
      // `n` queries from i0: their dot products interleaved over d, then their terms added to
      // dk and dv in query order. Each sum keeps the order above; only independent chains meet.
      auto queries = [&](ExprRef i0, int n) {
        std::vector<ExprRef> rows, lse_i;
        std::vector<int> di, qk, dp;  // qk and dp of query t, block w: [t * W + w]
        for (int t = 0; t < n; ++t) {
          ExprRef i = t ? add(i0, idx(t)) : i0;
          rows.push_back(b.let("row", add(q_base, mul(i, idx(D)))));
          lse_i.push_back(b.let("lse_i", lse_of(i)));
          di.push_back(b.local("D_i", Type{ScalarType::f32, 1}));
          b.assign(di.back(), di_of ? di_of(i) : f32c(0.0f, 1));
          for (int w = 0; w < W; ++w) {
            qk.push_back(b.local("qk", vec()));
            dp.push_back(b.local("dp", vec()));
            b.assign(qk.back(), f32c(0.0f, L));
            b.assign(dp.back(), f32c(0.0f, L));
          }
        }
        b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
          std::vector<ExprRef> kd, vd;
          for (int w = 0; w < W; ++w) {
            ExprRef slot = slot_of(d, w);
            kd.push_back(b.let("k_d", load(b.kernel(), kt, slot, L)));
            vd.push_back(b.let("v_d", load(b.kernel(), vt, slot, L)));
          }
          for (int t = 0; t < n; ++t) {
            ExprRef at = b.let("at", add(rows[size_t(t)], d));
            ExprRef g = b.let("dout_d", load_f32(dout, at));
            ExprRef qd = b.let("q_d", splat(load_f32(q, at)));
            if (!di_of) b.assign(di[size_t(t)], step(b.get(di[size_t(t)]), g, load_f32(out, at)));
            for (int w = 0; w < W; ++w) {
              const size_t c = size_t(t * W + w);
              b.assign(qk[c], step(b.get(qk[c]), qd, kd[size_t(w)]));
              b.assign(dp[c], step(b.get(dp[c]), splat(g), vd[size_t(w)]));
            }
          }
        });
        std::vector<ExprRef> p, ds;  // [t * W + w]
        for (int t = 0; t < n; ++t)
          for (int w = 0; w < W; ++w) {
            const size_t c = size_t(t * W + w);
            ExprRef query = t ? add(i0, idx(t)) : i0;
            ExprRef masked = r.causal ? binary(Op::Lt, splat(query), key[size_t(w)]) : nullptr;
            auto [pt, dst] = probabilities(b.get(qk[c]), b.get(dp[c]), splat(lse_i[size_t(t)]), splat(b.get(di[size_t(t)])), masked, query,
                                           key[size_t(w)]);
            p.push_back(pt);
            ds.push_back(b.let("ds", dst));
          }
        b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
          std::vector<ExprRef> slot, dv_d, dk_d;
          for (int w = 0; w < W; ++w) {
            slot.push_back(b.let("slot", slot_of(d, w)));
            dv_d.push_back(load(b.kernel(), dv_acc, slot.back(), L));
            dk_d.push_back(load(b.kernel(), dk_acc, slot.back(), L));
          }
          for (int t = 0; t < n; ++t) {
            ExprRef at = b.let("at", add(rows[size_t(t)], d));
            ExprRef g = b.let("dout_d", splat(load_f32(dout, at)));
            ExprRef qd = b.let("q_d", splat(load_f32(q, at)));
            for (int w = 0; w < W; ++w) {
              const size_t c = size_t(t * W + w);
              dv_d[size_t(w)] = b.let("dv_d", step(dv_d[size_t(w)], p[c], g));
              dk_d[size_t(w)] = b.let("dk_d", step(dk_d[size_t(w)], ds[c], qd));
            }
          }
          for (int w = 0; w < W; ++w) {
            b.store(dv_acc, slot[size_t(w)], dv_d[size_t(w)]);
            b.store(dk_acc, slot[size_t(w)], dk_d[size_t(w)]);
          }
        });
        if (!dq_sum) return;
        // dq_i[d] += dS_ij k_j[d] for the blocks' real keys j in ascending order: stage 2's chain,
        // a vector of columns at a time. The n queries' chains are independent and interleave.
        // The keys are a loop, each query's dS_ij read from scratch (one copy of the step's code
        // instead of one per key: a quarter of the kernel's compile time).
        for (int t = 0; t < n; ++t)
          for (int w = 0; w < W; ++w) b.store(ds_s, idx(int64_t(t * W + w) * L), ds[size_t(t * W + w)]);
        // Two column vectors per step where D has them: 2n chains, enough to hide the fma latency.
        auto dq_columns = [&](const std::vector<std::pair<ExprRef, int>>& columns) {
          std::vector<ExprRef> at;
          std::vector<int> acc;
          for (const auto& [d0, lanes] : columns)
            for (int t = 0; t < n; ++t) {
              ExprRef i = t ? add(i0, idx(t)) : i0;
              at.push_back(b.let("dq_at", add(dq_sum->base, add(mul(i, idx(D)), d0))));
              acc.push_back(b.local("dq_d", Type{ScalarType::f32, lanes}));
              b.assign(acc.back(), load(b.kernel(), dq_sum->buffer, at.back(), lanes));
            }
          for (int w = 0; w < W; ++w)
            b.for_range("j", idx(0), real_keys[size_t(w)], 1, [&](ExprRef j) {
              ExprRef key_row = b.let("key_row", add(kv_base, mul(add(mul(block_of[size_t(w)], idx(L)), j), idx(D))));
              for (size_t c = 0; c < columns.size(); ++c) {
                const auto& [d0, lanes] = columns[c];
                ExprRef k_j = b.let("k_j", load_f32(k, add(key_row, d0), lanes));
                for (int t = 0; t < n; ++t) {
                  ExprRef ds_j = load(b.kernel(), ds_s, add(idx(int64_t(t * W + w) * L), j));
                  const int a = acc[c * size_t(n) + size_t(t)];
                  b.assign(a, step(b.get(a), lanes > 1 ? broadcast(ds_j, lanes) : ds_j, k_j));
                }
              }
            });
          for (size_t e = 0; e < at.size(); ++e) b.store(dq_sum->buffer, at[e], b.get(acc[e]));
        };
        const int64_t pairs = D / (2 * L);
        if (pairs > 0)
          b.for_range("d0", idx(0), idx(pairs * 2 * L), 2 * L, [&](ExprRef d0) {
            dq_columns({{d0, L}, {b.let("d1", add(d0, idx(L))), L}});
          });
        if (D / L % 2) dq_columns({{idx(pairs * 2 * L), L}});
        if (D % L) dq_columns({{idx(D - D % L), int(D % L)}});
      };
      const int64_t full = Sq - Sq % group;
      if (full > 0) b.for_range("i", idx(0), idx(full), group, [&](ExprRef i0) { queries(i0, group); });
      if (Sq % group) queries(idx(full), int(Sq % group));
      b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
        for (int w = 0; w < W; ++w) {
          ExprRef at = b.let("at", add(key_rows[size_t(w)], splat(d)));
          b.store(dk, at, stored(mul(load(b.kernel(), dk_acc, slot_of(d, w), L), scale()), dk));
          b.store(dv, at, stored(load(b.kernel(), dv_acc, slot_of(d, w), L), dv));
        }
      });
    });
  }

  // The scratch of `blocks` key blocks at a time: their k and v transposed (D x blocks x L), dk
  // and dv accumulators.
  int kt = -1, vt = -1, dk_acc = -1, dv_acc = -1;
  int ds_s = -1;  // the fused kernel's dS of a step: query t, block w at (t * blocks + w) * L
  void key_block_scratch(int blocks) {
    kt = scratch("k_t", D * blocks * L);
    vt = scratch("v_t", D * blocks * L);
    dk_acc = scratch("dk_acc", D * blocks * L);
    dv_acc = scratch("dv_acc", D * blocks * L);
  }

  // Stage 1: keys in lanes (the key block program_id(1)), every query in order.
  void keys_stage() {
    key_block_scratch(1);
    key_block(program_id(1), {idx(0)}, lse_of_queries(), nullptr, nullptr);
  }

  // The CPU's one kernel: an instance per (batch, head), its key blocks ascending, dq summed along.
  void fused() {
    const int W = key_vectors_per_step(r, L);
    key_block_scratch(W);
    ds_s = scratch("ds", int64_t(group) * W * L);
    const std::function<ExprRef(ExprRef)> lse_of = lse_of_queries();
    // D_i = dot(dout_i, out_i), once per query: the chain stage 1 runs in every key block.
    const int di_s = scratch("D_s", Sq);
    ExprRef q_base = b.let("q_base", mul(program_id(0), idx(Sq * D)));
    b.for_range("i", idx(0), idx(Sq), 1, [&](ExprRef i) {
      ExprRef row = b.let("row", add(q_base, mul(i, idx(D))));
      const int di = b.local("D_i", Type{ScalarType::f32, 1});
      b.assign(di, f32c(0.0f, 1));
      b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
        ExprRef at = b.let("at", add(row, d));
        b.assign(di, step(b.get(di), load_f32(dout, at), load_f32(out, at)));
      });
      b.store(di_s, i, b.get(di));
    });
    const std::function<ExprRef(ExprRef)> di_of = [this, di_s](ExprRef i) { return load(b.kernel(), di_s, std::move(i)); };
    ExprRef dq_base = b.let("dq_base", mul(program_id(0), idx(Sq * D)));
    DqSum sum;
    if (b.kernel().buffers[size_t(dq)].elem == ScalarType::f32) {
      sum.buffer = dq;
      sum.base = dq_base;
    } else {
      sum.buffer = scratch("dq_acc", Sq * D);
      sum.base = idx(0);
    }
    b.for_range("i", idx(0), idx(Sq), 1, [&](ExprRef i) {
      for_columns([&](ExprRef d0, int lanes) { b.store(sum.buffer, add(sum.base, add(mul(i, idx(D)), d0)), f32c(0.0f, lanes)); });
    });
    // The key blocks ascending, W at a time while all W are full; then one step of the blocks
    // left (at most W: the full ones past the last step, and the partial one, S_k mod L keys).
    // With S_k at launch, those left run one block per step (W changes no bit), each with its
    // count of real keys computed.
    if (sk_launch) {
      ExprRef blocks = b.let("key_blocks", div(add(sk_launch, idx(L - 1)), idx(L)));
      ExprRef looped = b.let("looped", mul(div(div(sk_launch, idx(L)), idx(W)), idx(W)));
      b.for_range("key_block", idx(0), looped, W, [&](ExprRef first) {
        key_block(first, std::vector<ExprRef>(size_t(W), idx(L)), lse_of, di_of, &sum);
      });
      b.for_range("key_block", looped, blocks, 1, [&](ExprRef block) {
        ExprRef real = b.let("real_keys", binary(Op::Min, idx(L), sub(sk_launch, mul(block, idx(L)))));
        key_block(block, {real}, lse_of, di_of, &sum);
      });
    } else {
      const int64_t blocks = (Sk + L - 1) / L, looped = Sk / L / W * W;
      if (looped > 0)
        b.for_range("key_block", idx(0), idx(looped), W, [&](ExprRef first) {
          key_block(first, std::vector<ExprRef>(size_t(W), idx(L)), lse_of, di_of, &sum);
        });
      if (blocks > looped) {
        std::vector<ExprRef> real_keys;
        for (int64_t block = looped; block < blocks; ++block) real_keys.push_back(idx(block == blocks - 1 && Sk % L ? Sk % L : L));
        key_block(idx(looped), real_keys, lse_of, di_of, &sum);
      }
    }
    // dq = (its sum) * c, rounded once to the storage type.
    b.for_range("i", idx(0), idx(Sq), 1, [&](ExprRef i) {
      for_columns([&](ExprRef d0, int lanes) {
        ExprRef row_at = b.let("row_at", add(mul(i, idx(D)), d0));
        ExprRef total = load(b.kernel(), sum.buffer, add(sum.base, row_at), lanes);
        b.store(dq, add(dq_base, row_at), stored(mul(total, scale(lanes)), dq));
      });
    });
  }

  // Stage 2: queries in lanes, every key in order.
  void queries_stage() {
    ExprRef query = b.let("query", binary(Op::Min, add(splat(mul(program_id(1), idx(L))), iota(L)), splat(idx(Sq - 1))));
    ExprRef kv_base = b.let("kv_base", mul(program_id(0), idx(Sk * D)));
    ExprRef q_rows = b.let("q_rows", add(splat(mul(program_id(0), idx(Sq * D))), mul(query, splat(idx(D)))));
    const int qt = scratch("q_t", D * L), gt = scratch("dout_t", D * L), dq_acc = scratch("dq_acc", D * L);
    const int di = b.local("D_i", vec());
    b.assign(di, f32c(0.0f, L));
    b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
      ExprRef at = b.let("at", add(q_rows, splat(d)));
      ExprRef g = b.let("dout_d", gather_f32(dout, at));
      b.store(qt, mul(d, idx(L)), gather_f32(q, at));
      b.store(gt, mul(d, idx(L)), g);
      b.assign(di, step(b.get(di), g, gather_f32(out, at)));
    });
    zero(dq_acc);
    ExprRef lse_i = b.let("lse_i", lse >= 0 ? gather(b.kernel(), lse, add(splat(mul(program_id(0), idx(Sq))), query))
                                            : emit_attention_lse(b, r, order.attention, q, k, query, mask ? &*mask : nullptr));
    b.region("dq", describe(o) + ": stage 2, keys ascending", [&] {
      // `n` keys from j0: their dot products interleaved over d, then their terms added to dq
      // in key order.
      auto keys = [&](ExprRef j0, int n) {
        std::vector<ExprRef> rows;
        std::vector<int> qk, dp;
        for (int t = 0; t < n; ++t) {
          rows.push_back(b.let("key_row", add(kv_base, mul(t ? add(j0, idx(t)) : j0, idx(D)))));
          qk.push_back(b.local("qk", vec()));
          dp.push_back(b.local("dp", vec()));
          b.assign(qk.back(), f32c(0.0f, L));
          b.assign(dp.back(), f32c(0.0f, L));
        }
        b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
          ExprRef slot = b.let("slot", mul(d, idx(L)));
          ExprRef qd = b.let("q_d", load(b.kernel(), qt, slot, L)), gd = b.let("dout_d", load(b.kernel(), gt, slot, L));
          for (int t = 0; t < n; ++t) {
            ExprRef at = b.let("at", add(rows[size_t(t)], d));
            b.assign(qk[size_t(t)], step(b.get(qk[size_t(t)]), qd, splat(load_f32(k, at))));
            b.assign(dp[size_t(t)], step(b.get(dp[size_t(t)]), gd, splat(load_f32(v, at))));
          }
        });
        std::vector<ExprRef> ds;
        for (int t = 0; t < n; ++t) {
          ExprRef key = t ? add(j0, idx(t)) : j0;
          ExprRef masked = r.causal ? binary(Op::Lt, query, splat(key)) : nullptr;
          ds.push_back(b.let("ds", probabilities(b.get(qk[size_t(t)]), b.get(dp[size_t(t)]), lse_i, b.get(di), masked, query, key).second));
        }
        b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
          ExprRef slot = b.let("slot", mul(d, idx(L)));
          ExprRef dq_d = load(b.kernel(), dq_acc, slot, L);
          for (int t = 0; t < n; ++t) dq_d = b.let("dq_d", step(dq_d, ds[size_t(t)], splat(load_f32(k, add(rows[size_t(t)], d)))));
          b.store(dq_acc, slot, dq_d);
        });
      };
      const int64_t full = Sk - Sk % group;
      if (full > 0) b.for_range("j", idx(0), idx(full), group, [&](ExprRef j0) { keys(j0, group); });
      if (Sk % group) keys(idx(full), int(Sk % group));
      b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) {
        b.store(dq, add(q_rows, splat(d)), stored(mul(load(b.kernel(), dq_acc, mul(d, idx(L)), L), scale()), dq));
      });
    });
  }
};

}  // namespace

bool attention_backward_fused(const Request& r) { return !cuda_target(r) && fused_scratch_bytes(r) <= kFusedScratchBytes; }

std::vector<Kernel> build_attention_backward(const Request& r, const Order& order) {
  const AttentionBackwardOrder& o = order.attention_backward;
  if (o.kind == AttentionBackwardOrder::Kind::CpuFlash) return {build_cpu_flash_attention_backward(r, order)};
  if (o.kind == AttentionBackwardOrder::Kind::CpuMatmul) return {build_cpu_matmul_attention_backward(r, order)};
  if (attention_backward_fused(r)) {
    std::vector<Kernel> fused(1);
    Kernel& k = fused[0];
    k.name = "attention_backward";
    if (r.seq_k_at_launch) k.sizes = {"S_k"};  // before the buffers that read it
    Builder b(k);
    Backward w{r, order, o, b, r.cols, r.seq_q, r.seq_k, o.lanes};
    if (r.seq_k_at_launch) {
      if (!r.saved_stats) throw Error("internal: attention_backward with S_k at launch recomputes lse");
      w.sk_launch = launch_size(0);
    }
    w.group = rows_per_step(r, o.lanes);
    w.arguments();
    w.fused();
    return fused;
  }
  if (r.seq_k_at_launch) throw Error("internal: attention_backward's two stages have S_k at launch");
  std::vector<Kernel> stages(2);
  const char* names[2] = {"attention_backward_dkdv", "attention_backward_dq"};
  for (int s = 0; s < 2; ++s) {
    Kernel& k = stages[size_t(s)];
    k.name = names[s];
    Builder b(k);
    Backward w{r, order, o, b, r.cols, r.seq_q, r.seq_k, o.lanes};
    w.group = rows_per_step(r, o.lanes);
    w.arguments();
    k.grid_rank = 2;
    const int64_t along = s == 0 ? r.seq_k : r.seq_q;
    k.grid_fixed = {(along + o.lanes - 1) / o.lanes};
    if (s == 0) w.keys_stage();
    else w.queries_stage();
  }
  return stages;
}

}  // namespace ordo::gen
