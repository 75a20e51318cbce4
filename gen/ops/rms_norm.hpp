// rms_norm's statistics, shared by the forward and the backward (which recomputes rstd when the
// forward's is not given).
#pragma once

#include <string>

#include "gen/blocks/row.hpp"
#include "ir/order.hpp"

namespace ordo::gen {

// PyTorch eager's sum of a row on `threads` threads (its parallel_reduce): per-thread chunks when
// the launch is a single row of more than 32768 terms, else `order` over the whole row.
ir::ExprRef torch_threaded_sum(ir::Builder& b, const ir::SumOrder& order, int threads, const Arith& ar, const Length& n,
                               const TermFn& term, const std::string& label);
// sum(x*x) over the row as the order's forward sums it (one thread; the warp layout is gen/blocks/warp.hpp's).
ir::ExprRef rms_norm_square_sum(ir::Builder& b, const Request& r, const ir::Order& o, const Row& row, int x);
// rstd = 1 / sqrt(squares / N + eps) as the forward rounds it: an f32 local.
ir::ExprRef rms_norm_rstd(ir::Builder& b, const Request& r, const ir::Order& o, ir::ExprRef squares, const Length& n);

}  // namespace ordo::gen
