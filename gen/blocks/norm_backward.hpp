// The pieces the normalization backward ops share: PyTorch's vectorized row reductions, and the
// column stage that sums weight gradients over the rows of a launch.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gen/blocks/reductions.hpp"
#include "gen/blocks/row.hpp"

namespace ordo::gen {

// PyTorch's vec::map2_reduce_all / map3_reduce_all / reduce_all (ATen/cpu/vec/functional_base.h
// and functional_bfloat16.h) over a row of n terms, as its CPU backward kernels call them.
//  f32 (!split16): n < lanes: the terms summed in order. Else the first vector's terms start a
//   `lanes`-lane accumulator, each further whole vector is added lane-wise, the n mod lanes tail
//   terms go into lanes 0..r-1, and the lanes fold by `fold`.
//  16-bit input (split16): a vector holds 2*lanes elements, whose low and high halves feed two
//   accumulators, started by the first vector; the tail's low half (all of it or its first r
//   terms) goes into the first, the rest into the second's first lanes; fold(acc0 + acc1).
//   n < 2*lanes: for n > lanes, the second half's terms are added (rounded products) into the
//   first vector's lanes 0..n-lanes-1 and its lanes fold in order (or by `fold` when
//   small_fold_by_tree, the mixed-dtype loop); for n <= lanes the terms summed in order.
// A product term accumulates as fma(a, b, acc) in the loop when fma_loop, in the tail when
// fma_tail; otherwise as a rounded product added. The first vector's products are rounded.
struct VecReduceAll {
  int lanes = 8;
  ir::LaneFold fold = ir::LaneFold::Halving;
  bool split16 = false;
  bool fma_loop = false;
  bool fma_tail = false;
  bool small_fold_by_tree = false;
  bool fma_small = false;  // the short-row path's second-half terms as fma(a, b, lane)
};
// Returns a read of a scalar f32 local holding the sum.
ir::ExprRef emit_vec_reduce_all(ir::Builder& b, const VecReduceAll& o, int64_t n, const TermFn& term, const std::string& label);
// Several sums of one row, each in that order, their whole-vector steps in one loop (the row is
// read once): the same bits as one emit_vec_reduce_all per sum. Returns the sums in order.
std::vector<ir::ExprRef> emit_vec_reduce_all(ir::Builder& b, const VecReduceAll& o, int64_t n, const std::vector<LabelledTerm>& sums);

// softmax_backward's row sum s by its order (ir::SoftmaxBackwardOrder, gen/ops/softmax_backward.cpp):
// sum(dy*y) when `products` (term: dy and y), else sum(dy), over n terms, 16-bit rows read as
// `split16`. `threads`: torch's thread count. `one_row_launch`: a bool expression, true when
// PyTorch's row loop has a single row (it then runs inline, TailFma::Inline), or null when the
// loop always has more.
ir::ExprRef softmax_backward_sum(ir::Builder& b, const ir::SoftmaxBackwardOrder& o, int threads, int64_t n, bool split16, bool products,
                                 const TermFn& term, const ir::ExprRef& one_row_launch);
// softmax_backward's (log: log_softmax_backward's) dx for one row of r.cols columns: s summed by
// softmax_backward_sum over the values `dy` gives (f32, a storage value widened) and the forward's
// y, then dx stored to `dx`, exactly as the op does. cross_entropy_backward gives a dy it
// computes (the one-hot gradient of the negative log-likelihood) instead of loading one.
void softmax_backward_row(ir::Builder& b, const Request& r, const ir::Order& order, bool log, const Row& row,
                          const ValueFn& dy, int y, int dx);

// One row of a column stage, as a ColumnSum sees it: this instance's columns of row `row`. With
// an i64 vector `row` (the contiguous walk of a one-column sum), lane l is column first_col of
// row row[l].
struct ColumnRow {
  ir::Builder& b;
  ir::ExprRef row;         // i64, or an i64 vector of `lanes` rows
  ir::ExprRef first_col;   // i64: the instance's first column
  ir::ExprRef cols;        // i64 vector of the instance's columns (clamped to N-1), or null when contiguous
  int lanes;
  int64_t n;
  // This row's values of a rows_by_cols buffer at the instance's columns, as f32.
  ir::ExprRef load(int buffer) const;
  // Element `row` of a per-row buffer (mean, rstd), as an f32 scalar (scalar `row` only).
  ir::ExprRef stat(int buffer) const;
  // The same as a vector of `lanes` (a scalar when lanes is 1): each lane its own row's value.
  ir::ExprRef stat_lanes(int buffer) const;
};

// A weight gradient: acc = accumulate(row, acc) for each row, starting from +0, in the order's
// grouping; the result is stored, rounded once, into `out` (a cols buffer).
struct ColumnSum {
  int out = -1;
  std::string label;
  std::function<ir::ExprRef(const ColumnRow&, ir::ExprRef acc)> accumulate;
};

// The columns [first, end) one column stage covers, and how it walks the rows. An order whose
// columns walk the rows in different ways (LevelCascade) has a stage per way, so that every
// instance's columns share one walk and no control flow depends on program_id.
struct ColumnSpan {
  int64_t first = 0, end = 0;
  enum class Walk : uint8_t {
    Order,        // ThreadSlots, BlockTree: the order's own
    Cascade,      // LevelCascade: the level cascade over the M rows
    Interleaved,  // LevelCascade: rows 4i + k into partial k
    Contiguous,   // LevelCascade, N = 1: the row sum's LevelCascade over the M terms
  } walk = Walk::Order;
};
std::vector<ColumnSpan> column_spans(const ir::ColumnSumOrder& order, int64_t n);

// Makes the kernel a column stage (Kernel::grid_over_rows false) over the columns of `span` and
// emits every sum over the launch's rows in `order`. ThreadSlots and BlockTree over a whole row:
// an instance takes a tile of vectors of order.lanes columns. The LevelCascade walks: a tile of
// vectors for the cascade over whole vectors, else an instance per vector. On the CUDA targets
// (`one_column`) an instance is one column, so a block's threads read a row's adjacent columns
// together. Columns are independent: the tiling changes no bit. `storage` is the slot buffers' type for ThreadSlots with round_slots.
void emit_column_sums(ir::Builder& b, const ir::ColumnSumOrder& order, int64_t n, const ColumnSpan& span, ScalarType storage,
                      const std::vector<ColumnSum>& sums, bool one_column);
// The whole row (orders with a single span).
// `block_sums`: for BlockTree, a workspace (ir::Extent::row_blocks, f32, laid out [block][sum]
// [column]) that already holds each block's sums, as BlockTree forms them from the rows; the stage
// then only combines them. -1: the stage sums the rows itself.
void emit_column_sums(ir::Builder& b, const ir::ColumnSumOrder& order, int64_t n, ScalarType storage, const std::vector<ColumnSum>& sums,
                      bool one_column, int block_sums = -1);

// The one-pass schedule of a BlockTree order on the CPU (gen/ops/layer_norm_backward.cpp states it):
// whether a request takes it, and its first stage. That stage is an instance per block of
// order.block_rows rows (Kernel::rows_per_instance): it zeroes the block's sums in `block_sums`
// (a workspace laid out [block][sum][column], as emit_column_sums reads it), then for each row
// of the block in order calls `row` for the row's own work up to its elementwise pass, and walks
// the columns once, storing the row's dx and adding the row's terms of every sum into the block's
// sums (sums[s].accumulate, from +0 in row order: the column stage's own order for a block).
// Every value a column needs is bound to a local before that column's stores, so the backend
// reuses each load of dy and x (it cannot tell that a store to dx leaves them unchanged).
bool one_pass_weight_gradients(const Request& r, const ir::NormBackwardOrder& o, bool has_column_sums);
struct BlockRow {
  Row row;  // the row, for the dx store
  std::function<ir::ExprRef(const ir::ExprRef& col, int lanes)> dx;  // dx at the columns, in f32
};
void emit_block_rows(ir::Builder& b, const ir::ColumnSumOrder& order, int64_t n, int dx, int block_sums, const std::vector<ColumnSum>& sums,
                     const std::function<BlockRow(const ir::ExprRef& row_index)>& row);

}  // namespace ordo::gen
