// See gen/libraries/bf16_out_gemm.hpp for the orders. The shapes are fixed when the kernel is generated, so
// the choice between gemm_stub and oneDNN (by m*n*k, which PyTorch's mkldnn_bf16_gemm makes) is
// made here; the IR holds only the chosen order.
#include "gen/blocks/constants.hpp"
#include "gen/libraries/bf16_out_gemm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "gen/blocks/reductions.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

ExprRef as_f32(ExprRef x) { return x->type.scalar == ScalarType::f32 ? x : cast(std::move(x), ScalarType::f32); }
ExprRef ceil_div(const ExprRef& x, int64_t d) { return div(add(x, idx(d - 1)), idx(d)); }

// PyTorch's mkldnn_bf16_gemm leaves products of m*n*k <= 4096 to gemm_stub.
constexpr int64_t kStubWork = 4096;
// oneDNN's emulated gemm:jit:bf16 sums K up to this in one block (emulated_k_blocks).
constexpr int64_t kEmulatedKBlock = 384;

using OneDnn = AttentionBackwardOrder::OneDnn;

// oneDNN's emulated gemm:jit:bf16: the rows it computes as one-row calls (its 8-k-block gemv).
// On `threads` threads it cuts the row-major n x m output into `threads` ranges at
// floor(t*n*m/threads); the whole rows of a range form one call, and a row the range holds in
// part is a one-row call on those columns (per column the same sums as the whole row's). So a
// row is a one-row call when the product has one row, when a cut falls inside it, or when it is
// the only whole row of its range. Measured with direct calls on 2, 3 and 4 threads, and inside
// the backward on 2.
std::vector<bool> emulated_gemv_rows(int64_t n, int64_t m, int threads) {
  std::vector<bool> gemv(size_t(n), n == 1);
  if (n == 1) return gemv;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = t * n * m / threads, end = (t + 1) * n * m / threads;
    if (begin == end) continue;
    int64_t r0 = begin / m;
    const int64_t r1 = end / m;
    if (r0 == r1) {
      gemv[size_t(r0)] = true;
      continue;
    }
    if (begin % m) gemv[size_t(r0++)] = true;
    if (r1 - r0 == 1) gemv[size_t(r0)] = true;
    if (end % m) gemv[size_t(r1)] = true;
  }
  return gemv;
}

// oneDNN gemm:jit:bf16's K blocks for its gemm kernel: [begin, count) pairs.
std::vector<std::pair<int64_t, int64_t>> emulated_k_blocks(int64_t K) {
  if (K <= kEmulatedKBlock) return {{0, K}};
  if (K < 4 * kEmulatedKBlock) {
    const int64_t split = (K + 1) / 2;
    return {{0, split}, {split, K - split}};
  }
  std::vector<std::pair<int64_t, int64_t>> blocks;
  for (int64_t k = 0; k < K; k += 2 * kEmulatedKBlock) blocks.push_back({k, std::min(K - k, 2 * kEmulatedKBlock)});
  return blocks;
}

// Builds the three per-element sums of oneDNN's emulated kernels over products(k), each a vector
// of `lanes` exact f32 products (one output element per lane).
struct EmulatedSums {
  Builder& b;
  int lanes;
  std::function<ExprRef(ExprRef)> product;

