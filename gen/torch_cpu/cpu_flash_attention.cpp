// PyTorch 2.x's CPU flash attention (AttentionOrder::Kind::CpuFlash): what
// torch.nn.functional.scaled_dot_product_attention runs on the CPU for 4-D inputs without dropout.
// Its order was read from FlashAttentionKernel.cpp and measured against torch 2.15.0
// (docs/research/torch2.15-attention.md).
//
// A program instance is one batch*head; it runs the query blocks in order, each the qB query rows
// m0 .. m0 + qB - 1, with qS = 256 if S_q >= 768, 64 if S_q >= 192, else 32, at most S_q, and the
// last block shorter.
// PyTorch's per-thread buffers become scratch: the block's scores (qB x kvB), its output rows
// (qB x D), and each row's running max and sum. For each block of kvB keys (512, the last one
// shorter; under causal masking only blocks starting below min(m0 + qB, S_k)):
//   scores = q_rows @ k_rows^T by the BLAS order (gen/libraries/mkl_gemm.cpp); causal: key > query is -inf;
//   per row: s = score * scale (with a mask, Request::mask: fma(score, scale, mask), as
//     PyTorch's _scale_attn_mask_fusion_kernel, vector body and tail alike); m' = max(m, max_j s_j) as `m > t ? m : t`;
//     m' = -inf (every key masked so far): the row's probabilities are 0 and nothing else changes;
//     else p_j = exp(s_j - m'), the first floor(kvB/lanes)*lanes by the vector exp with their sum
//     in zero-started lanes folded by the order's fold, the rest by the tail exp added in order;
//     l = fma(exp(m - m'), l, block sum) with glibc's expf; m = m'; output rows so far *= exp(m - m');
//   output rows = (output rows +) p @ v_rows by the BLAS order (beta = 1 after the first block).
// Finally out = rows * (1/l) (l = 0 counts as 1), lse = m + logf(l) (m = -inf counts as 0).
// bf16: the exponentials are summed two vectors at a time (AttentionOrder::paired_exp_sum) and p
// is rounded to bf16 for p @ v. Control flow may not depend on program_id, so an instance runs its
// (batch, head)'s query blocks one after the other: a launch is parallel over batch*heads only.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "gen/blocks/constants.hpp"
#include "gen/gen.hpp"
#include "gen/blocks/math.hpp"
#include "gen/libraries/mkl_gemm.hpp"
#include "gen/blocks/reductions.hpp"
#include "gen/blocks/row.hpp"
#include "gen/blocks/attention_mask.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Bytes of the f32 copies of a query block and a key block's v (16-bit inputs).
constexpr int64_t kWidenedScratchBytes = int64_t(512) << 10;
// Bytes of the (batch, head)'s keys transposed for the general q @ k^T kernel (PackedKeys).
constexpr int64_t kPackedKeysBytes = int64_t(512) << 10;

struct CpuFlash {
  const Request& r;
  const AttentionOrder& o;
  Builder& b;
  int64_t D, Sq, Sk, qS, kS;
  int q = -1, k = -1, v = -1, out = -1, lse = -1;
  int scores = -1, rows = -1, row_max = -1, row_sum = -1;  // scratch
  int q_f32 = -1, v_f32 = -1;  // scratch: the query block's rows and the key block's v rows as f32, for 16-bit inputs
  // scratch: P in bf16 where the products are vdpbf16ps pairs (bf16_pair_dot), so that two
  // adjacent probabilities are one pair word, a single load; P @ v reads it instead of scores.
  int p_words = -1;
  // scratch: every key of the (batch, head), k-major (row stride keys_t_stride), as MKL's general
  // q @ k^T kernel copies a group of keys before its fmas; the full query blocks share it
  // (`share_keys`), the first over each key block filling it in. -1: each product copies its own.
  int keys_t = -1;
  int64_t keys_t_stride = 0;
  bool share_keys = false;
  // Whether PyTorch calls MKL outside its parallel loop (one (batch, head) and one query block):
  // inside it, MKL runs its gemv kernels on one thread (mkl_threading, gemm_call_threaded).
  bool outside_loop = false;
  ExprRef q_base{}, kv_base{}, m0{};
  std::optional<MaskInput> mask{};  // Request::mask
  ExprRef mask_head{};            // the instance's (batch, head)'s first mask element

