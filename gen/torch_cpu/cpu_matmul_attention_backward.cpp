// Autograd through PyTorch's eager composite softmax(q @ k.transpose(-2, -1) * scale) @ v on the
// CPU (AttentionBackwardOrder::Kind::CpuMatmul): the gradients torch.autograd computes for the
// materialized reference that fused attention is compared with. The graph was read from the
// derivative formulas and checked bit for bit against torch 2.15.0, each product's MKL kernel
// measured through ordo (docs/research/torch2.15-attention-backward.md):
//   out = bmm(P, v)                 -> dV = bmm(P^T, dout),  GP = bmm(dout, v^T)
//   P   = softmax(S, -1)            -> G  = _softmax_backward_data(GP, P) = (GP - sum(GP*P)) * P
//   S   = masked_fill(A, -inf)      -> G  = +0 where key > query (causal)
//   A   = bmm(q, k^T) * scale       -> G  = G * scale;  dQ = bmm(G, k),  dK = bmm(q^T, G)^T
// A program instance is one (batch, head): P and G are S_q x S_k floats of scratch and q^T G is
// D x S_k, transposed into dk at the end. bmm over a single (batch, head) calls MKL with all its
// threads; the instance then takes MKL's threaded kernels.
// bf16 and f16: P and G are 16-bit scratch (PyTorch's tensors), G rounded twice (by
// _softmax_backward_data's output, then by `* scale`), and every product ATen's own
// (gen/libraries/bf16_out_gemm.hpp): dv, dk sequential, grad_p by the vectorized dot, dq ilp4; dk is summed
// in its own layout. bf16 on AVX-512 without avx512_bf16, in a launch of B*H*S_q*S_k*D > 4096:
// every product oneDNN's emulated kernel, dk^T by rows of D in scratch, then transposed; with
// avx512_bf16 oneDNN's brgemm and gemv kernels, dk^T's elements stored transposed; f16 on a CPU
// with avx512_fp16 the same kernels over the halves converted to f32
// (docs/research/torch2.15-attention-16bit-composite.md, and -f16-avx512fp16.md there).
#include <fmt/format.h>

#include "gen/blocks/constants.hpp"
#include "gen/libraries/bf16_out_gemm.hpp"
#include "gen/torch_cpu/composite_attention.hpp"
#include "gen/gen.hpp"
#include "gen/blocks/norm_backward.hpp"
#include "gen/blocks/row.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {
}  // namespace

