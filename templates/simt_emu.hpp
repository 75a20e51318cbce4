// simt_emu.hpp: enough of CUDA to run a kernel rendered by backends/cuda on the host CPU
// (target cuda-emu). The kernel's source is the exact text NVRTC compiles; this header supplies
// what the CUDA compiler would: the execution-space keywords, the thread coordinates, barriers,
// warp shuffles, shared memory, and the intrinsics ordo_rt.cuh uses, each with its exact IEEE
// meaning on the host.
//
// Exactness on the host needs (checked below): no excess precision (SSE arithmetic, never
// x87), and no contraction of a*b+c (the host compiler runs with -ffp-contract=off; every
// fused operation is an explicit __fmaf_rn/__fma_rn, i.e. the C library's fmaf/fma, which are
// correctly rounded).
//
// Threads of a block run either as a plain loop (a kernel without barriers or shuffles: the
// renderer says so with ORDO_EMU_BARRIERS 0) or as fibers (ucontext), one per CUDA thread,
// switched at every __syncthreads and warp shuffle. __shared__ is thread_local static storage:
// one copy per host thread, shared by the fibers of the block that host thread is running.
#pragma once

// C headers only, and <new> for placement new: each kernel is a separate compile, and C++
// library headers would cost more to parse than the kernel itself.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <new>

#include "ir/float_bits.hpp"  // C headers only, too

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "simt_emu.hpp: only x86-64 (SSE) and AArch64 hosts are supported"
#endif
#if defined(__x86_64__) && !defined(__SSE2_MATH__)
#error "simt_emu.hpp: float arithmetic must use SSE, not x87 (build with -mfpmath=sse)"
#endif
static_assert(__FLT_EVAL_METHOD__ == 0, "simt_emu.hpp: float expressions must be evaluated in their own type");
#if defined(__FAST_MATH__)
#error "simt_emu.hpp: -ffast-math changes IEEE semantics; the emulation must be built without it"
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __constant__

struct uint4 {
  unsigned x, y, z, w;
};
struct uint2 {
  unsigned x, y;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;

// ---- intrinsics: one IEEE operation each, round to nearest even --------------------------------
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return __builtin_sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return __builtin_sqrt(a); }
inline double __fma_rn(double a, double b, double c) { return __builtin_fma(a, b, c); }
// CUDA's floorf and floor (exact, as on the host).
inline float floorf(float a) { return __builtin_floorf(a); }
inline double floor(double a) { return __builtin_floor(a); }

inline int __float_as_int(float a) { return (int)ordo::f32_bits(a); }
inline float __int_as_float(int a) { return ordo::f32_from_bits((uint32_t)a); }
inline long long __double_as_longlong(double a) {
  long long r;
  memcpy(&r, &a, 8);
  return r;
}
inline double __longlong_as_double(long long a) {
  double r;
  memcpy(&r, &a, 8);
  return r;
}
// Conversions. The host's default rounding mode is to nearest even, which these rely on.
inline int __float2int_rn(float a) { return (int)__builtin_nearbyintf(a); }  // callers keep a in range
inline float __int2float_rn(int a) { return (float)a; }
inline float __ll2float_rn(long long a) { return (float)a; }
inline double __ll2double_rn(long long a) { return (double)a; }
inline float __double2float_rn(double a) { return (float)a; }

// The f32 <-> f16/bf16 conversion instructions that ordo_rt.cuh calls (PTX cvt on the GPU):
// ir/float_bits.hpp's round-to-nearest-even algorithms, the ones the interpreter runs (cuda-emu
// writes that file next to this one). A NaN keeps its payload here (quieted) and becomes the
// canonical NaN on the GPU; the IR does not specify which.
namespace ordo_rt {
inline unsigned short cvt_rn_bf16_f32(float f) { return ordo::f32_to_bf16_bits(f); }
inline unsigned short cvt_rn_f16_f32(float f) { return ordo::f32_to_f16_bits(f); }
inline float cvt_f32_f16(unsigned short h) { return ordo::f16_bits_to_f32(h); }
}  // namespace ordo_rt