  // One chain from +0 over [k0, k0 + count) in pairs, (acc + p[k+1]) + p[k], an odd count's last
  // product alone.
  ExprRef pair_chain(ExprRef k0, int64_t count) const {
    if (count <= 8) {
      ExprRef acc = f32c(0.0, lanes);
      auto at = [&](int64_t t) { return t ? add(k0, idx(t)) : k0; };
      for (int64_t t = 0; t + 1 < count; t += 2) acc = add(add(acc, product(at(t + 1))), product(at(t)));
      if (count % 2) acc = add(acc, product(at(count - 1)));
      return b.let("onednn.pairs", acc);
    }
    const int acc = b.local("onednn.acc", Type{ScalarType::f32, lanes});
    b.assign(acc, f32c(0.0, lanes));
    b.for_range("k", k0, add(k0, idx(count / 2 * 2)), 2,
                [&](ExprRef k) { b.assign(acc, add(add(b.get(acc), product(add(k, idx(1)))), product(k))); });
    if (count % 2) b.assign(acc, add(b.get(acc), product(add(k0, idx(count - 1)))));
    return b.get(acc);
  }
  ExprRef gemm(int64_t K) const {
    ExprRef sum;
    for (const auto& [k0, count] : emulated_k_blocks(K)) {
      ExprRef block = pair_chain(idx(k0), count);
      sum = sum ? b.let("onednn.blocks", add(sum, block)) : b.let("onednn.blocks", block);
    }
    return sum;
  }
  ExprRef gemv_n(int64_t K) const {
    const int y = b.local("onednn.gemv", Type{ScalarType::f32, lanes});
    b.assign(y, pair_chain(idx(0), std::min<int64_t>(K, 8)));
    const int64_t blocks_end = K / 8 * 8;
    if (blocks_end > 8) b.for_range("kb", idx(8), idx(blocks_end), 8, [&](ExprRef kb) { b.assign(y, add(b.get(y), pair_chain(kb, 8))); });
    if (K > 8 && K > blocks_end) b.assign(y, add(b.get(y), pair_chain(idx(blocks_end), K - blocks_end)));
    return b.get(y);
  }
  ExprRef gemv_t(int64_t K) const {
    constexpr int kLanes = 16, kChunk = 32;
    std::vector<int> lane;
    for (int l = 0; l < kLanes; ++l) {
      lane.push_back(b.local("onednn.lane", Type{ScalarType::f32, lanes}));
      b.assign(lane.back(), f32c(0.0, lanes));
    }
    auto chunk = [&](const ExprRef& c, int64_t left) {  // `left` products from c on (at most 32)
      for (int l = 0; l < kLanes; ++l) {
        const int64_t k0 = 2 * l;
        ExprRef acc = b.get(lane[size_t(l)]);
        if (k0 + 1 < left) acc = add(acc, product(add(c, idx(k0 + 1))));
        if (k0 < left) acc = add(acc, product(k0 ? add(c, idx(k0)) : c));
        if (k0 < left) b.assign(lane[size_t(l)], acc);
      }
    };
    const int64_t full = K / kChunk * kChunk;
    if (full > 0) b.for_range("kc", idx(0), idx(full), kChunk, [&](ExprRef c) { chunk(c, kChunk); });
    if (K > full) chunk(idx(full), K - full);
    std::vector<ExprRef> t;
    for (int l = 0; l < kLanes / 2; ++l) t.push_back(add(b.get(lane[size_t(l)]), b.get(lane[size_t(l + kLanes / 2)])));
    return b.let("onednn.gemv_t", add(add(add(t[0], t[1]), add(t[2], t[3])), add(add(t[4], t[5]), add(t[6], t[7]))));
  }
};

}  // namespace

bool bf16_out_gemm_threads_matter(OneDnn onednn, int64_t n, int64_t m, int64_t K, int threads) {
  if (onednn != OneDnn::Emulated || threads == 1 || n == 1 || n * m * K <= kStubWork) return false;
  const std::vector<bool> rows = emulated_gemv_rows(n, m, threads);
  return std::find(rows.begin(), rows.end(), true) != rows.end();
}