  GemmInputs inputs() const {
    return r.x_dtype == ScalarType::f32 ? GemmInputs::f32 : r.x_dtype == ScalarType::f16 ? GemmInputs::f16 : GemmInputs::bf16;
  }
  // P as P @ v reads it: rounded to the storage type for 16-bit inputs.
  ExprRef p_stored(ExprRef p) const {
    return r.x_dtype == ScalarType::f32 ? p : cast(cast(std::move(p), r.x_dtype), ScalarType::f32);
  }

  // The PyTorch thread that runs this instance's current query block: at::parallel_for cuts the
  // batch*heads*blocks items into T = min(threads, items) runs of ceil(items / T), in order.
  ExprRef torch_thread() const {
    const int64_t blocks = (Sq + qS - 1) / qS;
    const ExprRef items = mul(grid_extent(0), idx(blocks));
    const ExprRef T = binary(Op::Min, items, idx(o.gemm.threads));
    const ExprRef run = div(sub(add(items, T), idx(1)), T);
    return b.let("torch_thread", div(add(mul(program_id(0), idx(blocks)), div(m0, idx(qS))), run));
  }
  // The distance of the output rows' scratch from a 64-byte line, in floats, where PyTorch keeps
  // them: each of its threads has a buffer of spt floats (the scores, max, sum, then the output
  // rows), one after the other from a 64-byte line. The AMD model peels by it on every thread
  // count; the Intel model reads it only in a threaded gemv 'N' (one query row), which runs
  // threaded outside PyTorch's loop only: on its thread 0.
  ExprRef rows_align(bool threaded) const {
    const int64_t first = qS * kS + 2 * qS, spt = first + qS * D;
    if (o.gemm.kind != GemmOrder::Kind::MklAmd || threaded || o.gemm.threads == 1) return idx(first % 16);
    return b.let("rows_align", binary(Op::Rem, add(mul(torch_thread(), idx(spt)), idx(first)), idx(16)));
  }

  // Whether MKL on several threads runs any of this launch's products otherwise than on one.
  bool threads_matter() const {
    for (auto [qB, kvB] : cpu_flash_block_shapes(Sq, qS, Sk, kS))
      if (gemm_threads_matter(o.gemm, inputs(), true, qB, kvB, D) || gemm_threads_matter(o.gemm, inputs(), false, qB, D, kvB)) return true;
    return false;
  }

  void widen(int to, int from, const ExprRef& base, int64_t count) {
    b.for_range("e", idx(0), idx(count), 8, [&](ExprRef e) {
      b.store(to, e, cast(load(b.kernel(), from, add(base, e), 8), ScalarType::f32));
    });
  }

