// One-warp layouts of the one-thread reduction orders, for the CUDA targets.
//
// A lane-tree sum (SumOrder::Kind::LaneTree) keeps lanes * accumulators partial sums that never
// meet until its folds. Accumulator j's lane l sums the terms j*V + l, (j + A)*V + l, ... in
// that order. So 32 threads can each run one partial sum, thread t = j*V + l, and the folds can
// follow as warp shuffles and team statements that add the same operands in the same order. The
// bits are the one-thread kernel's; what changes is that a warp reads a row's consecutive
// elements together (coalesced) instead of one thread walking the whole row. On the CPU the
// one-thread kernel stays, because there the partial sums are the SIMD lanes of one core.
// gen/'s layout of the work depends on the target, never the bits (docs/design.md).
#pragma once

#include <functional>
#include <string>

#include "gen/blocks/reductions.hpp"
#include "ir/order.hpp"
#include "ordo/request.hpp"

namespace ordo::gen {

constexpr int kWarpThreads = 32;

// The CUDA targets: cuda, and cuda-emu, which runs the same source on the host.
bool cuda_target(const Request& r);

// How many machine registers an f32 vector of `lanes` lanes takes where the kernel runs: 1 on the
// CUDA targets (a lane is a thread's scalar), else the lanes over the host's vector width (16
// floats with AVX-512, 8 otherwise), at least 1. Register blocking is sized by it (attention's
// key groups, the tiled backward's rows per step); no bit depends on it.
int registers_per_vector(const Request& r, int lanes);

// Whether a sum of n terms in order `o` has a warp layout: a lane tree with no outer chunks
// whose partial sums fit in a warp (lanes * accumulators <= 32), folding its lanes by halving (the
// fold every named lane-tree order uses) over a power-of-two lane count.
bool warp_sum_fits(const ir::SumOrder& o, int64_t n);

// Whether the request is built as a one-warp team kernel: a CUDA target, a norm op
// (layer_norm, rms_norm, var_mean) whose moments are sums (two-pass or one-pass) that all fit,
// or the lane Welford cascade (a lane per thread: gen/blocks/reductions.cpp, emit_lane_welford_warp).
bool warp_layout(const Request& r, const ir::Order& o);

// The sum of terms 0..n-1 in order `o` (warp_sum_fits), as team statements of a team kernel of
// 32 threads. `prologue`, if set, runs first in the first statement on every thread: it binds
// the per-thread locals the terms read. Returns a one-element scratch buffer holding the sum,
// for team statements after these to read.
int emit_warp_sum(ir::Builder& b, const ir::SumOrder& o, const Arith& ar, int64_t n, const TermFn& term,
                  const std::function<void()>& prologue, const std::string& label);

// emit_moments in a warp layout (two-pass, one-pass or lane Welford). mean and var are reads of
// per-thread locals, equal on every thread: use them inside later team statements.
Moments emit_warp_moments(ir::Builder& b, const ir::MomentsOrder& o, const Arith& ar, int64_t n, const LoadFn& x);

}  // namespace ordo::gen