void emit_bf16_out_gemm(Builder& b, bool transb, bool stub_fma, OneDnn onednn, int64_t n, int64_t m, int64_t K, const Matrix& p,
                        const Matrix& v, const Matrix& c, float alpha, bool beta_zero, int threads) {
  if (v.step != 1 || c.step != 1) throw Error("internal: a bf16-output product reads V and C by rows");
  const int lanes = m % 16 == 0 ? 16 : m % 8 == 0 ? 8 : m % 4 == 0 ? 4 : 1;
  const ScalarType storage = b.kernel().buffers[size_t(c.buffer)].elem;  // bf16 or f16
  if ((storage == ScalarType::f16) != (onednn == OneDnn::Avx512Fp16) && onednn != OneDnn::Off)
    throw Error("internal: oneDNN's f16 brgemm takes f16 products, its bf16 kernels bf16 ones");
  const bool stub = onednn == OneDnn::Off || n * m * K <= kStubWork;
  // Rows the emulated oneDNN kernel computes as one-row calls; every other row is one pair chain,
  // or two over 384 terms.
  const std::vector<bool> gemv_rows =
      onednn == OneDnn::Emulated && !stub ? emulated_gemv_rows(n, m, threads) : std::vector<bool>(size_t(n), false);
  auto p_at = [&](const ExprRef& j, ExprRef k) {
    ExprRef col = p.step == 1 ? std::move(k) : mul(std::move(k), idx(p.step));
    return as_f32(load(b.kernel(), p.buffer, add(add(p.base, mul(j, idx(p.stride))), std::move(col))));
  };
  auto c_index = [&](const ExprRef& j, const ExprRef& e) { return add(add(c.base, mul(j, idx(c.stride))), e); };
  const ExprRef alpha_v = f32c(alpha, lanes);
  auto row = [&](ExprRef j, bool gemv) {
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
        // The K mod 4 tail adds rounded products, fused build or not (measured with products far
        // below 2^-126, docs/research/torch2.15-attention-16bit-composite.md).
        for (int64_t k = fours; k < K; ++k) b.assign(sums[0], add(b.get(sums[0]), mul(pk(idx(k)), v_at(idx(k)))));
        const ExprRef dot = add(add(add(b.get(sums[0]), b.get(sums[1])), b.get(sums[2])), b.get(sums[3]));
        // beta*c + alpha*dot with beta = 1: contracted or not, fl(alpha*dot) is added to C0 (an avx512
        // host's dq differs from fma(alpha, dot, C0): S_q = 100, S_k = 513, D = 32).
        result = beta_zero ? mul(alpha_v, dot) : add(c0, mul(alpha_v, dot));
      } else {
        auto product = [&](ExprRef k) { return mul(pk(k), v_at(k)); };
        const EmulatedSums sums{b, lanes, product};
        auto pair_chain = [&](ExprRef k0, int64_t count) { return sums.pair_chain(std::move(k0), count); };
        if (gemv) {  // emulated, a one-row call: 8-k blocks, each block's sum times alpha fused into y
          const int y = b.local("onednn.gemv", Type{ScalarType::f32, lanes});
          b.assign(y, mul(alpha_v, pair_chain(idx(0), std::min<int64_t>(K, 8))));
          const int64_t blocks_end = K / 8 * 8;
          if (blocks_end > 8)
            b.for_range("kb", idx(8), idx(blocks_end), 8, [&](ExprRef kb) { b.assign(y, fma(alpha_v, pair_chain(kb, 8), b.get(y))); });
          if (K > 8 && K > blocks_end) b.assign(y, fma(alpha_v, pair_chain(idx(blocks_end), K - blocks_end), b.get(y)));
          result = add(c0, b.get(y));
        } else if (onednn == OneDnn::Emulated && K > kEmulatedKBlock) {  // K blocks: alpha times the first, then fused
          ExprRef y;
          for (const auto& [k0, count] : emulated_k_blocks(K))
            y = y ? fma(alpha_v, pair_chain(idx(k0), count), y) : b.let("onednn.block0", mul(alpha_v, pair_chain(idx(k0), count)));
          result = add(c0, y);
        } else {
          const int acc = b.local("onednn.acc", Type{ScalarType::f32, lanes});
          b.assign(acc, f32c(0.0, lanes));
          // A plain chain in k order: every row in f16, and in bf16 a row alone whose weights (V,
          // oneDNN's "wei") are dense; with strided weights (the flash backward's dv of one key
          // when PyTorch's dout rows are H*D apart) oneDNN takes the pair kernel for it too
          // (measured on an Intel Xeon with avx512_bf16, docs/research/torch2.15-attention-
          // backward.md §5.6).
          if (onednn == OneDnn::Avx512Fp16 || (n == 1 && v.mkl_ld() == m)) {
            b.for_range("k", idx(0), idx(K), 1, [&](ExprRef k) { b.assign(acc, add(b.get(acc), product(k))); });
          } else {
            // vdpbf16ps (bf16_pair_dot): k + 1, then k; an odd K's last product follows its zero
            // partner (+0).
            const int64_t pairs = K / 2 * 2;
            if (pairs > 0)
              b.for_range("k", idx(0), idx(pairs), 2, [&](ExprRef k) {
                const ExprRef k_odd = b.let("k_odd", add(k, idx(1)));
                b.assign(acc, bf16_pair_dot(b.get(acc), pk(k_odd), v_at(k_odd), pk(k), v_at(k)));
              });
            if (K % 2) b.assign(acc, bf16_pair_dot(b.get(acc), f32c(0.0, lanes), f32c(0.0, lanes), pk(idx(K - 1)), v_at(idx(K - 1))));
          }
          result = add(c0, mul(alpha_v, b.get(acc)));
          // avx512_bf16's conversion to bf16 (vcvtneps2bf16) reads a subnormal f32 as a zero of
          // its sign (measured: with dout near 1e-38 torch's dq and dk are zeros carrying the
          // signs of these sums).
          if (onednn == OneDnn::Avx512Bf16) result = flush_subnormal(b, result);
        }
      }
      b.store(c.buffer, c_index(j, e), cast(result, storage));
    });
  };
  for (int64_t begin = 0; begin < n;) {  // runs of rows by one kernel
    int64_t end = begin + 1;
    while (end < n && gemv_rows[size_t(end)] == gemv_rows[size_t(begin)]) ++end;
    const bool gemv = gemv_rows[size_t(begin)];
    b.for_range("j", idx(begin), idx(end), 1, [&](ExprRef j) { row(j, gemv); });
    begin = end;
  }
}

