// Fuzz target: the CLI's argument parser and the request path behind it.
//
// The parser (Args::parse, request_from, parse_int, parse_double, split, name_file) is the CLI's
// own (tools/cli.hpp, linked from ordo_cli_lib): the fuzzer runs the CLI's code, not a copy.
//
// Input: argv after `ordo`, one argument per line; the first is the subcommand (run, compare,
// demo, build, bench; anything else is parsed as emit). Each subcommand's options are parsed as
// that subcommand parses them, then every request it would compile goes through gen::resolve,
// gen::build, ir::verify and the interpreter (fuzz_common.hpp). Every command line must either
// be rejected with ordo::Error or give requests that keep those promises. Nothing is compiled by
// LLVM, run at full size, or written to disk.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "fuzz_common.hpp"

#include "tools/cli.hpp"

namespace {

using namespace ordo::cli;

// A subcommand's option set: the shared ones plus its own, as its cmd_* function declares them.
std::vector<std::string> with(std::vector<std::string> base, std::initializer_list<const char*> more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

void check_command(int argc, char** argv) {
  const std::string cmd = argv[1];
  if (cmd == "run") {
    Args a = Args::parse(argc, argv, 2, kRequestFlags, with(kRequestValues, {"in", "out", "threads", "scale"}));
    ordo::Request r = request_from(a, parse_op_arg(a));
    for (const std::string& v : a.all("in")) name_file("in", v);
    for (const std::string& v : a.all("out")) name_file("out", v);
    if (auto t = a.get("threads")) parse_int("--threads", *t, 0, 1024);
    if (r.cols == 0) r.cols = 64;  // run takes N from the x file
    ordo::fuzz::check_request(r);
  } else if (cmd == "compare" || cmd == "demo") {
    Args a = Args::parse(argc, argv, 2, kRequestFlags,
                         with(kRequestValues, {"orders", "rows", "seed", "offset", "scale", "repeats", "plot"}));
    const ordo::OpKind op = cmd == "demo" ? ordo::OpKind::layer_norm : parse_op_arg(a);
    ordo::Request r = request_from(a, op);
    if (r.cols == 0) r.cols = 4096;
    if (auto v = a.get("rows")) parse_int("--rows", *v, 1, int64_t(1) << 24);
    if (auto v = a.get("seed")) parse_int("--seed", *v, 0, INT64_MAX);
    if (auto v = a.get("offset")) parse_double("--offset", *v);
    if (auto v = a.get("scale")) parse_double("--scale", *v);
    if (auto v = a.get("repeats")) parse_int("--repeats", *v, 1, 1000);
    const std::vector<std::string> orders = a.get("orders") ? split(*a.get("orders"), ',') : default_orders(op, r.x_dtype);
    for (const std::string& name : orders) {
      r.order = name;
      ordo::fuzz::check_request(r);
    }
  } else if (cmd == "build") {  // as cmd_build parses, up to the point where it compiles
    std::vector<std::string> words(argv, argv + argc);
    std::vector<char*> args;
    for (std::string& w : words) {
      if (w == "-o") w = "--o";
      args.push_back(w.data());
    }
    Args a = Args::parse(argc, args.data(), 2, kRequestFlags, with(kRequestValues, {"orders", "o"}));
    const ordo::OpKind op = parse_op_arg(a);
    a.values.erase("target");
    ordo::Request r = request_from(a, op);
    const std::vector<std::string> orders =
        a.get("orders") ? split(*a.get("orders"), ',') : std::vector<std::string>{a.get("order").value_or("")};
    for (const std::string& name : orders) {
      r.order = name;
      ordo::fuzz::check_request(r);
    }
  } else if (cmd == "bench") {
    Args a = Args::parse(argc, argv, 2, with(kRequestFlags, {"json", "no-peak"}), with(kRequestValues, {"rows", "threads", "baseline", "seconds"}));
    ordo::Request r = request_from(a, parse_op_arg(a));
    if (r.cols == 0 && !a.get("cols")) r.cols = 4096;
    if (auto v = a.get("rows")) parse_int("--rows", *v, 1, int64_t(1) << 24);
    if (auto v = a.get("seconds")) parse_double("--seconds", *v);
    ordo::fuzz::check_request(r);
  } else {  // emit, and any other word: emit's options
    Args a = Args::parse(argc, argv, 2, with(kRequestFlags, {"ir", "llvm"}), kRequestValues);
    ordo::Request r = request_from(a, parse_op_arg(a));
    if (r.cols == 0 && !a.get("cols")) r.cols = 1024;
    ordo::fuzz::check_request(r);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words = {"ordo"};
  std::string word;
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\n') {
      words.push_back(word);
      word.clear();
    } else if (c != '\0') {  // argv strings end at NUL
      word += c;
    }
  }
  if (!word.empty()) words.push_back(word);
  if (words.size() < 2) return 0;
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  try {
    check_command(static_cast<int>(words.size()), argv.data());
  } catch (const ordo::Error&) {
    // rejected with a message naming the bad value: the documented outcome
  }
  return 0;
}