  // One query block of qB rows. threaded: MKL runs on torch_threads threads.
  void block(int64_t qB, bool threaded) {
    // 16-bit queries: the block's rows widened to f32 once, where q @ k^T of every key block
    // would widen each element again.
    if (q_f32 >= 0) widen(q_f32, q, add(q_base, mul(m0, idx(D))), qB * D);
    b.for_range("r", idx(0), idx(qB), 1, [&](ExprRef j) {
      b.store(row_max, j, f32c(-kInf));
      b.store(row_sum, j, f32c(0.0f));
    });
    const ExprRef num_keys = r.causal ? b.let("num_keys", binary(Op::Min, add(m0, idx(qB)), idx(Sk))) : idx(Sk);
    const int64_t full_end = Sk - Sk % kS;
    // PyTorch's first key block runs p @ v with beta = 0 and leaves the output rows unscaled.
    // Where MKL's kernel gives those bits with beta = 1 from a known C0, the rows start at that
    // value and the first block runs as the others do: one copy of the block's code, not two (a
    // cold compile grows with the code). The first rescale multiplies ±0 by exp(-inf - m') = 0,
    // or by 1 where every key is masked, which keeps it.
    const std::optional<float> start = gemm_nn_beta0_start(o.gemm, inputs(), qB, D, kS, gemm_call_threaded(threaded, outside_loop, qB, D));
    if (start && full_end > 0) {
      b.for_range("e", idx(0), idx(qB * D), 8, [&](ExprRef e) { b.store(rows, e, f32c(*start, 8)); });
      b.for_range("n", idx(0), binary(Op::Min, idx(full_end), num_keys), kS, [&](ExprRef n) { key_block(qB, n, kS, false, threaded); });
    } else {
      key_block(qB, idx(0), kS, true, threaded);
      if (full_end > kS)
        b.for_range("n", idx(kS), binary(Op::Min, idx(full_end), num_keys), kS, [&](ExprRef n) { key_block(qB, n, kS, false, threaded); });
    }
    if (Sk % kS) b.if_(binary(Op::Lt, idx(full_end), num_keys), [&] { key_block(qB, idx(full_end), Sk % kS, false, threaded); });
    finish(qB);
  }

  void key_block(int64_t qB, ExprRef n, int64_t kvB, bool first, bool threaded) {
    n = n->op == Op::Const ? n : b.let("n", n);
    // MKL sees q, k and v with the row strides of PyTorch's tensors (Request::q_row_stride).
    const Matrix q_rows = q_f32 >= 0 ? Matrix{q_f32, idx(0), D} : Matrix{q, b.let("q_at", add(q_base, mul(m0, idx(D)))), D, 0, 1, r.q_row_stride};
    const Matrix k_rows{k, b.let("k_at", add(kv_base, mul(n, idx(D)))), D, 0, 1, r.k_row_stride};
    const Matrix v_rows = v_f32 >= 0 ? Matrix{v_f32, idx(0), D} : Matrix{v, k_rows.base, D, 0, 1, r.v_row_stride};
    const Matrix s{scores, idx(0), kvB};
    const Matrix acc{rows, idx(0), D};
    b.region("q@k^T", fmt::format("scores of {} queries x {} keys, K = {}: {}", qB, kvB, D, describe(o.gemm)), [&] {
      // The full query blocks make the same calls. The first to reach a key block copies its
      // keys: query block 0, or under causal masking the first whose last query reaches them.
      PackedKeys packed{keys_t, keys_t_stride, n, r.causal ? binary(Op::Le, m0, n) : binary(Op::Eq, m0, idx(0))};
      emit_gemm_nt(b, o.gemm, inputs(), qB, kvB, D, q_rows, k_rows, s, gemm_call_threaded(threaded, outside_loop, qB, kvB), 0, 1.0f,
                   share_keys ? &packed : nullptr);
    });
    b.region("softmax", describe(o.softmax), [&] {
      b.for_range("r", idx(0), idx(qB), 1, [&](ExprRef j) { row_softmax(j, n, kvB, first); });
    });
    b.region("p@v", fmt::format("{} rows x {} keys, D = {}{}", qB, kvB, D, first ? "" : ", beta = 1"), [&] {
      // 16-bit v: the key block's rows widened to f32 once (exact), where each block of output
      // rows would widen them again.
      if (v_f32 >= 0) widen(v_f32, v, k_rows.base, kvB * D);
      const bool nn_threaded = gemm_call_threaded(threaded, outside_loop, qB, D);
      const Matrix p = p_words >= 0 ? Matrix{p_words, idx(0), kvB} : s;
      emit_gemm_nn(b, o.gemm, inputs(), qB, D, kvB, p, v_rows, acc, !first, nn_threaded, rows_align(nn_threaded));
    });
  }