void emit_stub_dot_rows(Builder& b, StubSum sum, LaneFold fold, bool fused, int64_t n, int64_t m, int64_t K, const Matrix& a,
                        const Matrix& bm, const Matrix& c) {
  if (sum == StubSum::Ilp4) throw Error("internal: the stub's ilp4 sum runs along V's rows (emit_bf16_out_gemm)");
  if (a.step != 1 || bm.step != 1 || c.step != 1) throw Error("internal: a stub dot product reads its operands along rows");
  const ScalarType storage = b.kernel().buffers[size_t(c.buffer)].elem;
  constexpr int kLanes = 8, kRegisters = 8;
  b.for_range("j", idx(0), idx(n), 1, [&](ExprRef j) {
    const ExprRef a_row = b.let("a_row", add(a.base, mul(j, idx(a.stride))));
    b.for_range("i", idx(0), idx(m), 1, [&](ExprRef i) {
      const ExprRef b_row = b.let("b_row", add(bm.base, mul(i, idx(bm.stride))));
      auto factors = [&](const ExprRef& k, int lanes) {
        return std::pair{as_f32(load(b.kernel(), a.buffer, add(a_row, k), lanes)), as_f32(load(b.kernel(), bm.buffer, add(b_row, k), lanes))};
      };
      auto product = [&](const ExprRef& k, int lanes) {
        auto [x, y] = factors(k, lanes);
        return mul(x, y);
      };
      // acc + a_k*b_k as the vector steps take it: one fma where `fused`.
      auto vector_step = [&](ExprRef acc, const ExprRef& k, int lanes) {
        auto [x, y] = factors(k, lanes);
        return fused ? fma(x, y, std::move(acc)) : add(std::move(acc), mul(x, y));
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
          for (int r = 0; r < kRegisters; ++r) b.assign(acc[size_t(r)], vector_step(b.get(acc[size_t(r)]), r ? add(k, idx(8 * r)) : k, kLanes));
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
            b.assign(tail, vector_step(b.get(tail), k, kLanes));
            b.assign(tail, vector_step(b.get(tail), add(k, idx(8)), kLanes));
          });
        b.assign(red, add(b.get(red), lane_fold(b.let("dot.blocks.v", b.get(tail)))));
      }
      if (K > block_end) b.for_range("k", idx(block_end), idx(K), 1, [&](ExprRef k) { b.assign(red, add(b.get(red), product(k, 1))); });
      b.store(c.buffer, add(add(c.base, mul(j, idx(c.stride))), i), cast(b.get(red), storage));
    });
  });
}

namespace {

// Whether some balance211 boundary between the `threads` ranges of `total` outputs lies in
// [lo, hi) (i64 expressions), as a bool expression.
ExprRef cut_in(const ExprRef& total, int threads, const ExprRef& lo, const ExprRef& hi) {
  ExprRef any = constant(Type{ScalarType::boolean, 1}, 0);
  const ExprRef n1 = ceil_div(total, threads);
  const ExprRef n2 = sub(n1, idx(1));
  const ExprRef t1 = sub(total, mul(n2, idx(threads)));  // threads taking n1
  for (int t = 1; t < threads; ++t) {
    const ExprRef start = select(binary(Op::Le, idx(t), t1), mul(n1, idx(t)), add(mul(t1, n1), mul(sub(idx(t), t1), n2)));
    any = binary(Op::Or, any, binary(Op::And, binary(Op::Le, lo, start), binary(Op::Lt, start, hi)));
  }
  return any;
}

}  // namespace

ExprRef onednn_bmm_taken(int64_t mkn) {
  if (mkn > kStubWork) return constant(Type{ScalarType::boolean, 1}, 1);
  return binary(Op::Lt, idx(kStubWork / mkn), grid_extent(0));
}

