// See gen/bf16_out_gemm.hpp for the orders. The shapes are fixed when the kernel is generated, so
// the choice between gemm_stub and oneDNN (by m*n*k, which PyTorch's mkldnn_bf16_gemm makes) is
// made here; the IR holds only the chosen order.
#include "gen/bf16_out_gemm.hpp"

#include <vector>

#include "gen/reductions.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

ExprRef idx(int64_t v) { return index_const(v); }
ExprRef f32c(double v, int lanes) {
  ExprRef c = constant(Type{ScalarType::f32, 1}, v);
  return lanes > 1 ? broadcast(c, lanes) : c;
}
ExprRef as_f32(ExprRef x) { return x->type.scalar == ScalarType::f32 ? x : cast(std::move(x), ScalarType::f32); }

// PyTorch's mkldnn_bf16_gemm leaves products of m*n*k <= 4096 to gemm_stub.
constexpr int64_t kStubWork = 4096;

}  // namespace

void emit_bf16_out_gemm(Builder& b, bool transb, bool stub_fma, bool onednn, int64_t n, int64_t m, int64_t K, const Matrix& p, const Matrix& v,
                        const Matrix& c, float alpha, bool beta_zero) {
  if (v.step != 1 || c.step != 1) throw Error("internal: a bf16-output product reads V and C by rows");
  const int lanes = m % 16 == 0 ? 16 : m % 8 == 0 ? 8 : m % 4 == 0 ? 4 : 1;
  const ScalarType storage = b.kernel().buffers[size_t(c.buffer)].elem;  // bf16 or f16
  if (storage == ScalarType::f16 && onednn) throw Error("internal: oneDNN's f16 gemm is not modelled");
  const bool stub = !onednn || n * m * K <= kStubWork;
  auto p_at = [&](const ExprRef& j, ExprRef k) {
    ExprRef col = p.step == 1 ? std::move(k) : mul(std::move(k), idx(p.step));
    return as_f32(load(b.kernel(), p.buffer, add(add(p.base, mul(j, idx(p.stride))), std::move(col))));
  };
  auto c_index = [&](const ExprRef& j, const ExprRef& e) { return add(add(c.base, mul(j, idx(c.stride))), e); };
  const ExprRef alpha_v = f32c(alpha, lanes);
  b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) {
    b.for_range("e", idx(0), idx(m), lanes, [&](ExprRef e) {
      auto v_at = [&](ExprRef k) { return as_f32(load(b.kernel(), v.buffer, add(add(v.base, mul(std::move(k), idx(v.stride))), e), lanes)); };
      auto pk = [&](ExprRef k) {
        ExprRef x = p_at(j, std::move(k));
        return lanes > 1 ? broadcast(x, lanes) : x;
      };
      auto step = [&](ExprRef acc, ExprRef x, ExprRef y) {
        return stub_fma ? fma(std::move(x), std::move(y), std::move(acc)) : add(std::move(acc), mul(std::move(x), std::move(y)));
      };
      const ExprRef c0 = beta_zero ? f32c(0.0, lanes) : as_f32(load(b.kernel(), c.buffer, c_index(j, e), lanes));
      ExprRef result;
      if (stub && transb) {
        const int acc = b.local("stub.acc", Type{ScalarType::f32, lanes});
        b.assign(acc, c0);
        b.for_range("k", idx(0), idx(K), 1, [&](ExprRef k) {
          const ExprRef val = alpha == 1.0f ? pk(k) : mul(alpha_v, pk(k));
          b.assign(acc, step(b.get(acc), v_at(k), val));
        });
        result = b.get(acc);
      } else if (stub) {
        std::vector<int> sums;
        for (int s = 0; s < 4; ++s) {
          sums.push_back(b.local("stub.sum", Type{ScalarType::f32, lanes}));
          b.assign(sums.back(), f32c(0.0, lanes));
        }
        const int64_t fours = K / 4 * 4;
        if (fours > 0)
          b.for_range("k", idx(0), idx(fours), 4, [&](ExprRef k) {
            for (int s = 0; s < 4; ++s) {
              const ExprRef ks = s ? add(k, idx(s)) : k;
              b.assign(sums[size_t(s)], step(b.get(sums[size_t(s)]), pk(ks), v_at(ks)));
            }
          });
        for (int64_t k = fours; k < K; ++k) b.assign(sums[0], step(b.get(sums[0]), pk(idx(k)), v_at(idx(k))));
        const ExprRef dot = add(add(add(b.get(sums[0]), b.get(sums[1])), b.get(sums[2])), b.get(sums[3]));
        // beta*c + alpha*dot with beta = 1: contracted or not, fl(alpha*dot) is added to C0 (an avx512
        // host's dq differs from fma(alpha, dot, C0): S_q = 100, S_k = 513, D = 32).
        result = beta_zero ? mul(alpha_v, dot) : add(c0, mul(alpha_v, dot));
      } else {
        const int acc = b.local("onednn.acc", Type{ScalarType::f32, lanes});
        b.assign(acc, f32c(0.0, lanes));
        auto product = [&](ExprRef k) { return mul(pk(k), v_at(k)); };
        if (n == 1) {
          b.for_range("k", idx(0), idx(K), 1, [&](ExprRef k) { b.assign(acc, add(b.get(acc), product(k))); });
        } else {
          const int64_t pairs = K / 2 * 2;
          if (pairs > 0)
            b.for_range("k", idx(0), idx(pairs), 2,
                        [&](ExprRef k) { b.assign(acc, add(add(b.get(acc), product(add(k, idx(1)))), product(k))); });
          if (K % 2) b.assign(acc, add(b.get(acc), product(idx(K - 1))));
        }
        result = add(c0, mul(alpha_v, b.get(acc)));
      }
      b.store(c.buffer, c_index(j, e), cast(result, storage));
    });
  });
}

