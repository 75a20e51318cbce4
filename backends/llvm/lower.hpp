// Internal: the IR -> LLVM IR lowering used by the JIT and by object emission.
#pragma once

#include <string>

#include "ir/ir.hpp"

namespace llvm {
class Module;
class Function;
}  // namespace llvm

namespace ordo::llvm_backend {
llvm::Function* lower(llvm::Module& mod, const ir::Kernel& k, const std::string& symbol, int rows_in_flight);
}