void emit_onednn_bf16_bmm(Builder& b, const OneDnnBmm& call, const ExprRef& first_row, int64_t rows, const Matrix& a, const Matrix& bm,
                          const Matrix& c) {
  const int64_t M = call.M, N = call.N, K = call.K;
  if (c.step != 1) throw Error("internal: oneDNN's bmm writes C by rows");
  const int lanes = bm.step != 1 ? 1 : N % 16 == 0 ? 16 : N % 8 == 0 ? 8 : N % 4 == 0 ? 4 : 1;
  const ScalarType storage = b.kernel().buffers[size_t(c.buffer)].elem;
  // The kernel of a one-row call, and of a call of several rows (gemm, or with one column the
  // gemv over the src, by the src's flag).
  enum class Kernel { Gemm, GemvN, GemvT };
  const Kernel several = N > 1 ? Kernel::Gemm : call.src_transposed ? Kernel::GemvN : Kernel::GemvT;
  const ExprRef wei_t = K == 1 ? constant(Type{ScalarType::boolean, 1}, 1) : call.wei_transposed;
  // Whether row j of the matrix is a one-row call: a boundary inside it, or the run of whole
  // rows it belongs to is itself alone (it begins at j: the matrix's first row, or a boundary in
  // the row before or at its start; and ends at j: the last row, or a boundary in the next row or
  // at its end).
  // (An expression of program_id and j, with no local in between: it bounds per-instance loops.)
  auto one_row = [&](const ExprRef& j) -> ExprRef {
    const ExprRef total = mul(grid_extent(0), idx(M * N));
    const ExprRef g = mul(add(mul(program_id(0), idx(M)), j), idx(N));
    auto cut = [&](int64_t lo, int64_t hi) { return cut_in(total, call.threads, add(g, idx(lo)), add(g, idx(hi))); };
    const ExprRef begins = binary(Op::Or, binary(Op::Eq, j, idx(0)), cut(1 - N, 1));
    const ExprRef ends = binary(Op::Or, binary(Op::Eq, j, idx(M - 1)), cut(N, 2 * N));
    return binary(Op::Or, cut(1, N), binary(Op::And, begins, ends));
  };
  // Row j's outputs, each summed by `kernel`.
  auto row = [&](const ExprRef& j, Kernel kernel) {
    b.for_range("e", idx(0), idx(N), lanes, [&](ExprRef e) {
      auto a_at = [&](ExprRef k) {
        return as_f32(load(b.kernel(), a.buffer, add(add(a.base, mul(j, idx(a.stride))), a.step == 1 ? k : mul(k, idx(a.step)))));
      };
      auto b_at = [&](ExprRef k) {
        ExprRef col = bm.step == 1 ? e : mul(e, idx(bm.step));
        return as_f32(load(b.kernel(), bm.buffer, add(add(bm.base, mul(std::move(k), idx(bm.stride))), col), lanes));
      };
      const EmulatedSums sums{b, lanes, [&](ExprRef k) {
                                ExprRef x = a_at(k);
                                return mul(lanes > 1 ? broadcast(x, lanes) : x, b_at(k));
                              }};
      const ExprRef sum = kernel == Kernel::Gemm ? sums.gemm(K) : kernel == Kernel::GemvN ? sums.gemv_n(K) : sums.gemv_t(K);
      b.store(c.buffer, add(add(c.base, mul(j, idx(c.stride))), e), cast(sum, storage));
    });
  };
  auto one_row_call = [&](const ExprRef& j) {
    if (wei_t->op == Op::Const) row(j, wei_t->imm_i ? Kernel::GemvT : Kernel::GemvN);
    else b.if_else(wei_t, [&] { row(j, Kernel::GemvT); }, [&] { row(j, Kernel::GemvN); });
  };
  b.for_range("j", idx(0), idx(rows), 1, [&](ExprRef j) {
    if (M == 1) one_row_call(j);
    else if (call.threads == 1) row(j, several);
    else {
      // Which rows are one-row calls depends on the instance's place in the launch: the branch is
      // two per-instance loops of at most one turn each (an If must be uniform).
      const ExprRef alone = one_row(add(first_row, j));
      b.for_per_instance("onednn.one_row", idx(0), select(alone, idx(1), idx(0)), 1, [&](ExprRef) { one_row_call(j); });
      b.for_per_instance("onednn.rows", idx(0), select(alone, idx(0), idx(1)), 1, [&](ExprRef) { row(j, several); });
    }
  });
}

namespace {

// oneDNN's brgemm kernel for one (batch, head) of a composite product: blocked chains (the
// general brgemm), the lane gemv (pairs16 in bf16, lanes16 in f16) or the gemv's fma chain.
enum class BrgemmKernel { Blocked, GemvLanes, GemvChain };
// gemv's K piece (compute_gemv_k_blocking) and the L2 size its K split compares with.
constexpr int64_t kGemvKBlock = 16384;
constexpr int64_t kL2Bytes = int64_t(2) << 20;

struct BrgemmPlan {
  BrgemmKernel kernel = BrgemmKernel::Blocked;
  int k_threads = 1;      // the K split's threads (1: none)
  bool may_split = false;  // a K split's conditions, but for the thread count's, hold
  // The same sums (may_split only decides a refusal).
  bool same_sums(const BrgemmPlan& o) const { return kernel == o.kernel && k_threads == o.k_threads; }
};

bool power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

// oneDNN's disbalance of w work items over b workers (get_imbalance).
float imbalance(int64_t w, int64_t b) {
  const int64_t r = w % b;
  return static_cast<float>(w < b ? b - r : std::min(b - r, r)) / static_cast<float>(b);
}

}  // namespace

