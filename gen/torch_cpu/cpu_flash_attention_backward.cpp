// PyTorch 2.x's CPU flash attention backward (AttentionBackwardOrder::Kind::CpuFlash): what
// scaled_dot_product_attention's autograd runs on the CPU (cpu_flash_attention_backward in
// FlashAttentionKernel.cpp), from the forward's saved out and lse. Its order was read there and
// measured against torch 2.15.0 on AMD hosts and on an Intel AVX-512 host, whose MKL kernels differ
// (docs/research/torch2.15-attention-backward.md).
//
// A program instance is one (batch, head), as PyTorch gives each to one thread. With grouped-query
// attention (Request::kv_group = G query heads per K/V head) it is one (batch, K/V head): its G
// query heads run one after another, each with its own query blocks, and dk and dv go on
// accumulating across them (measured: PyTorch's gradients equal this kernel's on the group's
// queries as one head wherever their query blocks fall alike, on 1 and 2 threads, and depend on
// the thread count only when batch * K/V heads is 1). dq, dk and dv
// start at +0; per query block of qB rows (cpu_flash_query_block), ascending:
//   dsum_r = dout_r . out_r (rounded products, the order's lanes and fold);
//   per key block of kvB keys (512, the last shorter; causal: those starting below min(m0 + qB, S_k)):
//     attn  = scale * q_rows @ k_rows^T               (MKL 'T','N', alpha = scale)
//     attn  = exp(attn - lse_r); causal: 0 where key > query; with a mask (Request::mask),
//             exp((attn + mask) - lse_r) (PyTorch's mask add, fma(attn, 1, mask))
//     dv_rows += attn^T @ dout_rows                   (MKL 'N','T', beta = 1)
//     grad  = dout_rows @ v_rows^T                    (MKL 'T','N')
//     grad  = attn * (grad - dsum_r)                  (sub, then mul)
//     dq_rows += scale * grad @ k_rows                (MKL 'N','N', alpha = scale, beta = 1)
//     dk_rows += scale * grad^T @ q_rows              (MKL 'N','T', alpha = scale, beta = 1)
// each product by the kernel MKL picks for its shape (gen/libraries/mkl_gemm.cpp). In bf16 q @ k^T and
// dout @ v^T are gemm_bf16bf16f32's (f32 results), p is rounded to bf16 for dv and grad for dq and
// dk, and dq, dk, dv are bf16 tensors, each product's sum C0 + alpha * dot rounded to bf16 by
// ATen's gemm_stub or oneDNN (gen/libraries/bf16_out_gemm.cpp; on an Intel AVX-512 host without
// avx512_bf16 its emulated kernel, threaded with MKL, §5.5 of the doc); dsum sums bf16 vectors as two halves of
// floats. f16 is the same with half roundings, gemm_f16f16f32 for the f32-result products.
// PyTorch's per-thread buffers attn and grad (qB x kvB floats each) and dsum become scratch. Control flow may not
// depend on program_id, so the instance runs its blocks in order. MKL runs on torch's threads when
// the launch is one (batch, head) (PyTorch's parallel loop then has a single iteration), and on an
// Intel host inside the loop as well (mkl_threading); oneDNN and ATen's own products run on one
// thread inside the loop. PyTorch keeps dq, dk, dv, and dout where it has more than one row and
// head, as (B, S, H, D): MKL sees their rows H*D apart (Request::heads), and its kernels choose
// by that.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "gen/blocks/constants.hpp"
#include "gen/libraries/bf16_out_gemm.hpp"
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


struct CpuFlashBackward {
  const Request& r;
  const AttentionBackwardOrder& o;
  Builder& b;
  int64_t D, Sq, Sk, qS, kS;
  float scale;
  int q = -1, k = -1, v = -1, out = -1, dout = -1, lse = -1, dq = -1, dk = -1, dv = -1;
  int attn = -1, grad = -1, dsum = -1;  // scratch
  int attn_b = -1;                      // scratch, 16-bit: p rounded to the storage type (dv's operand)
  ExprRef q_base{}, kv_base{}, lse_base{}, m0{};
  std::optional<MaskInput> mask{};  // Request::mask
  ExprRef mask_head{};            // the current query head's first mask element

