#include "gen/blocks/attention_mask.hpp"

#include <algorithm>

#include "gen/blocks/constants.hpp"

namespace ordo::gen {

using namespace ordo::ir;

MaskInput::MaskInput(Builder& b, const Request& r) : r_(r) {
  const AttentionMask& m = *r.mask;
  // The buffer's elements are a constant count times S_k when S_k is given at launch.
  const bool keys_at_launch = m.per_key && r.seq_k_at_launch;
  const int64_t keys = m.per_key && !keys_at_launch ? r.seq_k : 1;
  const int64_t per_head = (m.per_query ? r.seq_q : 1) * keys;
  key_extent_ = keys_at_launch ? launch_size(0) : idx(keys);
  per_head_ = keys_at_launch ? b.let("mask_per_head", mul(idx(per_head), launch_size(0))) : idx(per_head);
  if (m.per_batch && m.per_head) {
    buffer_ = b.buffer("mask", m.dtype, false, Extent::rows_by_fixed, r.kv_group * per_head);
  } else if (m.per_batch) {
    buffer_ = b.buffer("mask", m.dtype, false, Extent::row_groups, per_head);
    b.kernel().buffers[size_t(buffer_)].block_rows = r.heads / r.kv_group;
  } else {
    buffer_ = b.buffer("mask", m.dtype, false, Extent::fixed, m.per_head ? r.heads * per_head : per_head);
  }
  if (keys_at_launch) b.kernel().buffers[size_t(buffer_)].per_row_size = 0;
}

ExprRef MaskInput::head_base(Builder& b, const ExprRef& group_head) const {
  const AttentionMask& m = *r_.mask;
  const int64_t rows_per_batch = r_.heads / r_.kv_group;
  ExprRef at = idx(0);
  if (m.per_batch) {
    // The batch's first element: every head's masks, or its one.
    const ExprRef batch = div(program_id(0), idx(rows_per_batch));
    at = mul(batch, m.per_head ? mul(idx(r_.heads), per_head_) : per_head_);
  }
  if (m.per_head) {
    const ExprRef head = add(mul(binary(Op::Rem, program_id(0), idx(rows_per_batch)), idx(r_.kv_group)), group_head);
    at = add(at, mul(head, per_head_));
  }
  return b.let("mask_head", at);
}

ExprRef MaskInput::row_base(Builder& b, const ExprRef& head, const ExprRef& query) const {
  if (!r_.mask->per_query) return head;
  return b.let("mask_row", add(head, mul(query, key_extent_)));
}

ExprRef MaskInput::at_keys(Builder& b, const ExprRef& row, const ExprRef& key, int lanes) const {
  ExprRef x = r_.mask->per_key ? load(b.kernel(), buffer_, add(row, key), lanes) : load(b.kernel(), buffer_, row);
  if (x->type.scalar != ScalarType::f32) x = cast(x, ScalarType::f32);
  return !r_.mask->per_key && lanes > 1 ? broadcast(x, lanes) : x;
}

ExprRef MaskInput::at(Builder& b, const ExprRef& head, const ExprRef& query, const ExprRef& key) const {
  const int lanes = std::max(query->type.lanes, key->type.lanes);
  auto widen = [&](const ExprRef& x) { return x->type.lanes == lanes ? x : broadcast(x, lanes); };
  ExprRef at = head;
  int spread = 1;  // the lanes of the address
  if (r_.mask->per_query) {
    at = query->type.lanes > 1 ? add(broadcast(at, query->type.lanes), mul(query, broadcast(key_extent_, query->type.lanes)))
                               : add(at, mul(query, key_extent_));
    spread = query->type.lanes;
  }
  if (r_.mask->per_key) {
    at = spread == key->type.lanes ? add(at, key) : add(widen(at), widen(key));
    spread = std::max(spread, key->type.lanes);
  }
  ExprRef x = spread > 1 ? gather(b.kernel(), buffer_, b.let("mask_at", at)) : load(b.kernel(), buffer_, at);
  if (x->type.scalar != ScalarType::f32) x = cast(x, ScalarType::f32);
  return widen(x);
}

}  // namespace ordo::gen