int bwd_w_k_threads(int64_t M, int64_t N, int64_t K, int threads) {
  if (K < 2048 || threads < 2 || threads <= (N + 63) / 64) return 1;
  const int64_t n_blk = std::min<int64_t>(64, N), nnb = (N + n_blk - 1) / n_blk;  // PyTorch's B layout: n_blk not reduced
  float best = 0;
  int winner = 0;
  for (int nthr_k = std::min(threads, 4); nthr_k >= 1; --nthr_k) {
    const int64_t nthr_mn = threads / nthr_k;
    const float ta = static_cast<float>(threads - nthr_mn * nthr_k) / static_cast<float>(threads);
    const float kd = imbalance(K, nthr_k * 512);
    for (int64_t ncs = std::min<int64_t>(16, (N + 63) / 64); ncs >= 1; --ncs) {
      const float nc = static_cast<float>((nnb + ncs - 1) / ncs * ncs - nnb) / static_cast<float>(nnb);
      for (int64_t m_blk = std::min<int64_t>(M, 256); m_blk >= std::min<int64_t>(M, 16); --m_blk) {
        const int64_t m_blocks = (M + m_blk - 1) / m_blk;
        const float pw = imbalance(m_blocks * ((N + n_blk * ncs - 1) / (n_blk * ncs)), nthr_mn);
        const float mb = static_cast<float>(m_blk * m_blocks % M) / static_cast<float>(M);
        const float score = ((((pw + mb) + nc) + ta) + kd) / 5.0f;
        if (winner == 0 || score < best) {
          best = score;
          winner = nthr_k;
        }
      }
    }
  }
  return winner;
}

namespace {

BrgemmPlan brgemm_plan(const BrgemmBmm& call, bool f16, bool one_matrix) {
  const int64_t M = call.M, N = call.N, K = call.K;
  const bool b_row_major = call.b_row_major || (one_matrix && call.b_copied_alone);
  const int split = one_matrix && call.threads >= 2 ? std::min(call.threads, 4) : 1;
  BrgemmPlan plan;
  if (N == 1 || M == 1) {
    const bool chain = N == 1 ? K > 1 && M > 1 && call.a_k_major : K > 1 && b_row_major;
    plan.kernel = chain ? BrgemmKernel::GemvChain : BrgemmKernel::GemvLanes;
    const int64_t mv = N == 1 ? M : N;  // the gemv's rows
    plan.may_split = one_matrix && chain && power_of_two(2 * mv) && mv * K * 2 > kL2Bytes;
    if (plan.may_split && (mv + std::min<int64_t>(mv, 16) - 1) / std::min<int64_t>(mv, 16) <= 2 * int64_t(call.threads))
      plan.k_threads = split;
  } else {  // 'bwd_w' parallel K by oneDNN's imbalance score, in bf16 only at a power-of-two K
    plan.may_split = one_matrix && call.a_k_major && K >= 2048 && (f16 || power_of_two(K));
    if (plan.may_split) plan.k_threads = bwd_w_k_threads(M, N, K, call.threads);
  }
  return plan;
}

// The sums of one output element (or `lanes` adjacent ones) over products x(k) * y(k).
struct BrgemmSums {
  Builder& b;
  int lanes;
  bool pairs;  // bf16: vdpbf16ps pairs; f16: one k per fma
  std::function<ExprRef(int64_t)> x_at, y_at;  // constant k
  std::function<ExprRef(ExprRef)> x, y;        // k of a loop
  ExprRef zero() const { return f32c(0.0, lanes); }