  // bf16 or f16 data: the same kernel with the other 16-bit type's roundings (f16 measured on an
  // AMD host without avx512_fp16).
  bool reduced() const { return r.x_dtype != ScalarType::f32; }
  GemmInputs inputs() const {
    return r.x_dtype == ScalarType::f32 ? GemmInputs::f32 : r.x_dtype == ScalarType::f16 ? GemmInputs::f16 : GemmInputs::bf16;
  }
  ExprRef round_to_storage(ExprRef x) const { return cast(cast(std::move(x), r.x_dtype), ScalarType::f32); }
  ExprRef load_f32(int buffer, ExprRef at, int lanes = 1) const {
    ExprRef x = load(b.kernel(), buffer, std::move(at), lanes);
    return x->type.scalar == ScalarType::f32 ? x : cast(x, ScalarType::f32);
  }

  void zero(int buffer, const ExprRef& base, int64_t elements) {
    const ExprRef z = reduced() ? cast(f32c(0.0f, 8), r.x_dtype) : f32c(0.0f, 8);
    b.for_range("z", idx(0), idx(elements), 8, [&](ExprRef i) { b.store(buffer, add(base, i), z); });
  }

  // dsum_r = vec::map2_reduce_all(x*y, x+y)(dout_r, out_r): every product rounded, no fma.
  ExprRef row_dsum(const ExprRef& at) {
    const int V = o.dsum_lanes;
    auto product = [&](ExprRef i, int lanes) { return mul(load_f32(dout, add(at, i), lanes), load_f32(out, add(at, i), lanes)); };
    // 16-bit: map2_reduce_all<BFloat16 or Half>, a vector of 2V elements being two float vectors:
    // the softmax op's 16-bit reduce_all (gen/blocks/row.hpp) with the rounded product as its value.
    if (reduced()) {
      auto plus = [](ExprRef x, ExprRef y) { return add(std::move(x), std::move(y)); };
      return reduce_all_pairs(b, D, V, o.dsum_fold, product, plus, "dsum");
    }
    if (D < V) {
      ExprRef s = product(idx(0), 1);
      for (int64_t i = 1; i < D; ++i) s = add(s, product(idx(i), 1));
      return s;
    }
    const Type vt{ScalarType::f32, V};
    const int acc = b.local("dsum.lanes", vt);
    b.assign(acc, product(idx(0), V));
    const int64_t full_end = D / V * V;
    if (full_end > V) b.for_range("d", idx(V), idx(full_end), V, [&](ExprRef d) { b.assign(acc, add(b.get(acc), product(d, V))); });
    if (const int64_t tail = D - full_end; tail > 0) {  // lanes 0 .. tail-1 take the last elements
      const ExprRef lanes = binary(Op::Min, iota(V), broadcast(idx(tail - 1), V));
      const ExprRef where = add(broadcast(add(at, idx(full_end)), V), lanes);
      auto gathered = [&](int buffer) {
        ExprRef x = gather(b.kernel(), buffer, where);
        return x->type.scalar == ScalarType::f32 ? x : cast(x, ScalarType::f32);
      };
      b.assign(acc, select(binary(Op::Lt, iota(V), broadcast(idx(tail), V)), add(b.get(acc), mul(gathered(dout), gathered(out))), b.get(acc)));
    }
    const ExprRef bound = b.let("dsum.acc", b.get(acc));
    std::vector<ExprRef> parts;
    for (int l = 0; l < V; ++l) parts.push_back(extract(bound, l));
    return fold_lanes(parts, o.dsum_fold, Arith{});
  }