  // P's element(s) at `at` as P @ v reads them: exp(s - m) `p` rounded by p_stored, or +0 where
  // `masked`. In bf16 words (p_words) that is one rounding at the store: rounding p_stored's
  // value again would change no bit, but the JIT would spend a dozen instructions per vector on it.
  void store_p(ExprRef at, const ExprRef& masked, ExprRef p) {
    const int lanes = p->type.lanes;
    const ExprRef zero = f32c(0.0f, lanes);
    const ExprRef when = lanes > 1 ? broadcast(masked, lanes) : masked;
    if (p_words >= 0) b.store(p_words, std::move(at), cast(select(when, zero, std::move(p)), ScalarType::bf16));
    else b.store(scores, std::move(at), select(when, zero, p_stored(std::move(p))));
  }

  void row_softmax(ExprRef j, const ExprRef& n, int64_t kvB, bool first) {
    const ExprRef at = b.let("row_at", mul(j, idx(kvB)));
    const float scale = static_cast<float>(r.scale.value_or(1.0 / std::sqrt(static_cast<double>(D))));
    // Scaled scores (masked keys -inf), stored back, and their max: IEEE maximum is exact and
    // order-free (NaN aside, which stays NaN), so it runs on vectors of the softmax's lanes.
    const int V = o.softmax.lanes;
    const int64_t vec_end = kvB / V * V;
    const ExprRef query = r.causal ? b.let("query", add(m0, j)) : nullptr;
    const ExprRef mask_row = mask ? mask->row_base(b, mask_head, add(m0, j)) : nullptr;
    auto scaled_scores = [&](ExprRef i, int lanes) {
      const ExprRef score = load(b.kernel(), scores, add(at, i), lanes);
      ExprRef sc = mask ? fma(score, f32c(scale, lanes), mask->at_keys(b, mask_row, add(n, i), lanes)) : mul(score, f32c(scale, lanes));
      if (r.causal) {
        ExprRef key = add(n, i);
        if (lanes > 1) key = add(broadcast(key, lanes), iota(lanes));
        sc = select(binary(Op::Lt, lanes > 1 ? broadcast(query, lanes) : query, key), f32c(-kInf, lanes), sc);
      }
      const ExprRef s = b.let("s", sc);
      b.store(scores, add(at, i), s);
      return s;
    };
    const int tmax = b.local("block_max", Type{ScalarType::f32, 1});
    if (vec_end > 0) {
      // Being order-free, the max runs in 4 independent accumulators (one would make a chain of
      // LLVM's 5-instruction maximum per vector: 11% of the kernel's time, single-threaded), and
      // its lanes fold as a tree.
      constexpr int kChains = 4;
      const int64_t chained_end = vec_end / (kChains * V) * (kChains * V);
      std::vector<int> vmax;
      for (int c = 0; c < kChains; ++c) {
        vmax.push_back(b.local("block_max.lanes", Type{ScalarType::f32, V}));
        b.assign(vmax.back(), f32c(-kInf, V));
      }
      auto take = [&](int c, ExprRef i) { b.assign(vmax[size_t(c)], binary(Op::Max, b.get(vmax[size_t(c)]), scaled_scores(std::move(i), V))); };
      if (chained_end > 0)
        b.for_range("i", idx(0), idx(chained_end), kChains * V, [&](ExprRef i) {
          for (int c = 0; c < kChains; ++c) take(c, c ? b.let("i", add(i, idx(int64_t(c) * V))) : i);
        });
      if (vec_end > chained_end) b.for_range("i", idx(chained_end), idx(vec_end), V, [&](ExprRef i) { take(0, i); });
      const ExprRef lanes_max = b.let("block_max.v", binary(Op::Max, binary(Op::Max, b.get(vmax[0]), b.get(vmax[1])),
                                                            binary(Op::Max, b.get(vmax[2]), b.get(vmax[3]))));
      std::vector<ExprRef> lanes;
      for (int l = 0; l < V; ++l) lanes.push_back(extract(lanes_max, l));
      b.assign(tmax, fold_lanes(b, std::move(lanes), LaneFold::Adjacent, [](ExprRef x, ExprRef y) { return binary(Op::Max, x, y); },
                                "block_max.fold"));
    } else {
      b.assign(tmax, f32c(-kInf));
    }
    if (kvB > vec_end)
      b.for_range("i", idx(vec_end), idx(kvB), 1, [&](ExprRef i) { b.assign(tmax, binary(Op::Max, b.get(tmax), scaled_scores(i, 1))); });
    // m' = -inf (every key so far masked): the row's probabilities are 0 and nothing else changes.
    // Control flow cannot depend on data, so that case is a select at each step.
    const ExprRef m = b.let("max", load(b.kernel(), row_max, j));
    const ExprRef m_new = b.let("max.new", select(binary(Op::Lt, b.get(tmax), m), m, b.get(tmax)));
    const ExprRef masked = b.let("all_masked", binary(Op::Eq, m_new, f32c(-kInf)));
    const int sum = b.local("block_sum", Type{ScalarType::f32, 1});
    if (vec_end > 0) {
      // Lanes of zero-started accumulators; paired: vectors 2t and 2t+1 into A and B, a last
      // single vector into C, then (A + C) + B.
      const Type vt{ScalarType::f32, V};
      const int a = b.local("sum.a", vt), bb = b.local("sum.b", vt), c = b.local("sum.c", vt);
      for (int acc : {a, bb, c}) b.assign(acc, f32c(0.0f, V));
      auto step = [&](ExprRef i, int acc) {
        const ExprRef p = b.let("p", exp_f32(b, o.softmax.exp, sub(load(b.kernel(), scores, add(at, i), V), broadcast(m_new, V))));
        store_p(add(at, i), masked, p);
        b.assign(acc, add(b.get(acc), p));
      };
      ExprRef lanes_sum;
      if (o.paired_exp_sum) {
        const int64_t pairs_end = kvB / (2 * V) * (2 * V);
        if (pairs_end > 0)
          b.for_range("i", idx(0), idx(pairs_end), 2 * V, [&](ExprRef i) {
            step(i, a);
            step(b.let("i2", add(i, idx(V))), bb);
          });
        if (vec_end > pairs_end) step(idx(pairs_end), c);
        lanes_sum = add(add(b.get(a), b.get(c)), b.get(bb));
      } else {
        b.for_range("i", idx(0), idx(vec_end), V, [&](ExprRef i) { step(i, a); });
        lanes_sum = b.get(a);
      }
      const ExprRef folded = b.let("sum.lanes", lanes_sum);
      std::vector<ExprRef> parts;
      for (int l = 0; l < V; ++l) parts.push_back(extract(folded, l));
      b.assign(sum, fold_lanes(parts, o.softmax.fold, Arith{}));
    } else {
      b.assign(sum, f32c(0.0f));
    }
    if (kvB > vec_end)
      b.for_range("i", idx(vec_end), idx(kvB), 1, [&](ExprRef i) {
        const ExprRef p = b.let("p", exp_f32(b, o.softmax.tail_exp, sub(load(b.kernel(), scores, add(at, i)), m_new)));
        store_p(add(at, i), masked, p);
        b.assign(sum, add(b.get(sum), p));
      });
    const ExprRef e = b.let("rescale", glibc_expf(b, sub(m, m_new)));
    const ExprRef l = load(b.kernel(), row_sum, j);
    b.store(row_sum, j, select(masked, l, o.rescale_fma ? fma(e, l, b.get(sum)) : add(mul(e, l), b.get(sum))));
    b.store(row_max, j, m_new);
    if (!first) {  // times 1 where masked: exact
      const ExprRef row = b.let("out_row", mul(j, idx(D)));
      const ExprRef factor = b.let("factor", broadcast(select(masked, f32c(1.0f), e), 8));
      b.for_range("d", idx(0), idx(D), 8, [&](ExprRef d) {
        b.store(rows, add(row, d), mul(load(b.kernel(), rows, add(row, d), 8), factor));
      });
    }
  }