  // One block's chain over [k0, k0 + count) onto local `acc`. bf16 (vdpbf16ps): (acc + p[k+1]) +
  // p[k], an odd count's last product after a zero pair; f16: fma(x_k, y_k, acc).
  void chain(int acc, int64_t k0, int64_t count) const {
    if (!pairs) {
      b.for_range("k", idx(k0), idx(k0 + count), 1, [&](ExprRef k) { b.assign(acc, fma(x(k), y(k), b.get(acc))); });
      return;
    }
    const int64_t even = count / 2 * 2;
    if (even > 0)
      b.for_range("k", idx(k0), idx(k0 + even), 2, [&](ExprRef k) {
        const ExprRef k_odd = b.let("k_odd", add(k, idx(1)));
        b.assign(acc, bf16_pair_dot(b.get(acc), x(k_odd), y(k_odd), x(k), y(k)));
      });
    if (count % 2) b.assign(acc, bf16_pair_dot(b.get(acc), zero(), zero(), x_at(k0 + count - 1), y_at(k0 + count - 1)));
  }
  ExprRef block(int64_t k0, int64_t count) const {
    const int acc = b.local("onednn.acc", Type{ScalarType::f32, lanes});
    b.assign(acc, zero());
    chain(acc, k0, count);
    return b.let("onednn.block", b.get(acc));
  }
  // The general kernel's K blocks, dealt to `k_threads` (balance211), each thread's in order.
  ExprRef blocked(int64_t K, bool a_k_major, int k_threads) const {
    std::vector<std::pair<int64_t, int64_t>> blocks;
    const int64_t first = K <= 512 ? K : !a_k_major && K <= 1024 ? 512 : 0;
    if (first) blocks.push_back({0, first});
    const int64_t size = a_k_major ? 512 : 1024;
    for (int64_t k = first; k < K; k += size) blocks.push_back({k, std::min(size, K - k)});
    auto sum_of = [&](size_t begin, size_t end) {
      ExprRef sum;
      for (size_t i = begin; i < end; ++i) {
        ExprRef one = block(blocks[i].first, blocks[i].second);
        sum = sum ? b.let("onednn.blocks", add(sum, one)) : one;
      }
      return sum;
    };
    if (k_threads == 1) return sum_of(0, blocks.size());
    ExprRef total = zero();  // the threads' sums, added in order into a zeroed buffer
    const size_t nb = blocks.size(), base = nb / size_t(k_threads), more = nb % size_t(k_threads);
    for (size_t t = 0, begin = 0; t < size_t(k_threads); ++t) {
      const size_t end = begin + base + (t < more ? 1 : 0);
      if (end > begin) total = b.let("onednn.k_threads", add(total, sum_of(begin, end)));
      begin = end;
    }
    return total;
  }
  // The lane gemv's 16 lanes over [k0, k0 + count): bf16 pairs16 (lane l: the pair 2l + 1, 2l of
  // each 32-k chunk), f16 lanes16 (lane l: k = l of each 16-k chunk, by fma).
  void lane_steps(const std::vector<int>& lane, int64_t k0, int64_t count) const {
    const int kLanes = int(lane.size()), chunk = pairs ? 2 * kLanes : kLanes;
    const int64_t full = count / chunk * chunk;
    auto step = [&](int l, ExprRef k_even, ExprRef k_odd) {
      const int acc = lane[size_t(l)];
      if (pairs) b.assign(acc, bf16_pair_dot(b.get(acc), x(k_odd), y(k_odd), x(k_even), y(k_even)));
      else b.assign(acc, fma(x(k_even), y(k_even), b.get(acc)));
    };
    if (full > 0)
      b.for_range("kc", idx(k0), idx(k0 + full), chunk, [&](ExprRef c) {
        for (int l = 0; l < kLanes; ++l) {
          const int64_t k_even = pairs ? 2 * l : l;
          step(l, k_even ? add(c, idx(k_even)) : c, pairs ? add(c, idx(k_even + 1)) : nullptr);
        }
      });
    if (count == full) return;
    // The masked chunk. bf16: every lane steps, missing k as zero products; f16: a lane past the
    // end adds fma(+0, +0, L) = L (no lane sum is -0), so it is left as it is.
    const int64_t c = k0 + full, left = count - full;
    for (int l = 0; l < kLanes; ++l) {
      const int acc = lane[size_t(l)];
      if (!pairs) {
        if (l < left) b.assign(acc, fma(x_at(c + l), y_at(c + l), b.get(acc)));
        continue;
      }
      auto at = [&](int64_t t, bool x_side) { return t < left ? (x_side ? x_at(c + t) : y_at(c + t)) : zero(); };
      b.assign(acc, bf16_pair_dot(b.get(acc), at(2 * l + 1, true), at(2 * l + 1, false), at(2 * l, true), at(2 * l, false)));
    }
  }
  // One gemv call over [k0, k0 + count).
  ExprRef gemv_call(BrgemmKernel kernel, int64_t k0, int64_t count) const {
    if (kernel == BrgemmKernel::GemvChain) {
      const int acc = b.local("onednn.chain", Type{ScalarType::f32, lanes});
      b.assign(acc, zero());
      b.for_range("k", idx(k0), idx(k0 + count), 1, [&](ExprRef k) { b.assign(acc, fma(x(k), y(k), b.get(acc))); });
      return b.let("onednn.chain_sum", b.get(acc));
    }
    std::vector<int> lane;
    for (int l = 0; l < 16; ++l) {
      lane.push_back(b.local("onednn.lane", Type{ScalarType::f32, lanes}));
      b.assign(lane.back(), zero());
    }
    lane_steps(lane, k0, count);
    auto get = [&](int l) { return b.get(lane[size_t(l)]); };
    std::vector<ExprRef> t, u;
    for (int l = 0; l < 8; ++l) t.push_back(b.let("onednn.t", add(get(l), get(l + 8))));
    for (int l = 0; l < 4; ++l) u.push_back(add(t[size_t(l)], t[size_t(l + 4)]));
    return b.let("onednn.gemv", add(add(u[0], u[1]), add(u[2], u[3])));
  }
  // Whole k_blk blocks as one call, the rest as another, added.
  ExprRef gemv_pieces(BrgemmKernel kernel, int64_t k0, int64_t count, int64_t k_blk) const {
    const int64_t whole = count / k_blk * k_blk;
    if (whole == count || whole == 0) return gemv_call(kernel, k0, count);
    return b.let("onednn.pieces", add(gemv_call(kernel, k0, whole), gemv_call(kernel, k0 + whole, count - whole)));
  }
  ExprRef gemv(BrgemmKernel kernel, int64_t K, int k_threads) const {
    if (k_threads == 1) return gemv_pieces(kernel, 0, K, std::min(K, kGemvKBlock));
    const int64_t kk = (K + k_threads - 1) / k_threads, k_blk = std::min(kk, kGemvKBlock), chunk = k_blk * ((kk + k_blk - 1) / k_blk);
    ExprRef total = zero();  // the chunks' sums, added in order into a zeroed buffer
    for (int64_t k = 0; k < K; k += chunk) total = b.let("onednn.k_threads", add(total, gemv_pieces(kernel, k, std::min(chunk, K - k), k_blk)));
    return total;
  }
};

void emit_brgemm_plan(Builder& b, const BrgemmBmm& call, const BrgemmPlan& plan, int64_t rows, const Matrix& a, const Matrix& bm,
                      const Matrix& c) {
  const int64_t N = call.N, K = call.K;
  const int lanes = bm.step != 1 || c.step != 1 ? 1 : N % 16 == 0 ? 16 : N % 8 == 0 ? 8 : N % 4 == 0 ? 4 : 1;
  const ScalarType storage = b.kernel().buffers[size_t(c.buffer)].elem;
  const bool bf16 = storage == ScalarType::bf16;
  b.for_range("j", idx(0), idx(rows), 1, [&](ExprRef j) {
    const ExprRef a_row = b.let("a_row", add(a.base, mul(j, idx(a.stride))));
    const ExprRef c_row = b.let("c_row", add(c.base, mul(j, idx(c.stride))));
    b.for_range("e", idx(0), idx(N), lanes, [&](ExprRef e) {
      const ExprRef b_col = b.let("b_col", add(bm.base, bm.step == 1 ? e : mul(e, idx(bm.step))));
      auto x = [&](ExprRef k) {
        ExprRef v = as_f32(load(b.kernel(), a.buffer, add(a_row, a.step == 1 ? k : mul(k, idx(a.step)))));
        return lanes > 1 ? broadcast(v, lanes) : v;
      };
      auto y = [&](ExprRef k) { return as_f32(load(b.kernel(), bm.buffer, add(b_col, mul(k, idx(bm.stride))), lanes)); };
      const BrgemmSums sums{b, lanes, bf16, [&](int64_t k) { return x(idx(k)); }, [&](int64_t k) { return y(idx(k)); }, x, y};
      const ExprRef sum = plan.kernel == BrgemmKernel::Blocked ? sums.blocked(K, call.a_k_major, plan.k_threads) : sums.gemv(plan.kernel, K, plan.k_threads);
      // bf16: vcvtneps2bf16 reads a subnormal as a zero; f16: vcvtps2ph keeps f16 subnormals.
      b.store(c.buffer, add(c_row, c.step == 1 ? e : mul(e, idx(c.step))), cast(bf16 ? flush_subnormal(b, sum) : sum, storage));
    });
  });
}

}  // namespace

