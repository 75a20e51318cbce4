// What a CompiledKernel is made of, for ordo's own code (the runtime, the CLI, the bindings and
// the tests): the resolved Order, each stage's IR and the program its target's backend loaded.
// The public header keeps these opaque, so that it does not include the IR.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "ir/ir.hpp"
#include "ir/order.hpp"
#include "ordo/ordo.hpp"
#include "src/backend.hpp"

namespace ordo::detail {

struct KernelStage {
  ir::Kernel kernel;
  std::shared_ptr<const StageProgram> program;           // what the target's backend loaded
  double lower_ms = 0, optimize_ms = 0, codegen_ms = 0;  // this stage's compile, by phase
  bool from_disk_cache = false;
};

struct KernelParts {
  ir::Order order;  // what gen::resolve made of the request
  // The op's kernels, launched one after another over the same arguments.
  std::vector<KernelStage> stages;
  // The launch's working memory (ir::Extent::row_blocks), after the arguments in every stage's
  // buffers: run() provides it, reusing the calling thread's memory up to 64 MiB.
  std::vector<ir::Buffer> workspaces;
};

}  // namespace ordo::detail

namespace ordo {

// The IR of a kernel's stage `stage` (0: the kernel, or a backward op's first stage).
inline const ir::Kernel& kernel_ir(const CompiledKernel& k, size_t stage = 0) { return k.parts().stages.at(stage).kernel; }
// The Order the kernel was generated from.
inline const ir::Order& resolved_order(const CompiledKernel& k) { return k.parts().order; }

}  // namespace ordo
