// Fuzz target: order names, including parameters such as `lane-welford(lanes=16,chunk=4)`
// (gen/resolve.cpp: resolve, apply_parameters; gen/order_table.cpp: find_order).
//
// Input: one byte choosing the op (of those in the order table), the storage dtype and the accumulation type, one byte choosing
// N from sizes around lane and chunk boundaries, then the order name. Every name must either be
// rejected with ordo::Error or give an Order whose kernel builds, verifies and runs on the
// interpreter (fuzz_common.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"

namespace {
constexpr int64_t kCols[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257,
                             300, 1000, 4096, 8193, 65537, 0, -1, (int64_t(1) << 31) + 1};
// Every op some named order is defined for, in table order: an op added to the table (attention,
// with its flash(64)-style names) is fuzzed without a change here.
const std::vector<ordo::OpKind>& ops() {
  static const std::vector<ordo::OpKind> list = [] {
    std::vector<ordo::OpKind> out;
    for (const ordo::gen::NamedOrder& n : ordo::gen::named_orders())
      for (ordo::OpKind o : n.ops)
        if (std::find(out.begin(), out.end(), o) == out.end()) out.push_back(o);
    return out;
  }();
  return list;
}
constexpr ordo::ScalarType kStorage[] = {ordo::ScalarType::f32, ordo::ScalarType::bf16, ordo::ScalarType::f16};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  ordo::Request r;
  const uint8_t shape = data[0];
  r.op = ops()[shape % ops().size()];
  r.x_dtype = kStorage[(shape / 5) % 3];
  const int acc = (shape / 15) % 3;  // the order's own, f32, f64
  if (acc) r.acc_dtype = acc == 1 ? ordo::ScalarType::f32 : ordo::ScalarType::f64;
  r.has_bias = r.op == ordo::OpKind::layer_norm && shape < 128;
  r.has_weight = (r.op == ordo::OpKind::layer_norm || r.op == ordo::OpKind::rms_norm) && shape % 7 != 0;
  r.cols = kCols[data[1] % (sizeof kCols / sizeof kCols[0])];
  r.order.assign(reinterpret_cast<const char*>(data + 2), size - 2);
  ordo::fuzz::check_request(r);
  return 0;
}
