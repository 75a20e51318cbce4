// The interpreter: the executable specification of the IR. It runs one node at a time,
// one lane at a time, in exactly the order the IR states. Every backend is judged by
// bit-equality with it.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/ir.hpp"

namespace ordo::ir {

struct BufferArg {
  void* data = nullptr;
  int64_t elements = 0;  // bounds for every access; an access outside them throws
};

// Runs every instance of the grid (extents[d] for d < k.grid_rank). A further extent is the
// launch's row count (launch_rows), which a kernel whose grid is over rows may leave out (it is
// extents[0] there). Throws ordo::Error on an out-of-bounds access or a read of an unassigned local.
void interpret(const Kernel& k, const std::vector<BufferArg>& buffers, const std::vector<int64_t>& extents);

}  // namespace ordo::ir