  void finish(int64_t qB) {
    b.region("finish", "out = rows * (1/l); lse = m + logf(l)", [&] {
      b.for_range("r", idx(0), idx(qB), 1, [&](ExprRef j) {
        const ExprRef m = b.let("max", load(b.kernel(), row_max, j));
        const ExprRef l0 = b.let("sum", load(b.kernel(), row_sum, j));
        const ExprRef l = b.let("sum.safe", select(binary(Op::Eq, l0, f32c(0.0f)), f32c(1.0f), l0));
        const ExprRef inv = b.let("inv_sum", div(f32c(1.0f), l));
        const ExprRef from = b.let("out_row", mul(j, idx(D)));
        const ExprRef to = b.let("out_at", add(q_base, mul(add(m0, j), idx(D))));
        const ScalarType t = b.kernel().buffers[size_t(out)].elem;
        b.for_range("d", idx(0), idx(D), 8, [&](ExprRef d) {
          ExprRef y = mul(load(b.kernel(), rows, add(from, d), 8), broadcast(inv, 8));
          b.store(out, add(to, d), t == ScalarType::f32 ? y : cast(y, t));
        });
        if (lse >= 0) {
          const ExprRef mx = select(binary(Op::Eq, m, f32c(-kInf)), f32c(0.0f), m);
          b.store(lse, add(mul(program_id(0), idx(Sq)), add(m0, j)), add(mx, glibc_logf(b, l)));
        }
      });
    });
  }
};

}  // namespace