void emit_stub_dot_rows(Builder& b, StubSum sum, LaneFold fold, int64_t n, int64_t m, int64_t K, const Matrix& a, const Matrix& bm,
                        const Matrix& c) {
  if (sum == StubSum::Ilp4) throw Error("internal: the stub's ilp4 sum runs along V's rows (emit_bf16_out_gemm)");
  if (a.step != 1 || bm.step != 1 || c.step != 1) throw Error("internal: a stub dot product reads its operands along rows");
  const ScalarType storage = b.kernel().buffers[size_t(c.buffer)].elem;
  constexpr int kLanes = 8, kRegisters = 8;
  b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) {
    const ExprRef a_row = b.let("a_row", add(a.base, mul(j, idx(a.stride))));
    b.for_range("i", idx(0), idx(m), 1, [&](ExprRef i) {
      const ExprRef b_row = b.let("b_row", add(bm.base, mul(i, idx(bm.stride))));
      auto product = [&](ExprRef k, int lanes) {
        return mul(as_f32(load(b.kernel(), a.buffer, add(a_row, k), lanes)), as_f32(load(b.kernel(), bm.buffer, add(b_row, k), lanes)));
      };
      const int red = b.local("dot", Type{ScalarType::f32, 1});
      b.assign(red, f32c(0.0, 1));
      const int64_t vector_end = sum == StubSum::VectorDot ? K / 64 * 64 : 0, block_end = sum == StubSum::VectorDot ? K / 16 * 16 : 0;
      auto lane_fold = [&](ExprRef v) {
        std::vector<ExprRef> parts;
        for (int l = 0; l < kLanes; ++l) parts.push_back(extract(v, l));
        return fold_lanes(parts, fold, Arith{});
      };
      if (vector_end > 0) {
        std::vector<int> acc;
        for (int r = 0; r < kRegisters; ++r) {
          acc.push_back(b.local("dot.acc", Type{ScalarType::f32, kLanes}));
          b.assign(acc.back(), f32c(0.0, kLanes));
        }
        b.for_range("k", idx(0), idx(vector_end), 64, [&](ExprRef k) {
          for (int r = 0; r < kRegisters; ++r) b.assign(acc[size_t(r)], add(b.get(acc[size_t(r)]), product(r ? add(k, idx(8 * r)) : k, kLanes)));
        });
        auto reg = [&](int r) { return b.get(acc[size_t(r)]); };
        const ExprRef x = b.let("dot.registers", add(add(add(reg(0), reg(4)), add(reg(2), reg(6))), add(add(reg(1), reg(5)), add(reg(3), reg(7)))));
        b.assign(red, lane_fold(x));
      }
      if (sum == StubSum::VectorDot) {
        const int tail = b.local("dot.blocks", Type{ScalarType::f32, kLanes});
        b.assign(tail, f32c(0.0, kLanes));
        if (block_end > vector_end)
          b.for_range("k", idx(vector_end), idx(block_end), 16, [&](ExprRef k) {
            b.assign(tail, add(b.get(tail), product(k, kLanes)));
            b.assign(tail, add(b.get(tail), product(add(k, idx(8)), kLanes)));
          });
        b.assign(red, add(b.get(red), lane_fold(b.let("dot.blocks.v", b.get(tail)))));
      }
      if (K > block_end) b.for_range("k", idx(block_end), idx(K), 1, [&](ExprRef k) { b.assign(red, add(b.get(red), product(k, 1))); });
      b.store(c.buffer, add(add(c.base, mul(j, idx(c.stride))), i), cast(b.get(red), storage));
    });
  });
}

}  // namespace ordo::gen
