// ordo emit: a kernel at one stage (IR, LLVM IR, CUDA C++, PTX).
#include "tools/cli.hpp"

#include "backends/cuda/cuda_backend.hpp"
#include "backends/llvm/llvm_backend.hpp"
#include "gen/gen.hpp"
#include "ir/ir.hpp"

namespace ordo::cli {

const char* const kEmitHelp = R"(usage: ordo emit --ir|--llvm|--cuda|--ptx <op> --order NAME [options]

  --ir                  ordo's IR, the order visible             ordo emit --ir layer_norm --order torch2.15-cpu --cols 20
  --llvm                the optimized LLVM IR                    ordo emit --llvm softmax --order fast --cols 4096
  --cuda                the CUDA C++ source, then ptxas's line   ordo emit --cuda layer_norm --order fast --cols 4096
  --ptx                 NVRTC's PTX, then ptxas's line           ordo emit --ptx layer_norm --order fast --cols 4096 --arch sm_80

example:
  ordo emit --ir layer_norm --order torch2.15-cpu-avx2 --cols 40 --dtype bf16
)";

namespace {

// One kernel at the stage asked for.
void emit_one(const Args& a, const ordo::Request& r, const ordo::ir::Kernel& k) {
  if (std::string err = ordo::ir::verify(k); !err.empty()) throw Error("internal: " + err);
  if (a.flag("cuda") || a.flag("ptx")) {
    // The CUDA source (or NVRTC's PTX for sm_<arch>), then ptxas's register and spill line.
    const ordo::cuda_backend::Source src = ordo::cuda_backend::render(k);
    if (!ordo::cuda_backend::nvrtc_available()) {
      if (a.flag("ptx")) ordo::cuda_backend::compile(src, r.cuda_arch, false, true);  // throws: says what is missing
      fmt::print("{}// ptxas: not run (this ordo was built without NVRTC)\n", src.text);
      return;
    }
    const ordo::cuda_backend::Compiled c = ordo::cuda_backend::compile(src, r.cuda_arch, true, true);
    fmt::print("{}// sm_{} {}\n", a.flag("cuda") ? src.text : c.ptx, r.cuda_arch, c.ptxas.line);
    return;
  }
  ordo::llvm_backend::Options options;
  options.rows_in_flight = r.rows_in_flight;
  fmt::print("{}", a.flag("ir") ? ordo::ir::print(k) : ordo::llvm_backend::emit_llvm_ir(k, options));
}

}  // namespace

int cmd_emit(int argc, char** argv) {
  Args a = Args::parse(argc, argv, 2, [] {
    auto f = kRequestFlags;
    f.insert(f.end(), {"ir", "llvm", "cuda", "ptx"});
    return f;
  }(), kRequestValues);
  const ordo::OpKind op = parse_op_arg(a);
  ordo::Request r = request_from(a, op);
  if (r.cols == 0 && !a.get("cols") && !r.cols_at_launch) r.cols = 1024;
  if (a.flag("ir") + a.flag("llvm") + a.flag("cuda") + a.flag("ptx") != 1)
    throw Error("emit needs exactly one of --ir, --llvm, --cuda or --ptx");
  // CUDA source and PTX are for target cuda. So is the IR of a device-only order: it prints
  // the kernel the GPU would run (nothing runs here).
  const ordo::gen::NamedOrder* named = ordo::gen::find_order(r.order);
  if (a.flag("cuda") || a.flag("ptx") || (a.flag("ir") && named && named->device_only)) r.target = ordo::Target::cuda;
  ordo::ir::Order order = ordo::gen::resolve(r);
  // An op of several kernels (a backward op's weight gradients) prints each, in launch order.
  const std::vector<ordo::ir::Kernel> stages = ordo::gen::build_stages(r, order);
  for (size_t s = 0; s < stages.size(); ++s) {
    if (stages.size() > 1) fmt::print("{}// stage {} of {}: {}\n", s ? "\n" : "", s + 1, stages.size(), stages[s].name);
    emit_one(a, r, stages[s]);
  }
  return 0;
}

}  // namespace ordo::cli
