// Attention's additive mask (Request::mask) as attention kernels read it: the input
// "mask", PyTorch's [B, H, S_q, S_k] contiguous in its reduced shape (a broadcast dim has one
// element), and the address of each (batch, head, query, key)'s element.
#pragma once

#include <cstdint>

#include "ir/ir.hpp"
#include "ordo/request.hpp"

namespace ordo::gen {

class MaskInput {
 public:
  // Declares the input (after the op's other inputs) for a launch whose rows are
  // batch * (heads / kv_group): one row per (batch, K/V head), each running kv_group query heads
  // (Request::kv_group; 1 in the forward). How its length follows the launch:
  //   per batch and head: rows*(kv_group*K) (each row's query heads' masks, one after another);
  //   per batch only: K for each batch's heads/kv_group rows (Extent::row_groups);
  //   per head only: heads*K, shared (Extent::fixed); neither: K, shared;
  // where K = (S_q or 1) * (S_k or 1). With S_k at launch (Request::seq_k_at_launch, the kernel's
  // size argument 0) a mask that spans the keys is sized by it (Buffer::per_row_size).
  MaskInput(ir::Builder& b, const Request& r);

  // The first element of query head `group_head` (0 .. kv_group-1) of the instance's row.
  ir::ExprRef head_base(ir::Builder& b, const ir::ExprRef& group_head) const;
  // The first element of `query`'s row of keys, from a head_base.
  ir::ExprRef row_base(ir::Builder& b, const ir::ExprRef& head, const ir::ExprRef& query) const;
  // The mask at keys key .. key+lanes-1 of a row (row_base) as f32: a vector load, or the row's
  // one element broadcast where the mask spans no keys.
  ir::ExprRef at_keys(ir::Builder& b, const ir::ExprRef& row, const ir::ExprRef& key, int lanes) const;
  // The mask at (query, key) of a head (head_base) as f32, either index an i64 scalar or a vector
  // (lane by lane): a load where the address is one, else a gather; the result has the larger
  // lane count.
  ir::ExprRef at(ir::Builder& b, const ir::ExprRef& head, const ir::ExprRef& query, const ir::ExprRef& key) const;

 private:
  const Request& r_;
  int buffer_ = -1;
  // Elements per query row (S_k or 1) and per (batch, head): constants, or with S_k at launch
  // expressions of it.
  ir::ExprRef key_extent_, per_head_;
};

}  // namespace ordo::gen
