// ordo orders: the named-order table.
#include "tools/cli.hpp"

#include "backends/cuda/cuda_backend.hpp"
#include "gen/gen.hpp"

namespace ordo::cli {

const char* const kOrdersHelp = R"(usage: ordo orders [op]

  op                    only the orders defined for this op      ordo orders rms_norm
An order marked exact reproduces a library bit for bit; device-only orders run on a GPU only.

example:
  ordo orders layer_norm
)";

int cmd_orders(int argc, char** argv) {
  Args a = Args::parse(argc, argv, 2, {}, {});
  std::optional<ordo::OpKind> op;
  if (!a.positional.empty()) op = parse_op_arg(a);
  for (const ordo::gen::NamedOrder& n : ordo::gen::named_orders()) {
    std::vector<std::string> ops, dtypes;
    bool match = !op;
    for (ordo::OpKind o : n.ops) {
      ops.emplace_back(ordo::name(o));
      match |= op == o;
    }
    if (!match) continue;
    for (ordo::ScalarType t : n.dtypes) dtypes.emplace_back(ordo::name(t));
    fmt::print("{:<22} {:<11} [{}] [{}]\n    {}\n", n.name,
               n.device_only ? "device-only" : n.unverified ? "unverified" : n.reproduces_reference ? "exact" : "", fmt::join(ops, ","),
               fmt::join(dtypes, ","), n.description);
    // Which (op, dtype) kernels call CUDA's own approximations: those run on target cuda only.
    std::vector<std::string> device_only;
    std::string device_fns;
    for (ordo::OpKind o : n.ops)
      for (ordo::ScalarType t : n.dtypes) {
        ordo::Request r;
        r.op = o;
        // 68: a tail for every lane count below it, and a multiple of 4 (torch-cuda's layer_norm).
        r.cols = ordo::forward_of(o) == ordo::OpKind::attention ? 32 : 68;
        r.target = n.device_only ? ordo::Target::cuda : ordo::Target::cpu;
        r.seq_q = r.seq_k = ordo::forward_of(o) == ordo::OpKind::attention ? 9 : 0;
        r.x_dtype = t;
        r.order = std::string(n.name);
        r.has_weight = ordo::forward_of(o) == ordo::OpKind::layer_norm || ordo::forward_of(o) == ordo::OpKind::rms_norm;
        r.has_bias = ordo::forward_of(o) == ordo::OpKind::layer_norm;
        if (!ordo::gen::takes_shape(r)) continue;  // a dtype the order has for other ops (torch2.15-cpu's f16 attention)
        const ordo::ir::Kernel k = ordo::gen::build(r, ordo::gen::resolve(r));
        if (std::vector<std::string> d = ordo::cuda_backend::device_calls(k); !d.empty()) {
          device_only.push_back(fmt::format("{} {}", ordo::name(o), ordo::name(t)));
          for (const std::string& f : d)
            if (device_fns.find(f) == std::string::npos) device_fns += (device_fns.empty() ? "" : ", ") + f;
        }
      }
    if (!device_only.empty())
      fmt::print("    device-only (calls {}, CUDA's approximations with no definition off the GPU; target cuda only): {}\n", device_fns,
                 fmt::join(device_only, "; "));
  }
  return 0;
}

}  // namespace ordo::cli
