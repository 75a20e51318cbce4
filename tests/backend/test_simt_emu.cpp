// templates/simt_emu.hpp on its own: a block's threads as fibers with __syncthreads, shared
// memory and warp shuffles, against results known in closed form; and the plain loop used for
// kernels without barriers.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "templates/simt_emu.hpp"

namespace {

// A block reduction in the style of CUDA library kernels: a shared-memory tree down to one warp,
// then a shuffle-down tree; and a butterfly (shuffle-xor) that leaves the sum in every lane.
__global__ void block_sum(const float* in, float* out, float* butterfly, int* order) {
  __shared__ float s[128];
  __shared__ int arrivals;
  const unsigned t = threadIdx.x;
  if (t == 0) arrivals = 0;
  __syncthreads();
  order[t] = arrivals++;  // every thread passes the barrier above before any arrives here
  s[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half >= 32; half /= 2) {
    if (t < half) s[t] = s[t] + s[t + half];
    __syncthreads();
  }
  if (t < 32) {
    float v = s[t];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (t == 0) out[blockIdx.x] = v;
    float b = s[t];
    for (int mask = 16; mask > 0; mask /= 2) b += __shfl_xor_sync(0xffffffffu, b, mask);
    butterfly[blockIdx.x * 32 + t] = b;
  }
}

// What ordo's runtime lends a launch: block_memory_bytes at a 64-byte boundary.
struct BlockMemory {
  explicit BlockMemory(unsigned threads) : bytes(ordo_emu::block_memory_bytes(threads) + 64) {}
  void* get() { return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(bytes.data()) + 63) / 64 * 64); }
  std::vector<char> bytes;
};

}  // namespace

TEST_CASE("simt_emu: fibers run __syncthreads, shared memory and warp shuffles as CUDA does") {
  const unsigned blocks = 3, threads = 128;
  std::vector<float> in(blocks * threads), out(blocks, -1), butterfly(blocks * 32, -1);
  std::vector<int> order(threads, -1);
  for (unsigned i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 1000);  // sums are exact in f32
  blockDim.x = threads;
  BlockMemory memory(threads);
  for (unsigned b = 0; b < blocks; ++b) {
    blockIdx.x = b;
    ordo_emu::run_block(threads, true, memory.get(), [&] { block_sum(in.data(), out.data(), butterfly.data(), order.data()); });
    float want = 0;
    for (unsigned t = 0; t < threads; ++t) want += in[b * threads + t];
    CHECK(out[b] == want);
    for (unsigned l = 0; l < 32; ++l) CHECK(butterfly[b * 32 + l] == want);
    std::vector<int> seen(threads, 0);
    for (int o : order) {
      REQUIRE(o >= 0);
      REQUIRE(o < static_cast<int>(threads));
      ++seen[static_cast<size_t>(o)];
    }
    for (int s : seen) CHECK(s == 1);
  }
}

TEST_CASE("simt_emu: shuffles follow CUDA's source-lane rules at the segment edges") {
  std::vector<int> down(32), xr(32), idx(32);
  blockDim.x = 32;
  BlockMemory memory(32);
  ordo_emu::run_block(32, true, memory.get(), [&] {
    const int lane = static_cast<int>(threadIdx.x);
    down[lane] = __shfl_down_sync(0xffffffffu, lane, 3, 8);  // within segments of 8 lanes
    xr[lane] = __shfl_xor_sync(0xffffffffu, lane, 5);
    idx[lane] = __shfl_sync(0xffffffffu, lane * 10, 7);
  });
  for (int l = 0; l < 32; ++l) {
    CHECK(down[l] == ((l % 8) + 3 < 8 ? l + 3 : l));
    CHECK(xr[l] == (l ^ 5));
    CHECK(idx[l] == 70);
  }
}

TEST_CASE("simt_emu: without barriers a block is a loop over threadIdx") {
  std::vector<unsigned> seen;
  ordo_emu::run_block(5, false, nullptr, [&] { seen.push_back(threadIdx.x); });
  CHECK(seen == std::vector<unsigned>{0, 1, 2, 3, 4});
}

TEST_CASE("simt_emu: the intrinsics round once, as IEEE says") {
  // 1 + 2^-24 is a tie that rounds to 1 (even). a = 1 + 2^-12: a*a = 1 + 2^-11 + 2^-24 exactly,
  // which one rounding to f32 (a tie) takes to 1 + 2^-11, so only the fused form keeps 2^-24.
  const float e = 1.1920928955078125e-07f;  // 2^-23
  CHECK(__fadd_rn(1.0f, e / 2) == 1.0f);
  const float a = 1.000244140625f;  // 1 + 2^-12
  CHECK(__fmaf_rn(a, a, -1.0f) == 0.00048828125f + 5.9604644775390625e-08f);  // 2^-11 + 2^-24
  CHECK(__fsub_rn(__fmul_rn(a, a), 1.0f) == 0.00048828125f);
  CHECK(__float2int_rn(2.5f) == 2);
  CHECK(__float2int_rn(-3.5f) == -4);
  CHECK(__ll2float_rn((1LL << 24) + 1) == 16777216.0f);  // ties to even
}