  // Whether MKL or oneDNN on several threads runs any of this launch's products otherwise than on one.
  bool threads_matter() const {
    for (auto [qB, kvB] : cpu_flash_block_shapes(Sq, qS, Sk, kS))
      if (gemm_threads_matter(o.gemm, inputs(), true, qB, kvB, D) || gemm_threads_matter(o.gemm, inputs(), false, kvB, D, qB) ||
          gemm_threads_matter(o.gemm, inputs(), false, qB, D, kvB) ||
          (reduced() && (bf16_out_gemm_threads_matter(o.onednn_16bit, kvB, D, qB, o.gemm.threads) ||
                         bf16_out_gemm_threads_matter(o.onednn_16bit, qB, D, kvB, o.gemm.threads))))
        return true;
    return false;
  }

  // threaded: MKL on 2 threads; outside_loop: PyTorch called it outside its parallel loop, on
  // torch's threads (oneDNN's products then run on them too).
  bool outside_loop = false;
  void query_block(int64_t qB, bool threaded) {
    b.region("dsum", fmt::format("dsum = rowsum(dout*out), {} lanes, no fma", o.dsum_lanes), [&] {
      b.for_range("r", idx(0), idx(qB), 1, [&](ExprRef j) {
        b.store(dsum, j, row_dsum(b.let("row_at", add(q_base, mul(add(m0, j), idx(D))))));
      });
    });
    const ExprRef num_keys = r.causal ? b.let("num_keys", binary(Op::Min, add(m0, idx(qB)), idx(Sk))) : idx(Sk);
    const int64_t full_end = Sk - Sk % kS;
    if (full_end > 0)
      b.for_range("n", idx(0), r.causal ? binary(Op::Min, idx(full_end), num_keys) : idx(full_end), kS,
                  [&](ExprRef n) { key_block(qB, n, kS, threaded); });
    if (Sk % kS) {
      if (r.causal) b.if_(binary(Op::Lt, idx(full_end), num_keys), [&] { key_block(qB, idx(full_end), Sk % kS, threaded); });
      else key_block(qB, idx(full_end), Sk % kS, threaded);
    }
  }