Kernel build_cpu_matmul_attention_backward(const Request& r, const Order& order) {
  const AttentionBackwardOrder& o = order.attention_backward;
  const int64_t D = r.cols, Sq = r.seq_q, Sk = r.seq_k;
  const ScalarType t = r.x_dtype;
  Kernel kernel;
  kernel.name = "attention_backward";
  Builder b(kernel);
  // The arguments of every attention_backward order; out and lse are not read.
  const int q = b.buffer("q", t, false, Extent::rows_by_fixed, Sq * D);
  const int k = b.buffer("k", t, false, Extent::rows_by_fixed, Sk * D);
  const int v = b.buffer("v", t, false, Extent::rows_by_fixed, Sk * D);
  b.buffer("out", t, false, Extent::rows_by_fixed, Sq * D);
  const int dout = b.buffer("dout", t, false, Extent::rows_by_fixed, Sq * D);
  if (r.saved_stats) b.buffer("lse", ScalarType::f32, false, Extent::rows_by_fixed, Sq);
  const int dq = b.buffer("dq", t, true, Extent::rows_by_fixed, Sq * D);
  const int dk = b.buffer("dk", t, true, Extent::rows_by_fixed, Sk * D);
  const int dv = b.buffer("dv", t, true, Extent::rows_by_fixed, Sk * D);
  // P and its gradient in the inputs' type (PyTorch's intermediate tensors); f32's q^T @ grad
  // goes through scratch to be transposed, 16-bit dk is summed in place.
  const bool f32_inputs = t == ScalarType::f32;
  const int probs = b.buffer("probs", t, true, Extent::scratch, Sq * Sk);
  const int grad = b.buffer("grad", t, true, Extent::scratch, Sq * Sk);
  // oneDNN computes dk^T's rows (d) by kernels of their own: bf16 dk^T goes through scratch too.
  const bool onednn_possible = t == ScalarType::bf16 && o.onednn_16bit == AttentionBackwardOrder::OneDnn::Emulated;
  const int dkt = f32_inputs || onednn_possible ? b.buffer("dk_t", f32_inputs ? ScalarType::f32 : t, true, Extent::scratch, D * Sk) : -1;
  const bool naive = composite_is_naive(r);
  const float scale = composite_scale(r);
  const ExprRef c = constant(Type{ScalarType::f32, 1}, static_cast<double>(scale));
  const GemmOrder& mkl = o.gemm;
  const ExprRef aligned = idx(0);  // PyTorch's gradients start at 16-byte boundaries (D and S_k multiples of 4)

  b.region("attention_backward", describe(o), [&] {
    const ExprRef q_base = b.let("q_base", mul(program_id(0), idx(Sq * D)));
    const ExprRef kv_base = b.let("kv_base", mul(program_id(0), idx(Sk * D)));
    const Matrix q_t{q, q_base, 1, 0, D}, k_rows{k, kv_base, D}, v_rows{v, kv_base, D};
    const Matrix dout_rows{dout, q_base, D}, dq_rows{dq, q_base, D}, dv_rows{dv, kv_base, D};
    const Matrix p_t{probs, idx(0), 1, 0, Sk}, g_rows{grad, idx(0), Sk}, dkt_rows{dkt, idx(0), Sk};
    const std::string products = composite_products(r, mkl);
    // 16-bit: ATen's sums (gen/libraries/bf16_out_gemm.hpp): dv and dk sequential ('N','T', and the loop),
    // dq ilp4 ('N','N'; the loop: sequential), grad_p by the vectorized dot ('T','N').
    auto stub_product = [&](bool sequential, int64_t n, int64_t m, int64_t K, const Matrix& p, const Matrix& v, const Matrix& c) {
      // PyTorch's own loop (naive) never fuses; the stub's 'N','T' chain and ilp4's main loop do
      // where the order's build does.
      emit_bf16_out_gemm(b, sequential, order.attention.stub_fma && !naive, AttentionBackwardOrder::OneDnn::Off, n, m, K, p, v, c, 1.0f, true);
    };
    const CompositeOneDnn onednn = composite_onednn(r, order, mkl.threads);
    const std::string how = dispatch_label(onednn, products);
    // 16-bit with oneDNN: its batched matmul (gen/libraries/bf16_out_gemm.hpp), bf16's emulated kernel or, on
    // avx512_bf16 (bf16) or avx512_fp16 (f16), its brgemm and gemv kernels; k^T's and v^T's views
    // as it takes them (the weights transposed or row-major).
    const bool brgemm = onednn.brgemm();
    auto onednn_product = [&](int64_t M, int64_t N, int64_t K, bool src_transposed, bool wei_transposed, const Matrix& a,
                              const Matrix& bm, const Matrix& c) {
      if (brgemm) return emit_brgemm_bmm(b, BrgemmBmm{M, N, K, src_transposed, !wei_transposed, false, onednn.threads}, M, a, bm, c);
      const OneDnnBmm call{M, N, K, src_transposed, constant(Type{ScalarType::boolean, 1}, wei_transposed ? 1 : 0), onednn.threads};
      emit_onednn_bf16_bmm(b, call, idx(0), M, a, bm, c);
    };
    auto transpose_dk = [&] {
      b.for_range("key", idx(0), idx(Sk), 1, [&](ExprRef key) {
        const ExprRef at = b.let("dk_at", add(kv_base, mul(key, idx(D))));
        b.for_range("d", idx(0), idx(D), 1, [&](ExprRef d) { b.store(dk, add(at, d), load(b.kernel(), dkt, add(mul(d, idx(Sk)), key))); });
      });
    };
    auto body = [&](bool threaded) {
      emit_composite_probs(b, r, order.attention, CompositeRows{q, k, probs, q_base, kv_base, idx(0), idx(0), Sq}, threaded, onednn);
      b.region("dv", fmt::format("dv = p^T @ dout, {} keys x {} x {} queries: {}", Sk, D, Sq, how), [&] {
        emit_by_dispatch(b, onednn, [&] { onednn_product(Sk, D, Sq, true, false, p_t, dout_rows, dv_rows); }, [&] {
          if (!f32_inputs) stub_product(true, Sk, D, Sq, p_t, dout_rows, dv_rows);
          else if (naive) emit_naive_nn(b, Sk, D, Sq, p_t, dout_rows, dv_rows);
          else emit_gemm_nn(b, mkl, GemmInputs::f32, Sk, D, Sq, p_t, dout_rows, dv_rows, false, threaded, aligned);
        });
      });
      b.region("grad_p", fmt::format("dout @ v^T, {} queries x {} keys x {}: {}", Sq, Sk, D, how), [&] {
        const Matrix v_t{v, kv_base, 1, 0, D};
        emit_by_dispatch(b, onednn, [&] { onednn_product(Sq, Sk, D, false, true, dout_rows, v_t, g_rows); }, [&] {
          if (!f32_inputs)
            emit_stub_dot_rows(b, naive ? StubSum::Sequential : StubSum::VectorDot, order.attention.dot_fold, order.attention.stub_fma, Sq, Sk,
                               D, dout_rows, v_rows, g_rows);
          else if (naive) emit_naive_nt(b, Sq, Sk, D, dout_rows, v_rows, g_rows);
          else emit_gemm_nt(b, mkl, GemmInputs::f32, Sq, Sk, D, dout_rows, v_rows, g_rows, threaded);
        });
      });
      // PyTorch's row loop over B*H*S_q rows has a single row only when S_q is 1 and the launch one (batch, head).
      const ExprRef one_row = Sq == 1 ? binary(Op::Eq, grid_extent(0), idx(1)) : nullptr;
      b.region("grad_s", fmt::format("(grad - sum(grad*p)) * p by {}{}, times scale", describe(order.softmax_backward),
                                     r.causal ? ", +0 where key > query" : ""),
               [&] {
                 b.for_range("r", idx(0), idx(Sq), 1, [&](ExprRef j) {
                   const Row row(b, Sk, b.let("grad_row", mul(j, idx(Sk))));
                   const TermFn term = [&](ExprRef col, int lanes) {
                     return Term{row.load_as(grad, col, lanes, ScalarType::f32), row.load_as(probs, col, lanes, ScalarType::f32)};
                   };
                   const ExprRef s = b.let("s", softmax_backward_sum(b, order.softmax_backward, order.threads, Sk, !f32_inputs, true, term, one_row));
                   b.for_range("i", idx(0), idx(Sk), 1, [&](ExprRef i) {
                     ExprRef g = mul(sub(row.load_as(grad, i, 1, ScalarType::f32), s), row.load_as(probs, i, 1, ScalarType::f32));
                     // 16-bit: _softmax_backward_data's output is a tensor of the inputs' type, and
                     // the scale multiplies it (two roundings).
                     if (!f32_inputs) g = cast(cast(g, t), ScalarType::f32);
                     if (r.causal) g = select(binary(Op::Lt, j, i), constant(Type{ScalarType::f32, 1}, 0.0), g);
                     row.store_as(grad, i, mul(g, c));
                   });
                 });
               });
      b.region("dq", fmt::format("dq = grad @ k, {} queries x {} x {} keys: {}", Sq, D, Sk, how), [&] {
        emit_by_dispatch(b, onednn, [&] { onednn_product(Sq, D, Sk, false, false, g_rows, k_rows, dq_rows); }, [&] {
          if (!f32_inputs) stub_product(naive, Sq, D, Sk, g_rows, k_rows, dq_rows);
          else if (naive) emit_naive_nn(b, Sq, D, Sk, g_rows, k_rows, dq_rows);
          else emit_gemm_nn(b, mkl, GemmInputs::f32, Sq, D, Sk, g_rows, k_rows, dq_rows, false, threaded, aligned);
        });
      });
      if (!f32_inputs) {
        // dk[key][d] = sum over queries of grad[query][key] * q[query][d]: ATen's sums dk^T's
        // elements stored transposed; oneDNN's sum dk^T's rows of D (kernels per row) into
        // scratch, transposed after.
        const Matrix g_t{grad, idx(0), 1, 0, Sk}, q_rows{q, q_base, D}, dk_rows{dk, kv_base, D};
        b.region("dk", fmt::format("dk^T = q^T @ grad, {} x {} keys x {} queries: {}", D, Sk, Sq, how), [&] {
          emit_by_dispatch(
              b, onednn,
              [&] {
                // brgemm: dk^T's element (d, key) stored at dk's (key, d).
                if (brgemm) return onednn_product(D, Sk, Sq, true, false, q_t, g_rows, Matrix{dk, kv_base, 1, 0, D});
                onednn_product(D, Sk, Sq, true, false, q_t, g_rows, dkt_rows);
                transpose_dk();
              },
              [&] { stub_product(true, Sk, D, Sq, g_t, q_rows, dk_rows); });
        });
        return;
      }
      b.region("dk", fmt::format("dk^T = q^T @ grad, {} x {} keys x {} queries: {}; then transposed", D, Sk, Sq, how), [&] {
        if (naive) emit_naive_nn(b, D, Sk, Sq, q_t, g_rows, dkt_rows);
        else emit_gemm_nn(b, mkl, GemmInputs::f32, D, Sk, Sq, q_t, g_rows, dkt_rows, false, threaded, aligned);
        transpose_dk();
      });
    };
    if (mkl.threads > 1 && f32_inputs) b.if_else(binary(Op::Eq, grid_extent(0), idx(1)), [&] { body(true); }, [&] { body(false); });
    else body(false);
  });
  return kernel;
}

}  // namespace ordo::gen
