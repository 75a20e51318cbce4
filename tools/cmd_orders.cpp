// ordo orders: the named-order table.
#include "tools/cli.hpp"

#include <algorithm>
#include <cctype>

#include "backends/cuda/cuda_backend.hpp"
#include "gen/gen.hpp"

namespace ordo::cli {

const char* const kOrdersHelp = R"(usage: ordo orders [op] [--markdown]

  op                    only the orders defined for this op      ordo orders rms_norm
  --markdown            the table as Markdown: docs/orders.md is exactly this output
An order marked exact reproduces a library bit for bit; device-only orders run on a GPU only.

examples:
  ordo orders layer_norm
  ordo orders --markdown > docs/orders.md
)";

namespace {

// GitHub's heading anchor: lower case, spaces to '-', punctuation other than '-' and '_' dropped.
std::string anchor(std::string_view heading) {
  std::string out;
  for (char c : heading) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (c == ' ') out += '-';
  }
  return out;
}

// "a; b (x; y); c" -> {"a", "b (x; y)", "c"}: semicolons inside parentheses stay.
std::vector<std::string> split_clauses(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ';' && depth == 0) {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    if (cur.empty() && c == ' ') continue;
    cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// One row of the table as `ordo orders` shows it.
struct OrderRow {
  const ordo::gen::NamedOrder* order;
  std::string status;  // exact, unverified, device-only or empty
  std::vector<std::string> ops, dtypes;
  // Ops the order has for fewer dtypes: "sum: f32", and the same with the reason.
  std::vector<std::string> fewer, fewer_why;
  // Which (op, dtype) kernels call CUDA's own approximations (those run on target cuda only),
  // and the functions they call.
  std::vector<std::string> device_only;
  std::string device_fns;
  // The lengths the order takes at launch, one kernel serving every value: "N" per row op (for
  // every dtype it has), "S_k" for attention and its backward. Found by resolving such a request,
  // not stated.
  std::vector<std::string> n_at_launch, sk_at_launch;
};

// Whether the order builds one kernel for every N (row ops) or S_k (attention) for op, every dtype.
bool takes_length_at_launch(const ordo::gen::NamedOrder& n, ordo::OpKind o) {
  const bool attention = ordo::forward_of(o) == ordo::OpKind::attention;  // its backward too (given lse)
  if (n.device_only || (ordo::is_backward(o) && !attention)) return false;
  for (ordo::ScalarType t : ordo::gen::dtypes_for(n, o)) {
    ordo::Request r;
    r.op = o;
    r.x_dtype = t;
    r.order = std::string(n.name);
    if (attention) {
      r.cols = 32;
      r.seq_q = 1;
      r.seq_k_at_launch = true;
      r.has_weight = r.has_bias = false;
      ordo::Request fixed = r;  // a dtype the order has for other ops only does not count
      fixed.seq_k_at_launch = false;
      fixed.seq_k = 9;
      if (ordo::gen::takes_shape(fixed) && !ordo::gen::takes_shape(r)) return false;
    } else {
      r.cols_at_launch = true;
      r.has_weight = o == ordo::OpKind::layer_norm || o == ordo::OpKind::rms_norm;
      r.has_bias = o == ordo::OpKind::layer_norm;
      ordo::Request fixed = r;
      fixed.cols_at_launch = false;
      fixed.cols = 68;
      if (ordo::gen::takes_shape(fixed) && !ordo::gen::takes_shape(r)) return false;
    }
  }
  return true;
}

OrderRow describe_row(const ordo::gen::NamedOrder& n) {
  OrderRow row{&n, n.device_only ? "device-only" : n.unverified ? "unverified" : n.reproduces_reference ? "exact" : "", {}, {}, {}, {}, {}, {}, {}, {}};
  for (ordo::OpKind o : n.ops) row.ops.emplace_back(ordo::name(o));
  for (ordo::ScalarType t : n.dtypes) row.dtypes.emplace_back(ordo::name(t));
  for (const ordo::gen::OpDtypes& d : n.fewer_dtypes) {
    std::vector<std::string_view> names;
    for (ordo::ScalarType t : d.dtypes) names.push_back(ordo::name(t));
    row.fewer.push_back(fmt::format("{}: {}", ordo::name(d.op), fmt::join(names, ", ")));
    row.fewer_why.push_back(fmt::format("{} only, since {}", row.fewer.back(), d.why));
  }
  for (ordo::OpKind o : n.ops)
    for (ordo::ScalarType t : ordo::gen::dtypes_for(n, o)) {
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
        row.device_only.push_back(fmt::format("{} {}", ordo::name(o), ordo::name(t)));
        for (const std::string& f : d)
          if (row.device_fns.find(f) == std::string::npos) row.device_fns += (row.device_fns.empty() ? "" : ", ") + f;
      }
    }
  for (ordo::OpKind o : n.ops)
    if (takes_length_at_launch(n, o)) (ordo::forward_of(o) == ordo::OpKind::attention ? row.sk_at_launch : row.n_at_launch).emplace_back(ordo::name(o));
  return row;
}