  void key_block(int64_t qB, ExprRef n, int64_t kvB, bool threaded) {
    n = n->op == Op::Const ? n : b.let("n", n);
    const ExprRef q_at = b.let("q_at", add(q_base, mul(m0, idx(D))));
    const ExprRef k_at = b.let("k_at", add(kv_base, mul(n, idx(D))));
    // The row strides MKL sees: ATen's gradients are (B, S, H, D) (dk and dv: H / kv_group K/V
    // heads), and its dout is copied so where it has more than one head and row
    // (grad_out.contiguous() of the (B, S, H, D) view).
    const int64_t grad_ld = r.heads * D, kv_grad_ld = r.heads / r.kv_group * D, dout_ld = r.heads > 1 && Sq > 1 ? r.heads * D : D;
    // q, k and v: the row strides of PyTorch's tensors (Request::q_row_stride).
    const Matrix q_rows{q, q_at, D, 0, 1, r.q_row_stride}, dout_rows{dout, q_at, D, 0, 1, dout_ld}, dq_rows{dq, q_at, D, 0, 1, grad_ld};
    const Matrix k_rows{k, k_at, D, 0, 1, r.k_row_stride}, v_rows{v, k_at, D, 0, 1, r.v_row_stride};
    const Matrix dk_rows{dk, k_at, D, 0, 1, kv_grad_ld}, dv_rows{dv, k_at, D, 0, 1, kv_grad_ld};
    const Matrix a{attn, idx(0), kvB}, a_t{attn, idx(0), 1, 0, kvB}, g{grad, idx(0), kvB}, g_t{grad, idx(0), 1, 0, kvB};
    const GemmOrder& mkl = o.gemm;
    const ExprRef aligned = idx(0);  // PyTorch's gradient rows and scratch start at 16-byte boundaries (D % 4 == 0)
    const std::string shape = fmt::format("{} queries x {} keys, D = {}: {}", qB, kvB, D, describe(mkl));
    // A product of C's rows n and columns m (gemm_call_threaded: gemv stays on one thread inside the loop).
    auto call_threaded = [&](int64_t n_rows, int64_t m_cols) { return gemm_call_threaded(threaded, outside_loop, n_rows, m_cols); };
    b.region("attn", "scale * q @ k^T, " + shape, [&] { emit_gemm_nt(b, mkl, inputs(), qB, kvB, D, q_rows, k_rows, a, call_threaded(qB, kvB), 0, scale); });
    b.region("p", fmt::format("exp(attn{} - lse){}", r.mask ? " + mask" : "", r.causal ? ", 0 where key > query" : ""),
             [&] { probabilities(qB, n, kvB); });
    const Matrix a_bt{attn_b, idx(0), 1, 0, kvB};
    using OneDnn = AttentionBackwardOrder::OneDnn;
    const std::string stub = fmt::format("16-bit out: gemm_stub ({}){}", o.bf16_stub_fma ? "fma" : "no fma",
                                         o.onednn_16bit == OneDnn::Off          ? ""
                                         : o.onednn_16bit == OneDnn::Emulated   ? " when m*n*k <= 4096, else oneDNN (emulated bf16)"
                                                                                : " when m*n*k <= 4096, else oneDNN");
    // oneDNN runs on PyTorch's threads outside its loop (one (batch, head)), on one inside it.
    const int onednn_threads = outside_loop ? o.gemm.threads : 1;
    if (reduced())
      b.region("dv", "dv += rounded(p)^T @ dout, " + stub, [&] {
        emit_bf16_out_gemm(b, true, o.bf16_stub_fma, o.onednn_16bit, kvB, D, qB, a_bt, dout_rows, dv_rows, 1.0f, false, onednn_threads);
      });
    else
      b.region("dv", "dv += p^T @ dout, " + shape,
               [&] { emit_gemm_nn(b, mkl, inputs(), kvB, D, qB, a_t, dout_rows, dv_rows, true, call_threaded(kvB, D), aligned); });
    b.region("grad", "dout @ v^T, " + shape, [&] { emit_gemm_nt(b, mkl, inputs(), qB, kvB, D, dout_rows, v_rows, g, call_threaded(qB, kvB)); });
    b.region("ds", "grad = p * (grad - dsum)", [&] {
      b.for_range("r", idx(0), idx(qB), 1, [&](ExprRef j) {
        const ExprRef row = b.let("row_at", mul(j, idx(kvB)));
        const ExprRef d_r = b.let("dsum_r", load(b.kernel(), dsum, j));
        b.for_range("i", idx(0), idx(kvB), 1, [&](ExprRef i) {
          const ExprRef at = b.let("at", add(row, i));
          const ExprRef value = mul(load(b.kernel(), attn, at), sub(load(b.kernel(), grad, at), d_r));
          b.store(grad, at, reduced() ? round_to_storage(value) : value);  // 16-bit: dq's and dk's operand is grad rounded
        });
      });
    });
    if (reduced()) {
      b.region("dq", "dq += scale * grad @ k, " + stub, [&] {
        emit_bf16_out_gemm(b, false, o.bf16_stub_fma, o.onednn_16bit, qB, D, kvB, g, k_rows, dq_rows, scale, false, onednn_threads);
      });
      b.region("dk", "dk += scale * grad^T @ q, " + stub, [&] {
        emit_bf16_out_gemm(b, true, o.bf16_stub_fma, o.onednn_16bit, kvB, D, qB, g_t, q_rows, dk_rows, scale, false, onednn_threads);
      });
      return;
    }
    b.region("dq", "dq += scale * grad @ k, " + shape,
             [&] { emit_gemm_nn(b, mkl, inputs(), qB, D, kvB, g, k_rows, dq_rows, true, call_threaded(qB, D), aligned, 0, scale); });
    b.region("dk", "dk += scale * grad^T @ q, " + shape,
             [&] { emit_gemm_nn(b, mkl, inputs(), kvB, D, qB, g_t, q_rows, dk_rows, true, call_threaded(kvB, D), aligned, 0, scale); });
  }

