// The ordo command line. One file per command (cmd_<name>.cpp), the shared parsing in cli.cpp;
// this file is the command table and the dispatch.
// Exit codes: 0 success (and every form of help); 2 a bad request or bad input (the message
// names it); 1 internal error.
#include <cstring>

#include "tools/cli.hpp"

namespace ordo::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"run", "run one kernel on .npy inputs and write .npy outputs", kRunHelp, cmd_run, true},
      {"orders", "list the named orders, one line each", kOrdersHelp, cmd_orders, false},
      {"compare", "every order on one input: distance from float64, agreement, time", kCompareHelp, cmd_compare, true},
      {"demo", "the main job: layer_norm in every order on one default input", kDemoHelp, cmd_demo, true},
      {"emit", "print a kernel at one stage: IR, LLVM IR, CUDA C++ or PTX", kEmitHelp, cmd_emit, true},
      {"bench", "time one kernel: GB/s or GFLOP/s and compile times, next to a baseline", kBenchHelp, cmd_bench, true},
      {"build", "offline kernels: a .so with header and manifest, or a .cubin/.ptx", kBuildHelp, cmd_build, true},
      {"cache", "the persistent kernel cache: stats or clear", kCacheHelp, cmd_cache, false},
  };
  return table;
}

namespace {

void print_overview() {
  fmt::print("ordo: reduction orders as data, compiled to kernels\n\nusage: ordo <command> [options]\n\ncommands:\n");
  for (const Command& c : commands()) fmt::print("  {:<9} {}\n", c.name, c.summary);
  fmt::print(
      "\n`ordo help <command>` or `ordo <command> --help` lists a command's options, each with an example.\n\n"
      "ops: layer_norm (in x, weight, bias; out y, mean, rstd), rms_norm (in x, weight; out y, rstd),\n"
      "     var_mean (in x; out var, mean), sum and mean (in x; out sum or mean: x.sum(-1), x.mean(-1)),\n"
      "     softmax, log_softmax, silu, gelu_tanh and gelu (in x; out y),\n"
      "     attention (in q [..., S_q, D], k, v [..., S_k, D]; out out, and lse when asked for).\n"
      ".npy dtypes: float32 '<f4', float16 '<f2', bfloat16 as uint16 bit patterns '<u2'.\n\n"
      "example:\n  ordo run layer_norm --order torch2.15-cpu --in x=x.npy --out y=y.npy\n");
}

const Command& find_command(const std::string& name) {
  for (const Command& c : commands())
    if (name == c.name) return c;
  std::vector<std::string> names;
  for (const Command& c : commands()) names.emplace_back(c.name);
  const std::optional<std::string> near = closest(name, names);
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  throw Error(fmt::format("unknown command '{}'{}; commands: {}", name, near ? fmt::format(" (did you mean '{}'?)", *near) : "", list));
}

void print_help(const Command& c) { fmt::print("{}{}", c.help, c.request_options ? kRequestOptionsHelp : ""); }

bool is_help(const char* a) { return !std::strcmp(a, "--help") || !std::strcmp(a, "-h"); }

int dispatch(int argc, char** argv) {
  if (argc < 2) {
    print_overview();
    return 2;  // a command is required
  }
  const std::string first = argv[1];
  if (first == "help" || is_help(argv[1])) {
    if (argc > 3) throw Error(fmt::format("ordo help takes one command, got '{}' too", argv[3]));
    if (argc == 3) print_help(find_command(argv[2]));
    else print_overview();
    return 0;
  }
  const Command& c = find_command(first);
  for (int i = 2; i < argc; ++i)
    if (is_help(argv[i])) {
      print_help(c);
      return 0;
    }
  return c.run(argc, argv);
}

}  // namespace

}  // namespace ordo::cli

int main(int argc, char** argv) {
  try {
    return ordo::cli::dispatch(argc, argv);
  } catch (const ordo::Error& e) {
    fmt::print(stderr, "ordo: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "ordo: internal error: {}\n", e.what());
    return 1;
  }
}
