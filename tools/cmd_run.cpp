// ordo run: one kernel on .npy inputs, .npy outputs.
#include "tools/cli.hpp"

#include <algorithm>
#include <optional>

namespace ordo::cli {

const char* const kRunHelp = R"(usage: ordo run <op> --order NAME --in NAME=FILE.npy ... --out NAME=FILE.npy ... [options]

  --in NAME=FILE.npy    an input: x, weight, bias (attention: q, k, v)   --in x=x.npy
                        backward ops: dy and the forward's tensors: layer_norm_backward dy, x, weight, mean, rstd;
                        rms_norm_backward dy, x, weight, rstd (optional); softmax_backward and
                        log_softmax_backward dy, y (the forward's output); silu_backward, gelu_tanh_backward and gelu_backward dy, x;
                        attention_backward q, k, v, out, dout and lse (optional: without it the
                        order's forward recomputes it); cross_entropy x (rows, classes) and target (rows,) int64;
                        cross_entropy_backward dloss, logp, target, total_weight
  --out NAME=FILE.npy   an output to write: y, mean, rstd, var, sum (attention: out, lse)  --out y=y.npy
                        backward ops: dx, dweight, dbias (layer_norm_backward; computed when asked for);
                        attention_backward: dq, dk, dv; cross_entropy: logp, loss, total_weight;
                        cross_entropy_backward: dx
  --threads T           threads of ordo's pool (0: every core)           --threads 2
  --scale S             attention: replaces 1/sqrt(D)                    --scale 0.125
  --causal              attention: key j is hidden from query i when j > i
  --in mask=FILE.npy    attention, attention_backward: an additive mask (PyTorch's attn_mask as SDPA hands its
                        kernel: f32 or the inputs' dtype, -inf hides a key), shaped [..., H or 1, S_q or 1, S_k or 1]
                        against q's [..., H, S_q] (the leading dims all q's or all 1); the torch2.15-cpu orders
Outputs are written all together, or none of them. x may have any rank; the op reduces its last dim.

examples:
  ordo run layer_norm --order torch2.15-cpu --in x=x.npy --in weight=w.npy --in bias=b.npy --out y=y.npy --out rstd=rstd.npy
  ordo run layer_norm_backward --order 'torch2.15-cpu(threads=2)' --in dy=dy.npy --in x=x.npy --in weight=w.npy \
      --in mean=mean.npy --in rstd=rstd.npy --out dx=dx.npy --out dweight=dw.npy --out dbias=db.npy
  ordo run cross_entropy --order torch2.15-cpu --in x=logits.npy --in target=labels.npy --out loss=loss.npy \
      --out logp=logp.npy --out total_weight=tw.npy
  ordo run attention_backward --order flash --causal --in q=q.npy --in k=k.npy --in v=v.npy --in out=o.npy \
      --in dout=do.npy --in lse=lse.npy --out dq=dq.npy --out dk=dk.npy --out dv=dv.npy
)";

namespace {

// H of q [..., H, S, D] as PyTorch sees it (Request::heads): a 3-D [N, S, D] is (1, N, S, D).
int64_t attention_heads(const ordo::NpyArray& q) { return q.shape.size() >= 3 ? q.shape[q.shape.size() - 3] : 1; }

// The Request::mask of a --in mask file against q [..., H, S_q, D] and S_k keys: which of (batch,
// head, S_q, S_k) it spans, read from its shape, right-aligned against [..., H, S_q, S_k] (the
// leading batch dims all q's or all 1). nullopt without one.
std::optional<ordo::AttentionMask> mask_of(const std::map<std::string, ordo::NpyArray>& in, const ordo::NpyArray& q, int64_t seq_k) {
  if (!in.count("mask")) return std::nullopt;
  const ordo::NpyArray& m = in.at("mask");
  std::vector<int64_t> full(q.shape.begin(), q.shape.end() - 1);
  full.push_back(seq_k);
  if (m.shape.empty() || m.shape.size() > full.size())
    throw Error(fmt::format("mask has shape {}; it must have 1 to {} dims, broadcastable to {}", m.shape_text(), full.size(),
                            ordo::NpyArray{q.dtype, full, {}}.shape_text()));
  std::vector<int64_t> shape(full.size() - m.shape.size(), 1);  // right-aligned, as broadcasting
  shape.insert(shape.end(), m.shape.begin(), m.shape.end());
  std::vector<bool> spans(full.size());
  for (size_t d = 0; d < full.size(); ++d) {
    if (shape[d] != 1 && shape[d] != full[d])
      throw Error(fmt::format("mask has shape {}, which does not broadcast to {} (each dim 1 or q's, the last S_k)", m.shape_text(),
                              ordo::NpyArray{q.dtype, full, {}}.shape_text()));
    spans[d] = shape[d] > 1;
  }
  const size_t lead = full.size() >= 3 ? full.size() - 3 : 0;
  const bool batch = std::any_of(spans.begin(), spans.begin() + static_cast<std::ptrdiff_t>(lead), [](bool b) { return b; });
  for (size_t d = 0; d < lead; ++d)
    if (batch && full[d] > 1 && !spans[d])
      throw Error(fmt::format("mask has shape {}: its batch dims must all be q's or all 1 (q is {})", m.shape_text(), q.shape_text()));
  ordo::AttentionMask mask;
  mask.dtype = m.dtype;
  mask.per_batch = batch;
  mask.per_head = full.size() >= 3 && spans[full.size() - 3];
  mask.per_query = spans[full.size() - 2];
  mask.per_key = spans[full.size() - 1];
  return mask;
}

// ordo run attention: q [..., S_q, D], k and v [..., S_k, D] with the same leading dims; out is
// shaped like q and lse like q without D.
int run_attention(const Args& a, ordo::Request r, int threads) {
  std::map<std::string, ordo::NpyArray> in = read_inputs(a, r.op, {"q", "k", "v", "mask"});
  for (const char* n : {"q", "k", "v"})
    if (!in.count(n)) throw Error(fmt::format("missing --in {}=FILE.npy", n));
  const ordo::NpyArray &q = in.at("q"), &k = in.at("k"), &v = in.at("v");
  for (const auto& [n, t] : in)
    if (n != "mask" && t.shape.size() < 2) throw Error(fmt::format("{} has shape {}; attention needs [..., S, D]", n, t.shape_text()));
  if (k.shape != v.shape) throw Error(fmt::format("k has shape {} but v has {}; they must match", k.shape_text(), v.shape_text()));
  if (!std::equal(q.shape.begin(), q.shape.end() - 2, k.shape.begin(), k.shape.end() - 2) || q.shape.size() != k.shape.size())
    throw Error(fmt::format("q {} and k {} differ in their leading (batch, head) dims", q.shape_text(), k.shape_text()));
  if (q.shape.back() != k.shape.back()) throw Error(fmt::format("q has D = {} but k has D = {}", q.shape.back(), k.shape.back()));
  if (q.dtype != k.dtype || q.dtype != v.dtype)
    throw Error(fmt::format("q, k and v must share one dtype; got {}, {}, {}", ordo::name(q.dtype), ordo::name(k.dtype), ordo::name(v.dtype)));
  r.cols = q.shape.back();
  r.seq_q = q.shape[q.shape.size() - 2];
  // With --sk launch the kernel takes k's S_k as a launch argument instead of being built for it.
  const int64_t seq_k = k.shape[k.shape.size() - 2];
  r.seq_k = r.seq_k_at_launch ? 0 : seq_k;
  r.x_dtype = q.dtype;
  r.heads = attention_heads(q);
  r.mask = mask_of(in, q, seq_k);
  int64_t rows = 1;
  for (size_t i = 0; i + 2 < q.shape.size(); ++i) rows *= q.shape[i];
  if (auto s = a.get("scale")) r.scale = parse_double("--scale", *s);
  r.causal = a.flag("causal");
  bool want_lse = false;
  for (const std::string& o : a.all("out")) want_lse |= name_file("out", o).first == "lse";
  r.lse_output = want_lse;
  ordo::KernelHandle kernel = ordo::compile(r);
  run_and_write(
      *kernel, in, output_files(a, *kernel), rows, threads,
      [&](const ordo::ArgSpec& s) { return s.name == "out" ? q.shape : std::vector<int64_t>(q.shape.begin(), q.shape.end() - 1); },
      r.seq_k_at_launch ? std::vector<int64_t>{seq_k} : std::vector<int64_t>{});
  return 0;
}

// ordo run attention_backward: q, out and dout [..., S_q, D], k and v [..., S_k, D] with the same
// leading dims and one dtype, lse [..., S_q] f32 (optional); dq like q, dk and dv like k. k and v
// may have fewer heads than q (dim -3, dividing q's): grouped-query attention (Request::kv_group).
int run_attention_backward(const Args& a, ordo::Request r, int threads) {
  const std::vector<std::string> names{"q", "k", "v", "out", "dout", "lse", "mask"};
  std::map<std::string, ordo::NpyArray> in = read_inputs(a, r.op, names);
  for (const char* n : {"q", "k", "v", "out", "dout"})
    if (!in.count(n)) throw Error(fmt::format("missing --in {}=FILE.npy", n));
  const ordo::NpyArray &q = in.at("q"), &k = in.at("k");
  for (const auto& [n, t] : in)
    if (n != "lse" && n != "mask" && t.shape.size() < 2)
      throw Error(fmt::format("{} has shape {}; attention_backward needs [..., S, D]", n, t.shape_text()));
  if (k.shape != in.at("v").shape)
    throw Error(fmt::format("k has shape {} but v has {}; they must match", k.shape_text(), in.at("v").shape_text()));
  for (const char* n : {"out", "dout"})
    if (in.at(n).shape != q.shape) throw Error(fmt::format("{} has shape {} but q has {}; they must match", n, in.at(n).shape_text(), q.shape_text()));
  // Grouped-query: the same leading dims but heads (dim -3), k's dividing q's.
  const size_t dims = q.shape.size();
  const bool grouped = dims >= 3 && k.shape.size() == dims && std::equal(q.shape.begin(), q.shape.end() - 3, k.shape.begin()) &&
                       k.shape[dims - 3] > 0 && q.shape[dims - 3] != k.shape[dims - 3] && q.shape[dims - 3] % k.shape[dims - 3] == 0;
  if (!grouped && (k.shape.size() != dims || !std::equal(q.shape.begin(), q.shape.end() - 2, k.shape.begin())))
    throw Error(fmt::format("q {} and k {} differ in their leading (batch, head) dims (k may have fewer heads, dim -3, dividing q's)",
                            q.shape_text(), k.shape_text()));
  if (q.shape.back() != k.shape.back()) throw Error(fmt::format("q has D = {} but k has D = {}", q.shape.back(), k.shape.back()));
  for (const char* n : {"k", "v", "out", "dout"})
    if (in.at(n).dtype != q.dtype)
      throw Error(fmt::format("{} is {} but q is {}; q, k, v, out and dout must share one dtype", n, ordo::name(in.at(n).dtype), ordo::name(q.dtype)));
  const std::vector<int64_t> per_query(q.shape.begin(), q.shape.end() - 1);
  if (in.count("lse")) {
    const ordo::NpyArray& lse = in.at("lse");
    if (lse.shape != per_query)
      throw Error(fmt::format("lse has shape {} but q has {}; lse has one value per query row of q", lse.shape_text(), q.shape_text()));
    if (lse.dtype != ordo::ScalarType::f32) throw Error(fmt::format("lse is {}; the forward's log-sum-exp is f32", ordo::name(lse.dtype)));
  }
  r.cols = q.shape.back();
  r.seq_q = q.shape[q.shape.size() - 2];
  r.seq_k = k.shape[k.shape.size() - 2];
  r.x_dtype = q.dtype;
  r.saved_stats = in.count("lse") > 0;
  r.heads = attention_heads(q);
  r.kv_group = grouped ? q.shape[dims - 3] / k.shape[dims - 3] : 1;
  r.mask = mask_of(in, q, r.seq_k);
  r.has_weight = r.has_bias = false;
  if (auto s = a.get("scale")) r.scale = parse_double("--scale", *s);
  r.causal = a.flag("causal");
  int64_t rows = 1;  // one per (batch, K/V head)
  for (size_t i = 0; i + 2 < k.shape.size(); ++i) rows *= k.shape[i];
  ordo::KernelHandle kernel = ordo::compile(r);
  run_and_write(*kernel, in, output_files(a, *kernel), rows, threads,
                [&](const ordo::ArgSpec& s) { return s.name == "dq" ? q.shape : k.shape; });
  return 0;
}

// The row-wise backward ops: dy and the forward's tensors in, dx and the weight gradients out.
// `data` is the forward input the shape comes from (x, or softmax's y); every per-element input
// must have its shape and dtype, per-row ones its leading dims, weight (N,).
int run_row_backward(const Args& a, ordo::Request r, int threads) {
  const ordo::OpKind op = r.op;
  const bool softmax = op == ordo::OpKind::softmax_backward || op == ordo::OpKind::log_softmax_backward;
  const std::string data = softmax ? "y" : "x";
  std::vector<std::string> names{"dy", data};
  std::vector<std::string> per_row;
  if (!softmax && op != ordo::OpKind::silu_backward && op != ordo::OpKind::gelu_tanh_backward &&
      op != ordo::OpKind::gelu_backward)
    names.push_back("weight");
  if (op == ordo::OpKind::layer_norm_backward) per_row = {"mean", "rstd"};
  if (op == ordo::OpKind::rms_norm_backward) per_row = {"rstd"};
  names.insert(names.end(), per_row.begin(), per_row.end());
  const std::map<std::string, ordo::NpyArray> in = read_inputs(a, op, names);
  for (const std::string& n : {std::string("dy"), data})
    if (!in.count(n)) throw Error(fmt::format("missing --in {}=FILE.npy", n));
  if (op == ordo::OpKind::layer_norm_backward)
    for (const char* n : {"mean", "rstd"})
      if (!in.count(n)) throw Error(fmt::format("missing --in {}=FILE.npy (layer_norm's saved statistic)", n));
  const ordo::NpyArray& x = in.at(data);
  const ordo::NpyArray& dy = in.at("dy");
  if (x.shape.empty()) throw Error(fmt::format("{} has shape (), it needs at least one dim", data));
  if (dy.shape != x.shape) throw Error(fmt::format("dy has shape {} but {} has {}; they must match", dy.shape_text(), data, x.shape_text()));
  if (dy.dtype != x.dtype)
    throw Error(fmt::format("dy is {} but {} is {}; they must match", ordo::name(dy.dtype), data, ordo::name(x.dtype)));
  r.cols = x.shape.back();
  r.x_dtype = x.dtype;
  const std::vector<int64_t> leading(x.shape.begin(), x.shape.end() - 1);
  for (const std::string& n : per_row)
    if (in.count(n) && in.at(n).shape != leading && in.at(n).elements() != x.elements() / std::max<int64_t>(1, r.cols))
      throw Error(fmt::format("{} has shape {} but {} has {}; a saved statistic has one value per row of {}", n, in.at(n).shape_text(), data,
                              x.shape_text(), data));
  if (per_row.size() == 2 && in.at("mean").dtype != in.at("rstd").dtype)
    throw Error(fmt::format("mean is {} but rstd is {}; they must match", ordo::name(in.at("mean").dtype), ordo::name(in.at("rstd").dtype)));
  r.saved_stats = op != ordo::OpKind::rms_norm_backward || in.count("rstd");
  r.has_weight = in.count("weight") > 0;
  if (r.has_weight) {
    const ordo::NpyArray& w = in.at("weight");
    if (w.shape.size() != 1 || w.shape[0] != r.cols)
      throw Error(fmt::format("weight has shape {}, expected ({},) to match N of {} {}", w.shape_text(), r.cols, data, x.shape_text()));
    r.weight_dtype = w.dtype;
  }
  // dbias is computed when asked for; dweight needs the weight.
  r.has_bias = false;
  for (const std::string& o : a.all("out")) {
    const std::string n = name_file("out", o).first;
    r.has_bias |= n == "dbias" && op == ordo::OpKind::layer_norm_backward;
    if (n == "dweight" && !r.has_weight) throw Error("--out dweight needs --in weight=FILE.npy (no weight, no weight gradient)");
  }
  const int64_t rows = r.cols == 0 ? 0 : x.elements() / r.cols;
  ordo::KernelHandle k = ordo::compile(r);
  run_and_write(*k, in, output_files(a, *k), rows, threads, [&](const ordo::ArgSpec& s) {
    return s.extent == ordo::ArgExtent::rows_by_cols ? x.shape : s.extent == ordo::ArgExtent::cols ? std::vector<int64_t>{r.cols} : leading;
  });
  return 0;
}

// cross_entropy's class indices: int64, one per row of the logits, each in [0, classes) or
// ignore_index (PyTorch raises for any other; the kernel would make that row's loss NaN).
void check_targets(const ordo::NpyArray& target, int64_t rows, int64_t classes, int64_t ignore_index) {
  if (target.dtype != ordo::ScalarType::i64) throw Error(fmt::format("target is {}; class indices are int64 ('<i8')", ordo::name(target.dtype)));
  if (target.shape != std::vector<int64_t>{rows})
    throw Error(fmt::format("target has shape {}; logits of {} rows need ({},)", target.shape_text(), rows, rows));
  const auto* t = reinterpret_cast<const int64_t*>(target.data.data());
  for (int64_t i = 0; i < rows; ++i)
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= classes))
      throw Error(fmt::format("target[{}] = {} is out of bounds: not in [0, {}) and not --ignore-index ({})", i, t[i], classes, ignore_index));
}

// ordo run cross_entropy: logits x (rows, classes) and target (rows,) int64 in; logp like x, loss
// (a scalar, or one per row under --reduction none) and total_weight (a scalar) out.
// cross_entropy_backward: dloss (the loss's shape), logp, target, total_weight in; dx like logp.
int run_cross_entropy(const Args& a, ordo::Request r, int threads) {
  const bool backward = r.op == ordo::OpKind::cross_entropy_backward;
  const std::string data = backward ? "logp" : "x";
  const std::vector<std::string> names = backward ? std::vector<std::string>{"dloss", "logp", "target", "total_weight"}
                                                  : std::vector<std::string>{"x", "target"};
  const std::map<std::string, ordo::NpyArray> in = read_inputs(a, r.op, names);
  for (const std::string& n : names)
    if (!in.count(n)) throw Error(fmt::format("missing --in {}=FILE.npy", n));
  const ordo::NpyArray& x = in.at(data);
  if (x.shape.size() != 2) throw Error(fmt::format("{} has shape {}; {} takes 2-D logits (rows, classes)", data, x.shape_text(), ordo::name(r.op)));
  const int64_t rows = x.shape[0];
  r.cols = x.shape[1];
  r.x_dtype = x.dtype;
  check_targets(in.at("target"), rows, r.cols, r.ignore_index);
  const std::vector<int64_t> loss_shape = r.reduction == ordo::LossReduction::none ? std::vector<int64_t>{rows} : std::vector<int64_t>{};
  if (backward) {
    const ordo::NpyArray &dloss = in.at("dloss"), &total = in.at("total_weight");
    if (dloss.shape != loss_shape)
      throw Error(fmt::format("dloss has shape {}; the loss under --reduction {} has {}", dloss.shape_text(), ordo::name(r.reduction),
                              ordo::NpyArray{dloss.dtype, loss_shape, {}}.shape_text()));
    if (total.elements() != 1) throw Error(fmt::format("total_weight has shape {}; it holds one value", total.shape_text()));
    for (const char* n : {"dloss", "total_weight"})
      if (in.at(n).dtype != x.dtype)
        throw Error(fmt::format("{} is {} but logp is {}; they must match", n, ordo::name(in.at(n).dtype), ordo::name(x.dtype)));
  }
  r.has_weight = r.has_bias = false;
  ordo::KernelHandle k = ordo::compile(r);
  run_and_write(*k, in, output_files(a, *k), rows, threads, [&](const ordo::ArgSpec& s) {
    return s.extent == ordo::ArgExtent::rows_by_cols ? x.shape : s.name == "loss" ? loss_shape : std::vector<int64_t>{};
  });
  return 0;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  std::vector<std::string> values = kRequestValues;
  values.insert(values.end(), {"in", "out", "threads", "scale"});
  Args a = Args::parse(argc, argv, 2, kRequestFlags, values);
  const ordo::OpKind op = parse_op_arg(a);
  // --sk launch is not a shape: it asks for the kernel that takes S_k (from k) at launch.
  const bool sk_at_launch = a.get("sk") && *a.get("sk") == "launch";
  if (a.get("sq") || (a.get("sk") && !sk_at_launch) || a.get("heads") || a.get("kv-group") || a.flag("lse") || a.get("mask"))
    throw Error("ordo run takes attention's shape from the --in files (grouped-query: k with fewer heads than q; a mask from --in "
                "mask=) and writes lse when --out lse= names it; drop --sq/--sk/--heads/--kv-group/--lse/--mask "
                "(--sk launch is the exception: one kernel for every S_k)");
  if (ordo::forward_of(op) != ordo::OpKind::attention && (a.get("scale") || a.flag("causal")))
    throw Error(fmt::format("--scale and --causal are attention's; {} takes neither", ordo::name(op)));
  // --cols launch, likewise, asks for the kernel that takes N (from x) at launch.
  const bool cols_at_launch = a.get("cols") && *a.get("cols") == "launch";
  if ((a.get("cols") && !cols_at_launch) || a.get("dtype") || a.get("weight-dtype") || a.flag("no-weight") || a.flag("no-bias"))
    throw Error("ordo run takes N, dtypes and which inputs exist from the --in files; drop --cols/--dtype/--weight-dtype/--no-weight/--no-bias "
                "(--cols launch is the exception: one kernel for every N)");
  ordo::Request r = request_from(a, op);
  if (!a.get("order")) throw Error("missing --order NAME (see `ordo orders`)");
  const int threads = a.get("threads") ? static_cast<int>(parse_int("--threads", *a.get("threads"), 0, 1024)) : 0;
  if (op == ordo::OpKind::attention) return run_attention(a, r, threads);
  if (op == ordo::OpKind::attention_backward) return run_attention_backward(a, r, threads);
  if (ordo::forward_of(op) == ordo::OpKind::cross_entropy) return run_cross_entropy(a, r, threads);
  if (ordo::is_backward(op)) return run_row_backward(a, r, threads);

  const std::map<std::string, ordo::NpyArray> inputs =
      read_inputs(a, op, op == ordo::OpKind::layer_norm ? std::vector<std::string>{"x", "weight", "bias"}
                         : op == ordo::OpKind::rms_norm ? std::vector<std::string>{"x", "weight"}
                                                        : std::vector<std::string>{"x"});
  if (!inputs.count("x")) throw Error("missing --in x=FILE.npy");
  const ordo::NpyArray& x = inputs.at("x");
  if (x.shape.empty()) throw Error(fmt::format("x has shape (), it needs at least one dim"));
  const int64_t cols = x.shape.back();
  r.cols = r.cols_at_launch ? 0 : cols;
  r.x_dtype = x.dtype;
  const int64_t rows = cols == 0 ? 0 : x.elements() / cols;
  r.has_weight = inputs.count("weight") > 0;
  r.has_bias = inputs.count("bias") > 0;
  for (const char* n : {"weight", "bias"}) {
    if (!inputs.count(n)) continue;
    const ordo::NpyArray& w = inputs.at(n);
    if (w.shape.size() != 1 || w.shape[0] != cols)
      throw Error(fmt::format("{} has shape {}, expected ({},) to match N of x {}", n, w.shape_text(), cols, x.shape_text()));
  }
  if (r.has_weight) r.weight_dtype = inputs.at("weight").dtype;
  if (r.has_bias) {
    if (r.has_weight && inputs.at("bias").dtype != inputs.at("weight").dtype)
      throw Error(fmt::format("weight is {} but bias is {}; they must match", ordo::name(inputs.at("weight").dtype),
                              ordo::name(inputs.at("bias").dtype)));
    r.weight_dtype = inputs.at("bias").dtype;
  }

  ordo::KernelHandle k = ordo::compile(r);
  run_and_write(
      *k, inputs, output_files(a, *k), rows, threads,
      [&](const ordo::ArgSpec& s) {
        return s.extent == ordo::ArgExtent::rows_by_cols ? x.shape : std::vector<int64_t>(x.shape.begin(), x.shape.end() - 1);
      },
      r.cols_at_launch ? std::vector<int64_t>{cols} : std::vector<int64_t>{});
  return 0;
}

}  // namespace ordo::cli