  // attn[r][i] = exp(attn[r][i] - lse_r), on vectors of 16 and the rest one by one (the same
  // per-element function either way); causal: 0 where key n + i > query m0 + r, after the exp.
  void probabilities(int64_t qB, const ExprRef& n, int64_t kvB) {
    constexpr int V = 16;
    b.for_range("r", idx(0), idx(qB), 1, [&](ExprRef j) {
      const ExprRef row = b.let("row_at", mul(j, idx(kvB)));
      const ExprRef lse_r = b.let("lse_r", load(b.kernel(), lse, add(lse_base, add(m0, j))));
      const ExprRef query = r.causal ? b.let("query", add(m0, j)) : nullptr;
      const ExprRef mask_row = mask ? mask->row_base(b, mask_head, add(m0, j)) : nullptr;
      auto step = [&](ExprRef i, int lanes) {
        const ExprRef at = b.let("at", add(row, i));
        ExprRef a = load(b.kernel(), attn, at, lanes);
        if (mask) a = add(a, mask->at_keys(b, mask_row, add(n, i), lanes));
        ExprRef p = exp_f32(b, o.exp, sub(a, lanes > 1 ? broadcast(lse_r, lanes) : lse_r));
        if (r.causal) {
          ExprRef key = add(n, i);
          if (lanes > 1) key = add(broadcast(key, lanes), iota(lanes));
          p = select(binary(Op::Lt, lanes > 1 ? broadcast(query, lanes) : query, key), f32c(0.0f, lanes), p);
        }
        // Stored twice in 16-bit: bound to one value, so the IR (and its fma count) holds one exp.
        if (reduced()) p = b.let("p", p);
        b.store(attn, at, p);
        if (reduced()) b.store(attn_b, at, round_to_storage(p));
      };
      const int64_t vec_end = kvB / V * V;
      if (vec_end > 0) b.for_range("i", idx(0), idx(vec_end), V, [&](ExprRef i) { step(i, V); });
      if (kvB > vec_end) b.for_range("i", idx(vec_end), idx(kvB), 1, [&](ExprRef i) { step(i, 1); });
    });
  }
};

}  // namespace