// "N (layer_norm, softmax), S_k (attention)", or "" when every length is fixed.
std::string launch_lengths(const OrderRow& row) {
  std::string out;
  if (!row.n_at_launch.empty()) out = fmt::format("N ({})", fmt::join(row.n_at_launch, ", "));
  if (!row.sk_at_launch.empty()) out += fmt::format("{}S_k ({})", out.empty() ? "" : ", ", fmt::join(row.sk_at_launch, ", "));
  return out;
}

void print_text(const OrderRow& row) {
  const ordo::gen::NamedOrder& n = *row.order;
  fmt::print("{:<22} {:<11} [{}] [{}]\n    {}\n", n.name, row.status, fmt::join(row.ops, ","), fmt::join(row.dtypes, ","), n.description);
  if (!row.fewer_why.empty()) fmt::print("    fewer dtypes: {}\n", fmt::join(row.fewer_why, "; "));
  if (!row.device_only.empty())
    fmt::print("    device-only (calls {}, CUDA's approximations with no definition off the GPU; target cuda only): {}\n", row.device_fns,
               fmt::join(row.device_only, "; "));
  if (std::string l = launch_lengths(row); !l.empty()) fmt::print("    given at launch, one kernel for every value: {}\n", l);
}

// Markdown: an index table, then a section per order. The description is the table's own text;
// its `;`-separated clauses (one per op or topic) become a list.
void print_markdown(const std::vector<OrderRow>& rows, std::optional<ordo::OpKind> op) {
  fmt::print("# ordo's named orders\n\n");
  fmt::print("Generated by `ordo orders{} --markdown` from the one table of named orders (`gen/order_table.cpp`); a test keeps "
             "this file equal to that output. An order marked **exact** reproduces a library bit for bit (the tests compare "
             "it with that library as installed); **unverified** claims a reference that could not be measured here; "
             "**device-only** orders run on a GPU only. The column *at launch* lists the lengths an order takes as launch "
             "arguments (one kernel serves every value, with the bits of the kernel built for each); every other length is "
             "fixed when a kernel is built.\n\n",
             op ? fmt::format(" {}", ordo::name(*op)) : std::string());
  fmt::print("| order | status | ops | dtypes | at launch |\n|---|---|---|---|---|\n");
  for (const OrderRow& row : rows)
    fmt::print("| [`{}`](#{}) | {} | {} | {} | {} |\n", row.order->name, anchor(row.order->name), row.status, fmt::join(row.ops, ", "),
               fmt::format("{}{}", fmt::join(row.dtypes, ", "), row.fewer.empty() ? "" : fmt::format(" ({})", fmt::join(row.fewer, "; "))),
               fmt::format("{}{}{}", row.n_at_launch.empty() ? "" : "N", !row.n_at_launch.empty() && !row.sk_at_launch.empty() ? ", " : "",
                           row.sk_at_launch.empty() ? "" : "S_k"));
  for (const OrderRow& row : rows) {
    const ordo::gen::NamedOrder& n = *row.order;
    fmt::print("\n## {}\n\n", n.name);
    if (!row.status.empty()) fmt::print("**{}**. ", row.status);
    fmt::print("Ops: {}. Dtypes: {}{}.\n\n", fmt::join(row.ops, ", "), fmt::join(row.dtypes, ", "),
               row.fewer_why.empty() ? "" : fmt::format("; {}", fmt::join(row.fewer_why, "; ")));
    for (const std::string& clause : split_clauses(n.description)) fmt::print("- {}\n", clause);
    if (!row.device_only.empty())
      fmt::print("- device-only kernels (they call {}, CUDA's approximations with no definition off the GPU; target cuda only): {}\n",
                 row.device_fns, fmt::join(row.device_only, "; "));
    if (std::string l = launch_lengths(row); !l.empty()) fmt::print("- given at launch, one kernel for every value: {}\n", l);
  }
}

}  // namespace

int cmd_orders(int argc, char** argv) {
  Args a = Args::parse(argc, argv, 2, {"markdown"}, {});
  std::optional<ordo::OpKind> op;
  if (!a.positional.empty()) op = parse_op_arg(a);
  std::vector<OrderRow> rows;
  for (const ordo::gen::NamedOrder& n : ordo::gen::named_orders())
    if (!op || std::find(n.ops.begin(), n.ops.end(), *op) != n.ops.end()) rows.push_back(describe_row(n));
  if (a.flag("markdown")) print_markdown(rows, op);
  else
    for (const OrderRow& row : rows) print_text(row);
  return 0;
}

}  // namespace ordo::cli