void emit_brgemm_bmm(Builder& b, const BrgemmBmm& call, int64_t rows, const Matrix& a, const Matrix& bm, const Matrix& c) {
  const ScalarType storage = b.kernel().buffers[size_t(c.buffer)].elem;
  if (storage != ScalarType::bf16 && storage != ScalarType::f16) throw Error("internal: oneDNN's brgemm kernels write bf16 or f16");
  const bool f16 = storage == ScalarType::f16;
  const BrgemmPlan many = brgemm_plan(call, f16, false);
  // A launch of one (batch, head) reaches oneDNN only over 4096 multiply-adds.
  const BrgemmPlan alone = call.M * call.N * call.K > kStubWork ? brgemm_plan(call, f16, true) : many;
  // A product that may split at all, with torch on more than the 4 threads measured (oneDNN's
  // candidates and conditions for more threads are read, not measured).
  if (alone.may_split && call.threads > 4)
    b.refuse_launch(1, fmt::format("one (batch, head) with torch on {} threads: oneDNN may split the {} product of {} x {} x {} (M x K x N) "
                                   "over K on its threads, and its {} K splits are measured on 2 to 4 threads only ({}); give the "
                                   "order threads=1 to threads=4 if torch ran on that many",
                                   call.threads, f16 ? "f16" : "bf16", call.M, call.K, call.N, f16 ? "f16" : "bf16",
                                   f16 ? "docs/research/torch2.15-attention-16bit-composite-f16-avx512fp16.md"
                                       : "docs/research/torch2.15-attention-16bit-composite.md"));
  if (alone.same_sums(many)) return emit_brgemm_plan(b, call, many, rows, a, bm, c);
  b.if_else(binary(Op::Eq, grid_extent(0), idx(1)), [&] { emit_brgemm_plan(b, call, alone, rows, a, bm, c); },
            [&] { emit_brgemm_plan(b, call, many, rows, a, bm, c); });
}

}  // namespace ordo::gen