Kernel build_cpu_flash_attention_backward(const Request& r, const Order& order) {
  const AttentionBackwardOrder& o = order.attention_backward;
  if (!r.saved_stats) throw Error("internal: the CPU flash backward reads the forward's lse");

  Kernel kernel;
  kernel.name = "attention_backward";
  Builder b(kernel);
  const int64_t qS = cpu_flash_query_block(r.seq_q), kS = std::min<int64_t>(o.key_block, r.seq_k);
  const float scale = static_cast<float>(r.scale.value_or(1.0 / std::sqrt(static_cast<double>(r.cols))));
  CpuFlashBackward f{r, o, b, r.cols, r.seq_q, r.seq_k, qS, kS, scale};
  const ScalarType t = r.x_dtype;
  const int64_t D = r.cols, Sq = r.seq_q, Sk = r.seq_k, G = r.kv_group;
  // A row is one (batch, K/V head): G query heads' q, out, dout, lse and dq.
  f.q = b.buffer("q", t, false, Extent::rows_by_fixed, G * Sq * D);
  f.k = b.buffer("k", t, false, Extent::rows_by_fixed, Sk * D);
  f.v = b.buffer("v", t, false, Extent::rows_by_fixed, Sk * D);
  f.out = b.buffer("out", t, false, Extent::rows_by_fixed, G * Sq * D);
  f.dout = b.buffer("dout", t, false, Extent::rows_by_fixed, G * Sq * D);
  f.lse = b.buffer("lse", ScalarType::f32, false, Extent::rows_by_fixed, G * Sq);
  if (r.mask) f.mask.emplace(b, r);
  f.dq = b.buffer("dq", t, true, Extent::rows_by_fixed, G * Sq * D);
  f.dk = b.buffer("dk", t, true, Extent::rows_by_fixed, Sk * D);
  f.dv = b.buffer("dv", t, true, Extent::rows_by_fixed, Sk * D);
  f.attn = b.buffer("attn", ScalarType::f32, true, Extent::scratch, qS * kS);
  f.grad = b.buffer("grad_attn", ScalarType::f32, true, Extent::scratch, qS * kS);
  f.dsum = b.buffer("dsum", ScalarType::f32, true, Extent::scratch, qS);
  if (t != ScalarType::f32) f.attn_b = b.buffer("attn_bf16", ScalarType::f32, true, Extent::scratch, qS * kS);
  const int64_t full_blocks = Sq / qS, last = Sq % qS;
  b.region("attention_backward", describe(o), [&] {
    const ExprRef group_base = b.let("group_base", mul(program_id(0), idx(G * Sq * D)));
    f.kv_base = b.let("kv_base", mul(program_id(0), idx(Sk * D)));
    f.zero(f.dq, group_base, G * Sq * D);
    f.zero(f.dk, f.kv_base, Sk * D);
    f.zero(f.dv, f.kv_base, Sk * D);
    auto query_blocks = [&](bool threaded) {
      if (full_blocks > 0)
        b.for_range("m0", idx(0), idx(full_blocks * qS), qS, [&](ExprRef m0) {
          f.m0 = m0;
          f.query_block(qS, threaded);
        });
      if (last > 0) {
        f.m0 = idx(full_blocks * qS);
        f.query_block(last, threaded);
      }
    };
    auto body = [&](bool threaded, bool outside_loop) {
      f.outside_loop = outside_loop;
      if (G == 1) {
        f.q_base = group_base;
        f.lse_base = b.let("lse_base", mul(program_id(0), idx(Sq)));
        if (f.mask) f.mask_head = f.mask->head_base(b, idx(0));
        return query_blocks(threaded);
      }
      b.for_range("h", idx(0), idx(G), 1, [&](ExprRef h) {  // the group's query heads in order
        f.q_base = b.let("q_base", add(group_base, mul(h, idx(Sq * D))));
        f.lse_base = b.let("lse_base", mul(add(mul(program_id(0), idx(G)), h), idx(Sq)));
        if (f.mask) f.mask_head = f.mask->head_base(b, h);
        query_blocks(threaded);
      });
    };
    // PyTorch's loop runs one iteration per (batch, head): one row is called outside it.
    const MklThreading outside = mkl_threading(o.gemm, f.inputs(), true), inside = mkl_threading(o.gemm, f.inputs(), false);
    const bool outside_threaded = outside != MklThreading::one_thread, inside_threaded = inside == MklThreading::two_threads;
    const bool matter = f.threads_matter();
    if (inside == MklThreading::unmeasured && matter)
      b.refuse_launches(Kernel::RefusedLaunch::When::rows_at_least, 2, unmeasured_loop_threads(o.gemm));
    // A launch must be whole groups of heads: ATen's strides are those of its (B, S, H, D) tensors.
    if (const int64_t kv_heads = r.heads / G; kv_heads > 1)
      b.refuse_launches(Kernel::RefusedLaunch::When::rows_not_multiple, kv_heads,
                        G == 1 ? fmt::format("the kernel is generated for {} heads, and a launch is batch*heads rows", r.heads)
                               : fmt::format("the kernel is generated for {} K/V heads, and a launch is batch*K/V heads rows",
                                             kv_heads));
    // One body serves both where they agree: f32 has no oneDNN products, and without one query or
    // key row no gemv, which runs threaded outside the loop only.
    const bool gemv = qS == 1 || Sq % qS == 1 || kS == 1 || Sk % kS == 1;
    if (matter && (outside_threaded != inside_threaded || f.reduced() || gemv))
      b.if_else(binary(Op::Eq, grid_extent(0), idx(1)), [&] { body(outside_threaded, true); }, [&] { body(inside_threaded, false); });
    else
      body(matter && inside_threaded, false);
  });
  return kernel;
}

}  // namespace ordo::gen
