// The throughput of vdpbf16ps against vfmadd231ps on this CPU, one thread: how fast MKL's and
// ordo's bf16 products (one vdpbf16ps per two products of 16 lanes) can run at all.
//
//   cc -O2 -mavx512f -mavx512bf16 bench/vdpbf16ps_rate.c -o /tmp/vdpbf16ps_rate && /tmp/vdpbf16ps_rate
//
// Each loop keeps 16 independent accumulators in registers, so latency does not bound it; the
// fastest of 5 rounds is printed as nanoseconds per instruction.
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

enum { kAccumulators = 16, kRounds = 5 };
static const long kSteps = 20000000;  // loop trips per round, kAccumulators instructions each

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
  if (!__builtin_cpu_supports("avx512bf16")) {
    fprintf(stderr, "vdpbf16ps_rate: this CPU has no avx512_bf16, so it has no vdpbf16ps to measure\n");
    return 1;
  }
  __m512 acc[kAccumulators];
  // Factors of 1 and 2^-7: the sums grow slowly and stay normal (no assists).
  __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x3c003c00);
  __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(0x1p-20f);
  double best_dp = 1e30, best_fma = 1e30;
  float sink = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_setzero_ps();
    double t0 = seconds();
    for (long s = 0; s < kSteps; ++s) {
#pragma GCC unroll 16
      for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
      __asm__ volatile("" : "+v"(a));  // one opaque operand per trip: the loop is not folded
    }
    double t1 = seconds();
    for (int i = 0; i < kAccumulators; ++i) sink += _mm512_reduce_add_ps(acc[i]), acc[i] = _mm512_setzero_ps();
    for (long s = 0; s < kSteps; ++s) {
#pragma GCC unroll 16
      for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_fmadd_ps(x, y, acc[i]);
      __asm__ volatile("" : "+v"(x));
    }
    double t2 = seconds();
    for (int i = 0; i < kAccumulators; ++i) sink += _mm512_reduce_add_ps(acc[i]);
    const double n = (double)kSteps * kAccumulators;
    if ((t1 - t0) / n < best_dp) best_dp = (t1 - t0) / n;
    if ((t2 - t1) / n < best_fma) best_fma = (t2 - t1) / n;
  }
  printf("vdpbf16ps zmm: %.3f ns per instruction (32 products)\n", best_dp * 1e9);
  printf("vfmadd231ps zmm: %.3f ns per instruction (16 products)\n", best_fma * 1e9);
  printf("(checksum %g)\n", sink);
  return 0;
}
