// PyTorch 2.x's cpublas::gemm with bf16 operands and a bf16 C (beta = 1), as its CPU attention
// backward calls it for dQ, dK and dV: on an x86-64 host with avx512_bf16, ATen's own gemm_stub
// (BlasKernel.cpp, compiled per CPU capability) when m*n*k <= 4096, else oneDNN's matmul with a
// sum post-op; on a host without AVX-512, gemm_stub at every size (PyTorch's oneDNN bf16 check
// fails there). Measured against torch 2.15.0 on AMD EPYCs, one with avx512_bf16 and one with
// AVX2 only (docs/research/torch2.15-attention-backward.md §5.2, §5.4). f16 operands and C take
// the same stub orders with half roundings (a host without avx512_fp16, where PyTorch's f16 gemm
// is always gemm_stub's: docs/research/torch2.15-attention-f16.md); C's buffer type decides.
#pragma once

#include <cstdint>

#include "gen/mkl_gemm.hpp"
#include "ir/ir.hpp"

namespace ordo::gen {

// C[j][e] = bf16(C[j][e] + alpha * sum_k P[j][k] V[k][e]) for j < n, e < m, k < K, C a bf16 matrix
// read as its f32 value. `transb`: PyTorch's 'N','T' call (dV, dK: P given transposed) rather
// than 'N','N' (dQ); the stub runs them differently. `stub_fma`: the stub's build fuses its
// multiply-adds (avx2, avx512; not the default build). `onednn`: products over 4096 multiply-adds
// go to oneDNN (else to the stub too). The orders, per element:
//   stub 'N','N':  dot = ilp4 (s[k mod 4] += P*V for k < 4*(K/4), the rest into s[0];
//                  ((s0+s1)+s2)+s3), then C0 + fl(alpha*dot) under every build;
//   stub 'N','T':  acc = C0; per k ascending acc += fl(alpha*P[j][k]) * V[k][e] (fused or not);
//   oneDNN:        acc = +0; per k ascending in pairs acc = (acc + P_{k+1}V) + P_kV (vdpbf16ps;
//                  an odd K's last product alone); n == 1: acc + P_kV in plain k order;
//                  then C0 + fl(alpha*acc).
// Every product of two bf16 values is exact in f32; only alpha's products round.
void emit_bf16_out_gemm(ir::Builder& b, bool transb, bool stub_fma, bool onednn, int64_t n, int64_t m, int64_t K, const Matrix& p, const Matrix& v,
                        const Matrix& c, float alpha);

}  // namespace ordo::gen