namespace ordo_emu {

// A block's threads as fibers. Each runs until it finishes or waits at a barrier; a barrier
// opens when every live thread of its scope (the block, or the warp) waits at it.
struct Fiber {
  ucontext_t ctx;
  unsigned tid = 0;
  enum State { runnable, block_barrier, warp_barrier, done } state = runnable;
};

struct Block {
  ucontext_t scheduler;
  Fiber* fibers = nullptr;  // `threads` of them
  unsigned threads = 0;
  char* stacks = nullptr;  // threads * kFiberStack bytes
  unsigned current = 0;
  void (*body)(void*) = nullptr;
  void* arg = nullptr;
  unsigned long long exchange[1024];  // warp shuffles: one slot per thread
};

inline thread_local Block* current_block = nullptr;
constexpr size_t kFiberStack = 256 * 1024;

// The memory a block of `threads` fibers runs in: the Block, its Fibers, then their stacks, each
// part at a 64-byte boundary. The launcher's caller provides it (ordo's runtime keeps one piece
// per host thread, shared by every kernel), so a loaded kernel owns no memory and unloading it
// leaves nothing behind. Only the part of a stack a fiber touches is ever paged in.
constexpr size_t round_up_64(size_t n) { return (n + 63) / 64 * 64; }
constexpr size_t block_memory_bytes(unsigned threads) {
  return round_up_64(sizeof(Block)) + round_up_64(threads * sizeof(Fiber)) + threads * kFiberStack;
}

inline void fiber_main() {
  Block* b = current_block;
  b->body(b->arg);
  b->fibers[b->current].state = Fiber::done;  // uc_link returns to the scheduler
}

inline void wait(Fiber::State why) {
  Block* b = current_block;
  if (!b) {
    fprintf(stderr, "simt_emu: a barrier or shuffle in a kernel rendered without fibers (ORDO_EMU_BARRIERS 0)\n");
    abort();
  }
  Fiber& f = b->fibers[b->current];
  f.state = why;
  swapcontext(&f.ctx, &b->scheduler);
}

// Opens the barriers that every live thread of their scope has reached. Returns false when no
// thread can run (a deadlock: some threads wait at a barrier others never reach).
inline bool release(Block& b) {
  const unsigned n = b.threads;
  bool any = false;
  for (unsigned w = 0; w < n; w += 32) {
    bool all = true, some = false;
    for (unsigned t = w; t < n && t < w + 32; ++t) {
      if (b.fibers[t].state == Fiber::done) continue;
      all &= b.fibers[t].state == Fiber::warp_barrier;
      some = true;
    }
    if (all && some) {
      for (unsigned t = w; t < n && t < w + 32; ++t)
        if (b.fibers[t].state == Fiber::warp_barrier) b.fibers[t].state = Fiber::runnable;
      any = true;
    }
  }
  if (any) return true;
  bool all = true, some = false;
  for (unsigned t = 0; t < n; ++t) {
    if (b.fibers[t].state == Fiber::done) continue;
    all &= b.fibers[t].state == Fiber::block_barrier;
    some = true;
  }
  if (!some) return true;
  if (!all) return false;
  for (unsigned t = 0; t < n; ++t)
    if (b.fibers[t].state == Fiber::block_barrier) b.fibers[t].state = Fiber::runnable;
  return true;
}

template <class F>
void fiber_trampoline(void* p) {
  (*static_cast<F*>(p))();
}

// Runs one block of `threads` threads: body() once per thread, with threadIdx set. With fibers,
// `memory` is block_memory_bytes(threads) bytes at a 64-byte boundary.
template <class F>
void run_block(unsigned threads, bool fibers, void* memory, F&& body) {
  if (!fibers) {
    for (unsigned t = 0; t < threads; ++t) {
      threadIdx.x = t;
      body();
    }
    return;
  }
  if (threads > 1024) {
    fprintf(stderr, "simt_emu: %u threads per block (CUDA allows 1024)\n", threads);
    abort();
  }
  char* bytes = static_cast<char*>(memory);
  Block& b = *new (bytes) Block;
  b.fibers = reinterpret_cast<Fiber*>(bytes + round_up_64(sizeof(Block)));
  b.stacks = bytes + round_up_64(sizeof(Block)) + round_up_64(threads * sizeof(Fiber));
  b.threads = threads;
  for (unsigned t = 0; t < threads; ++t) new (&b.fibers[t]) Fiber{};
  b.body = &fiber_trampoline<F>;
  b.arg = &body;
  Block* saved = current_block;
  current_block = &b;
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = b.fibers[t];
    f.tid = t;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = b.stacks + t * kFiberStack;
    f.ctx.uc_stack.ss_size = kFiberStack;
    f.ctx.uc_link = &b.scheduler;
    makecontext(&f.ctx, fiber_main, 0);
  }
  for (;;) {
    bool ran = false, left = false;
    for (unsigned t = 0; t < threads; ++t) {
      Fiber& f = b.fibers[t];
      if (f.state != Fiber::done) left = true;
      if (f.state != Fiber::runnable) continue;
      b.current = t;
      threadIdx.x = t;
      swapcontext(&b.scheduler, &f.ctx);
      ran = true;
    }
    if (!left) break;
    if (!ran && !release(b)) {
      fprintf(stderr, "simt_emu: deadlock in block %u: threads wait at a barrier others never reach\n", blockIdx.x);
      abort();
    }
  }
  current_block = saved;
}

// A warp shuffle: every live thread of the warp publishes its value, waits for the others,
// reads its source lane's, and waits again before the slots can be reused.
template <class T>
T shuffle(T v, int src_lane) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  Block* b = current_block;
  if (!b) wait(Fiber::warp_barrier);  // reports the missing fibers and aborts
  const unsigned tid = b->current, base = tid & ~31u;
  unsigned long long slot = 0;
  memcpy(&slot, &v, sizeof(T));
  b->exchange[tid] = slot;
  wait(Fiber::warp_barrier);
  T r;
  memcpy(&r, &b->exchange[base + static_cast<unsigned>(src_lane)], sizeof(T));
  wait(Fiber::warp_barrier);
  return r;
}

}  // namespace ordo_emu

inline void __syncthreads() { ordo_emu::wait(ordo_emu::Fiber::block_barrier); }
inline void __syncwarp(unsigned = 0xffffffffu) { ordo_emu::wait(ordo_emu::Fiber::warp_barrier); }

// The CUDA rules for the source lane: within segments of `width` lanes; a lane outside its
// segment (shfl_down past the end) reads its own value.
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = warpSize) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int src = lane + static_cast<int>(delta);
  return ordo_emu::shuffle(v, (src / width == lane / width) ? src : lane);
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask, int width = warpSize) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int src = lane ^ mask;
  return ordo_emu::shuffle(v, (src / width == lane / width) ? src : lane);
}
template <class T>
T __shfl_sync(unsigned, T v, int src_lane, int width = warpSize) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  return ordo_emu::shuffle(v, (lane / width) * width + (src_lane % width));
}