// PyTorch's query block for S_q query rows (flash_attention_kernel_impl).
int64_t cpu_flash_query_block(int64_t seq_q) { return std::min<int64_t>(seq_q >= 768 ? 256 : seq_q >= 192 ? 64 : 32, seq_q); }

std::vector<std::pair<int64_t, int64_t>> cpu_flash_block_shapes(int64_t seq_q, int64_t qS, int64_t seq_k, int64_t kS) {
  std::vector<int64_t> qBs = {qS}, kvBs = {kS};
  if (seq_q % qS) qBs.push_back(seq_q % qS);
  if (seq_k % kS) kvBs.push_back(seq_k % kS);
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t qB : qBs)
    for (int64_t kvB : kvBs) shapes.emplace_back(qB, kvB);
  return shapes;
}

Kernel build_cpu_flash_attention(const Request& r, const Order& order) {
  const AttentionOrder& o = order.attention;
  Kernel kernel;
  kernel.name = "attention";
  Builder b(kernel);
  CpuFlash f{r, o, b, r.cols, r.seq_q, r.seq_k, cpu_flash_query_block(r.seq_q), std::min<int64_t>(o.key_block, r.seq_k)};
  f.q = b.buffer("q", r.x_dtype, false, Extent::rows_by_fixed, r.seq_q * r.cols);
  f.k = b.buffer("k", r.x_dtype, false, Extent::rows_by_fixed, r.seq_k * r.cols);
  f.v = b.buffer("v", r.x_dtype, false, Extent::rows_by_fixed, r.seq_k * r.cols);
  if (r.mask) f.mask.emplace(b, r);
  f.out = b.buffer("out", r.x_dtype, true, Extent::rows_by_fixed, r.seq_q * r.cols);
  if (r.lse_output) f.lse = b.buffer("lse", ScalarType::f32, true, Extent::rows_by_fixed, r.seq_q);
  f.scores = b.buffer("scores", ScalarType::f32, true, Extent::scratch, f.qS * f.kS);
  f.rows = b.buffer("rows", ScalarType::f32, true, Extent::scratch, f.qS * f.D);
  f.row_max = b.buffer("row_max", ScalarType::f32, true, Extent::scratch, f.qS);
  f.row_sum = b.buffer("row_sum", ScalarType::f32, true, Extent::scratch, f.qS);
  // The widened copies live with the other scratch on the running thread's stack: only while
  // they stay within kWidenedScratchBytes (D up to 168 at S >= 768); past it each use widens.
  // Not where the products are vdpbf16ps pairs (bf16_pair_dot): their operands are bf16 already,
  // and two adjacent bf16 elements are one pair word, a single load.
  const bool pair_products = r.x_dtype == ScalarType::bf16 && o.gemm.kind == GemmOrder::Kind::MklIntelAvx512Bf16;
  if (pair_products) f.p_words = b.buffer("p_words", ScalarType::bf16, true, Extent::scratch, f.qS * f.kS);
  if (r.x_dtype != ScalarType::f32 && !pair_products && (f.qS + f.kS) * f.D * 4 <= kWidenedScratchBytes) {
    f.q_f32 = b.buffer("q_rows", ScalarType::f32, true, Extent::scratch, f.qS * f.D);
    f.v_f32 = b.buffer("v_rows", ScalarType::f32, true, Extent::scratch, f.kS * f.D);
  }
  // A program instance is one (batch, head), its query blocks in order: control flow must not
  // depend on program_id, and the last block, which may be shorter, takes other BLAS kernels.
  const int64_t full_blocks = r.seq_q / f.qS, last = r.seq_q % f.qS;
  // Several full query blocks: their q @ k^T share one copy of the transposed keys (the Intel
  // model's general kernel in its vector form only, which has each key group copied for every
  // query block; the AMD model's kernels keep their own copies). The rows
  // are 16 keys longer than S_k rounded up to 16, so that the D rows a group reads, 4 KiB apart
  // at S_k = 1024, do not fall into one set of the L1 cache.
  f.keys_t_stride = (f.Sk + 15) / 16 * 16 + 16;
  if (full_blocks >= 2 && o.gemm.kind != GemmOrder::Kind::MklAmd && o.gemm.vector_chains &&
      f.D * f.keys_t_stride * 4 <= kPackedKeysBytes)
    f.keys_t = b.buffer("keys_t_head", ScalarType::f32, true, Extent::scratch, f.D * f.keys_t_stride);
  b.region("attention", describe(o), [&] {
    f.q_base = b.let("q_base", mul(program_id(0), idx(f.Sq * f.D)));
    f.kv_base = b.let("kv_base", mul(program_id(0), idx(f.Sk * f.D)));
    if (f.mask) f.mask_head = f.mask->head_base(b, idx(0));
    auto body = [&](bool threaded, bool outside_loop) {
      f.outside_loop = outside_loop;
      if (full_blocks > 0)
        b.for_range("m0", idx(0), idx(full_blocks * f.qS), f.qS, [&](ExprRef m0) {
          f.m0 = m0;
          f.share_keys = f.keys_t >= 0;
          f.block(f.qS, threaded);
          f.share_keys = false;
        });
      if (last > 0) {
        f.m0 = idx(full_blocks * f.qS);
        f.block(last, threaded);
      }
    };
    // PyTorch calls MKL outside its parallel loop when the loop has one iteration (one (batch,
    // head) and one query block), else from the loop's threads (mkl_threading).
    const bool one_block = full_blocks + (last > 0) == 1;
    const MklThreading outside = mkl_threading(o.gemm, f.inputs(), true), inside = mkl_threading(o.gemm, f.inputs(), false);
    // Outside the loop on more than 2 threads, the products refuse the launch themselves.
    const bool outside_threaded = outside != MklThreading::one_thread, inside_threaded = inside == MklThreading::two_threads;
    if (inside == MklThreading::unmeasured && f.threads_matter())
      b.refuse_launches(Kernel::RefusedLaunch::When::rows_at_least, one_block ? 2 : 1, unmeasured_loop_threads(o.gemm));
    // One body serves both where they agree: the same threading, and no gemv (one query row or
    // key), which runs threaded outside the loop only.
    const bool gemv = f.qS == 1 || r.seq_q % f.qS == 1 || f.kS == 1 || r.seq_k % f.kS == 1;
    if (one_block && (outside_threaded != inside_threaded || (outside_threaded && gemv)))
      b.if_else(binary(Op::Eq, grid_extent(0), idx(1)), [&] { body(outside_threaded, true); }, [&] { body(inside_threaded, false); });
    else
      body(one_block ? outside_threaded : inside_threaded, false);
  });
  return kernel;
}

}  // namespace ordo::gen
