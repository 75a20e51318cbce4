// ordo compare and demo: every order on one input, against float64.
#include "tools/cli.hpp"

#include "backends/llvm/llvm_backend.hpp"
#include "gen/gen.hpp"
#include "ordo/compare.hpp"
#include "ordo/plot.hpp"

namespace ordo::cli {

const char* const kCompareHelp = R"(usage: ordo compare <op> [--orders a,b,...] [options]

  --orders a,b,...      the orders to compare (default: a set for the op)  --orders torch2.15-cpu,fast
  --rows R              rows of the input (64)                   --rows 256
  --seed S              the input's random seed (1)              --seed 7
  --offset O            the input's mean (0)                     --offset 1e4
  --scale S             the input's spread (1)                   --scale 1e-3
  --repeats K           timed runs per order                     --repeats 20
  --plot FILE.png       a histogram of ULP distances per order   --plot ulps.png

example:
  ordo compare layer_norm --orders torch2.15-cpu,torch1.13-cpu-avx2,fast --rows 64 --cols 4096 --offset 100
)";

const char* const kDemoHelp = R"(usage: ordo demo [options]

The compare report for layer_norm (256 rows of 4096 by default): each order's distance from a
float64 reference, how often each pair agrees bit for bit, and the time. Takes compare's
options but --plot, and the request options.

example:
  ordo demo --dtype bf16 --offset 100
)";

namespace {

// The default attention study: PyTorch 2.15's SDPA and its eager composite (where this host's MKL
// kernels are modelled and the dtype is theirs), 1.13's composite, then flash per key block: those
// that take the request (a mask: the torch2.15-cpu orders only).
std::vector<std::string> attention_orders(const ordo::Request& base) {
  std::vector<std::string> out;
  for (const char* name : {"torch2.15-cpu", "torch2.15-cpu-math", "torch1.13-cpu-math", "flash(16)", "flash(32)", "flash(64)", "flash(128)",
                           "flash(256)", "fast"}) {
    ordo::Request r = base;
    r.order = name;
    try {
      ordo::gen::resolve(r);
      out.emplace_back(name);
    } catch (const ordo::Error&) {  // another host's MKL, a dtype the reference does not run, a mask
    }
  }
  return out;
}

int compare(const Args& a, ordo::OpKind op, int64_t default_rows) {
  ordo::CompareOptions o;
  o.base = request_from(a, op);
  refuse_launch_sizes(o.base, "compare");
  if (o.base.cols == 0) o.base.cols = 4096;
  o.rows = a.get("rows") ? parse_int("--rows", *a.get("rows"), 1, int64_t(1) << 24) : default_rows;
  if (auto v = a.get("seed")) o.seed = static_cast<uint64_t>(parse_int("--seed", *v, 0, INT64_MAX));
  if (auto v = a.get("offset")) o.offset = parse_double("--offset", *v);
  if (auto v = a.get("scale")) o.scale = parse_double("--scale", *v);
  if (auto v = a.get("repeats")) o.repeats = static_cast<int>(parse_int("--repeats", *v, 1, 1000));
  if (ordo::forward_of(op) == ordo::OpKind::attention) {  // a drift study that runs in seconds, float64 reference included
    if (!a.get("cols")) o.base.cols = 64;
    if (!a.get("sq") && !a.get("sk")) o.base.seq_q = o.base.seq_k = 512;
    if (!a.get("rows")) o.rows = 4;
  }
  o.orders = a.get("orders") ? split(*a.get("orders"), ',') : op == ordo::OpKind::attention ? attention_orders(o.base) : default_orders(op, o.base.x_dtype);
  // Bad orders fail the command up front rather than appearing as a row of the table.
  for (const std::string& name : o.orders) {
    ordo::Request r = o.base;
    r.order = name;
    ordo::gen::resolve(r);
  }
  std::optional<std::string> plot = a.get("plot");
  if (plot) check_output_path("--plot", *plot);
  o.progress = progress_line("compare");
  ordo::CompareReport rep = ordo::compare_orders(o);
  fmt::print("{}", ordo::format_report(rep));
  if (plot && std::all_of(rep.results.begin(), rep.results.end(), [](const ordo::OrderResult& r) { return r.error.empty(); })) {
    std::vector<ordo::UlpHistogramPanel> panels;
    for (const ordo::OrderResult& r : rep.results) panels.push_back({r.order, r.primary_ulps});
    ordo::write_ulp_histogram_png(*plot, fmt::format("ordo compare {}: ULP distance of {} from float64, N={} rows={} {}", ordo::name(op),
                                                     rep.primary, o.base.cols, o.rows, ordo::name(o.base.x_dtype)), panels);
    fmt::print("\nwrote {}\n", *plot);
  }
  for (const ordo::OrderResult& r : rep.results)
    if (!r.error.empty()) {
      fmt::print(stderr, "ordo: internal error: order {} failed: {}\n", r.order, r.error);
      return 1;
    }
  return 0;
}

}  // namespace

int cmd_compare(int argc, char** argv) {
  std::vector<std::string> values = kRequestValues;
  values.insert(values.end(), {"orders", "rows", "seed", "offset", "scale", "repeats", "plot"});
  Args a = Args::parse(argc, argv, 2, kRequestFlags, values);
  if (a.get("order")) throw Error("compare takes --orders a,b,...");
  return compare(a, parse_op_arg(a), 64);
}

int cmd_demo(int argc, char** argv) {
  std::vector<std::string> values = kRequestValues;
  values.insert(values.end(), {"orders", "rows", "seed", "offset", "scale", "repeats"});
  Args a = Args::parse(argc, argv, 2, kRequestFlags, values);
  if (!a.positional.empty()) throw Error(fmt::format("unexpected argument '{}'", a.positional[0]));
  fmt::print("ordo demo: one layer_norm request, every order; host {}\n\n", ordo::llvm_backend::host_description());
  a.positional = {"layer_norm"};
  return compare(a, ordo::OpKind::layer_norm, 256);
}

}  // namespace ordo::cli
