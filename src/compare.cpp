#include "ordo/compare.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>

#include "ir/error.hpp"
#include "ir/float_bits.hpp"

namespace ordo {

std::vector<BufferRef> HostBuffers::refs(int64_t rows, int64_t cols) {
  std::vector<BufferRef> out;
  for (size_t i = 0; i < args.size(); ++i) out.push_back(BufferRef{bytes[i].data(), args[i].elements(rows, cols), args[i].dtype});
  return out;
}
const std::vector<uint8_t>& HostBuffers::get(const std::string& name) const {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].name == name) return bytes[i];
  throw Error("no buffer named " + name);
}
std::vector<uint8_t>& HostBuffers::get(const std::string& name) {
  return const_cast<std::vector<uint8_t>&>(static_cast<const HostBuffers&>(*this).get(name));
}

namespace {
uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
void put(ScalarType t, uint8_t* data, int64_t i, double v) {
  switch (t) {
    case ScalarType::f32: { float f = static_cast<float>(v); std::memcpy(data + 4 * i, &f, 4); break; }
    case ScalarType::f64: std::memcpy(data + 8 * i, &v, 8); break;
    case ScalarType::bf16: { uint16_t h = f32_to_bf16_bits(static_cast<float>(v)); std::memcpy(data + 2 * i, &h, 2); break; }
    case ScalarType::f16: { uint16_t h = f32_to_f16_bits(static_cast<float>(v)); std::memcpy(data + 2 * i, &h, 2); break; }
    default: break;
  }
}
uint64_t bits_at(ScalarType t, const uint8_t* data, int64_t i) {
  if (size_bytes(t) == 4) { uint32_t b; std::memcpy(&b, data + 4 * i, 4); return b; }
  if (size_bytes(t) == 8) { uint64_t b; std::memcpy(&b, data + 8 * i, 8); return b; }
  uint16_t b; std::memcpy(&b, data + 2 * i, 2); return b;
}
int64_t ordered(ScalarType t, uint64_t bits) {
  const int width = 8 * size_bytes(t);
  const uint64_t sign = uint64_t(1) << (width - 1);
  return (bits & sign) ? -static_cast<int64_t>(bits & (sign - 1)) : static_cast<int64_t>(bits);
}
}  // namespace

std::vector<uint8_t> random_values(ScalarType t, int64_t n, uint64_t seed, double offset, double scale) {
  std::vector<uint8_t> out(static_cast<size_t>(n * size_bytes(t)));
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = (static_cast<double>(splitmix64(s) >> 11) + 1.0) * 0x1p-53;
    double u2 = static_cast<double>(splitmix64(s) >> 11) * 0x1p-53;
    double r = std::sqrt(-2.0 * std::log(u1));
    put(t, out.data(), i, offset + scale * r * std::cos(2 * M_PI * u2));
    if (i + 1 < n) put(t, out.data(), i + 1, offset + scale * r * std::sin(2 * M_PI * u2));
  }
  return out;
}

namespace {

// cross_entropy's target: a class index in [0, N) per row, uniform, with every fourth row
// ignore_index (not counted).
std::vector<uint8_t> class_indices(const Request& r, int64_t rows, uint64_t seed) {
  std::vector<uint8_t> out(static_cast<size_t>(rows) * 8);
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = i % 4 == 3 ? r.ignore_index : static_cast<int64_t>(splitmix64(s) % static_cast<uint64_t>(std::max<int64_t>(r.cols, 1)));
    std::memcpy(out.data() + 8 * i, &t, 8);
  }
  return out;
}

void store_value(ScalarType t, uint8_t* data, int64_t i, double v) {
  const float f = static_cast<float>(v);
  if (t == ScalarType::f32) {
    std::memcpy(data + 4 * i, &f, 4);
  } else {
    const uint16_t h = t == ScalarType::bf16 ? f32_to_bf16_bits(f) : f32_to_f16_bits(f);
    std::memcpy(data + 2 * i, &h, 2);
  }
}

// A backward op's inputs that its forward saved are made the forward's, from the random x (or
// softmax's input): mean and rstd of each row (layer_norm: eps 1e-5; rms_norm's rstd of the mean
// square), and softmax's y (log_softmax's), computed in float64 and rounded to their types.
std::map<std::string, std::vector<double>> attention_f64(const Request& r, const HostBuffers& in, int64_t rows);

void forward_outputs(const Request& r, HostBuffers& h, int64_t rows) {
  const int64_t N = r.cols;
  auto find = [&](const char* name) -> std::vector<uint8_t>* {
    for (size_t i = 0; i < h.args.size(); ++i)
      if (!h.args[i].output && h.args[i].name == name) return &h.bytes[i];
    return nullptr;
  };
  auto type_of = [&](const char* name) {
    for (const ArgSpec& a : h.args)
      if (a.name == name) return a.dtype;
    return ScalarType::f32;
  };
  if (r.op == OpKind::layer_norm_backward || r.op == OpKind::rms_norm_backward) {
    const std::vector<uint8_t>& x = *find("x");
    std::vector<uint8_t>* mean = find("mean");
    std::vector<uint8_t>* rstd = find("rstd");
    for (int64_t row = 0; row < rows; ++row) {
      double sum = 0, sq = 0;
      for (int64_t j = 0; j < N; ++j) {
        const double v = value_at(r.x_dtype, x.data(), row * N + j);
        sum += v;
        sq += v * v;
      }
      double m2 = 0;
      for (int64_t j = 0; j < N; ++j) {
        const double d = value_at(r.x_dtype, x.data(), row * N + j) - sum / N;
        m2 += d * d;
      }
      if (mean) store_value(type_of("mean"), mean->data(), row, sum / N);
      if (rstd)
        store_value(type_of("rstd"), rstd->data(), row,
                    1.0 / std::sqrt((r.op == OpKind::layer_norm_backward ? m2 / N : sq / N) + static_cast<double>(static_cast<float>(r.eps))));
    }
  }
  if (r.op == OpKind::attention_backward) {  // out and lse of the float64 forward, out rounded to q's type
    std::map<std::string, std::vector<double>> f = attention_f64(r, h, rows);
    std::vector<uint8_t>& out = *find("out");
    for (size_t i = 0; i < f["out"].size(); ++i) store_value(r.x_dtype, out.data(), int64_t(i), f["out"][i]);
    if (std::vector<uint8_t>* lse = find("lse"))
      for (size_t i = 0; i < f["lse"].size(); ++i) store_value(ScalarType::f32, lse->data(), int64_t(i), f["lse"][i]);
  }
  if (r.op == OpKind::cross_entropy_backward) {  // logp: log_softmax of the random logits; total_weight: the rows counted
    std::vector<uint8_t>& logp = *find("logp");
    for (int64_t row = 0; row < rows; ++row) {
      double mx = -INFINITY, s = 0;
      for (int64_t j = 0; j < N; ++j) mx = std::max(mx, value_at(r.x_dtype, logp.data(), row * N + j));
      for (int64_t j = 0; j < N; ++j) s += std::exp(value_at(r.x_dtype, logp.data(), row * N + j) - mx);
      for (int64_t j = 0; j < N; ++j)
        store_value(r.x_dtype, logp.data(), row * N + j, value_at(r.x_dtype, logp.data(), row * N + j) - mx - std::log(s));
    }
    const auto* t = reinterpret_cast<const int64_t*>(find("target")->data());
    int64_t counted = 0;
    for (int64_t row = 0; row < rows; ++row) counted += t[row] != r.ignore_index;
    store_value(r.x_dtype, find("total_weight")->data(), 0, static_cast<double>(counted));
  }
  if (r.op == OpKind::softmax_backward || r.op == OpKind::log_softmax_backward) {
    std::vector<uint8_t>& y = *find("y");
    for (int64_t row = 0; row < rows; ++row) {
      double mx = -INFINITY, s = 0;
      for (int64_t j = 0; j < N; ++j) mx = std::max(mx, value_at(r.x_dtype, y.data(), row * N + j));
      for (int64_t j = 0; j < N; ++j) s += std::exp(value_at(r.x_dtype, y.data(), row * N + j) - mx);
      for (int64_t j = 0; j < N; ++j) {
        const double d = value_at(r.x_dtype, y.data(), row * N + j) - mx;
        store_value(r.x_dtype, y.data(), row * N + j, r.op == OpKind::softmax_backward ? std::exp(d) / s : d - std::log(s));
      }
    }
  }
}

}  // namespace

HostBuffers make_buffers(const CompiledKernel& k, int64_t rows, uint64_t seed, double offset, double scale) {
  HostBuffers h;
  h.args = k.args();
  const int64_t cols = k.request().cols;
  // Refuse, before allocating, a launch whose buffers could not fit in this machine's memory:
  // the allocation would fail with std::bad_alloc, or succeed (overcommit) and be killed later.
  if (rows < 0) throw Error(fmt::format("rows must be >= 0, got {}", rows));
  if (rows > 0 && cols > kMaxElements / rows)
    throw Error(fmt::format("rows={} with N={}: rows*N exceeds the {} elements a launch may have", rows, cols, kMaxElements));
  double total = 0;  // bytes of every buffer; a double, as a sum of int64_t could overflow
  for (const ArgSpec& a : h.args) total += static_cast<double>(a.elements(rows, cols)) * size_bytes(a.dtype);
  const double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  if (physical > 0 && total > physical)
    throw Error(fmt::format("rows={} with N={} needs {:.1f} GiB of buffers; this machine has {:.1f} GiB of memory", rows, cols,
                            total / (1 << 30), physical / (1 << 30)));
  for (size_t i = 0; i < h.args.size(); ++i) {
    const ArgSpec& a = h.args[i];
    const int64_t n = a.elements(rows, cols);
    if (a.output) h.bytes.emplace_back(static_cast<size_t>(n * size_bytes(a.dtype)), 0);
    else if (a.name == "weight") h.bytes.push_back(random_values(a.dtype, n, seed + 101, 1.0, 0.1));
    else if (a.name == "bias") h.bytes.push_back(random_values(a.dtype, n, seed + 202, 0.0, 0.1));
    else if (a.dtype == ScalarType::i64) h.bytes.push_back(class_indices(k.request(), n, seed + 303));
    else h.bytes.push_back(random_values(a.dtype, n, seed + 7919 * i, offset, scale));  // x (i = 0) keeps `seed`
  }
  forward_outputs(k.request(), h, rows);
  return h;
}

double value_at(ScalarType t, const uint8_t* data, int64_t i) {
  uint64_t b = bits_at(t, data, i);
  switch (t) {
    case ScalarType::f32: return std::bit_cast<float>(static_cast<uint32_t>(b));
    case ScalarType::f64: return std::bit_cast<double>(b);
    case ScalarType::bf16: return bf16_bits_to_f32(static_cast<uint16_t>(b));
    case ScalarType::f16: return f16_bits_to_f32(static_cast<uint16_t>(b));
    default: return 0;
  }
}

bool same_bits(ScalarType t, const uint8_t* a, const uint8_t* b, int64_t i) {
  double x = value_at(t, a, i), y = value_at(t, b, i);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  return bits_at(t, a, i) == bits_at(t, b, i);
}

int64_t ulp_distance(ScalarType t, const uint8_t* a, const uint8_t* b, int64_t i) {
  double x = value_at(t, a, i), y = value_at(t, b, i);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y) ? 0 : -1;
  int64_t d = ordered(t, bits_at(t, a, i)) - ordered(t, bits_at(t, b, i));
  return d < 0 ? -d : d;
}

int64_t count_identical(ScalarType t, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  const int64_t n = static_cast<int64_t>(std::min(a.size(), b.size()) / static_cast<size_t>(size_bytes(t)));
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += same_bits(t, a.data(), b.data(), i);
  return same;
}

namespace {
// The additive mask (Request::mask) at launch row bh (one (batch, head)), query i, key j, as a
// double; 0 without a mask. A row is one (batch, head) here: the float64 references take no
// grouped-query launch.
double mask_at(const Request& r, const HostBuffers& in, int64_t bh, int64_t i, int64_t j) {
  if (!r.mask) return 0;
  const AttentionMask& m = *r.mask;
  const int64_t keys = m.per_key ? r.seq_k : 1, per_head = (m.per_query ? r.seq_q : 1) * keys;
  const int64_t batch = bh / r.heads, head = bh % r.heads;
  const int64_t at = ((m.per_batch ? batch * (m.per_head ? r.heads : 1) : 0) + (m.per_head ? head : 0)) * per_head +
                     (m.per_query ? i : 0) * keys + (m.per_key ? j : 0);
  return value_at(m.dtype, in.get("mask").data(), at);
}

// Attention in float64 from the stored inputs: exact scaling, the causal or additive mask,
// softmax, P @ v. A row whose every key is masked gets PyTorch's out 0 and lse 0.
std::map<std::string, std::vector<double>> attention_f64(const Request& r, const HostBuffers& in, int64_t rows) {
  const int64_t D = r.cols, Sq = r.seq_q, Sk = r.seq_k;
  const ScalarType t = r.x_dtype;
  const uint8_t *q = in.get("q").data(), *k = in.get("k").data(), *v = in.get("v").data();
  const double scale = r.scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  std::map<std::string, std::vector<double>> out;
  std::vector<double> s(static_cast<size_t>(Sk));
  for (int64_t bh = 0; bh < rows; ++bh)
    for (int64_t i = 0; i < Sq; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < Sk; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += value_at(t, q, (bh * Sq + i) * D + d) * value_at(t, k, (bh * Sk + j) * D + d);
        s[size_t(j)] = r.causal && j > i ? -INFINITY : dot * scale + mask_at(r, in, bh, i, j);
        mx = std::max(mx, s[size_t(j)]);
      }
      if (mx == -INFINITY) {
        out["out"].insert(out["out"].end(), size_t(D), 0.0);
        out["lse"].push_back(0.0);
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < Sk; ++j) {  // the scores become their exponentials
        s[size_t(j)] = std::exp(s[size_t(j)] - mx);
        sum += s[size_t(j)];
      }
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t j = 0; j < Sk; ++j) o += s[size_t(j)] / sum * value_at(t, v, (bh * Sk + j) * D + d);
        out["out"].push_back(o);
      }
      out["lse"].push_back(mx + std::log(sum));
    }
  return out;
}

// attention_backward in float64 from q, k, v and dout alone: P from the exact scores (the given
// out and lse are not read), D_i = dout_i . out_i with out = P v, dS = P (dout v^T - D),
// dv = P^T dout, dk = scale dS^T q, dq = scale dS k.
std::map<std::string, std::vector<double>> attention_backward_f64(const Request& r, const HostBuffers& in, int64_t rows) {
  const int64_t D = r.cols, Sq = r.seq_q, Sk = r.seq_k;
  const ScalarType t = r.x_dtype;
  const uint8_t *q = in.get("q").data(), *k = in.get("k").data(), *v = in.get("v").data(), *g = in.get("dout").data();
  const double scale = r.scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  std::map<std::string, std::vector<double>> res;
  std::vector<double>& dq = res["dq"];
  std::vector<double>& dk = res["dk"];
  std::vector<double>& dv = res["dv"];
  dq.assign(size_t(rows * Sq * D), 0.0);
  dk.assign(size_t(rows * Sk * D), 0.0);
  dv.assign(size_t(rows * Sk * D), 0.0);
  std::vector<double> p(static_cast<size_t>(Sk)), o(static_cast<size_t>(D));
  for (int64_t bh = 0; bh < rows; ++bh)
    for (int64_t i = 0; i < Sq; ++i) {
      const int64_t qi = (bh * Sq + i) * D;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < Sk; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += value_at(t, q, qi + d) * value_at(t, k, (bh * Sk + j) * D + d);
        p[size_t(j)] = r.causal && j > i ? -INFINITY : dot * scale + mask_at(r, in, bh, i, j);
        mx = std::max(mx, p[size_t(j)]);
      }
      if (mx == -INFINITY) continue;  // every key masked: no gradient
      for (int64_t j = 0; j < Sk; ++j) {
        p[size_t(j)] = std::exp(p[size_t(j)] - mx);
        sum += p[size_t(j)];
      }
      for (int64_t j = 0; j < Sk; ++j) p[size_t(j)] /= sum;
      double di = 0;
      for (int64_t d = 0; d < D; ++d) {
        o[size_t(d)] = 0;
        for (int64_t j = 0; j < Sk; ++j) o[size_t(d)] += p[size_t(j)] * value_at(t, v, (bh * Sk + j) * D + d);
        di += value_at(t, g, qi + d) * o[size_t(d)];
      }
      for (int64_t j = 0; j < Sk; ++j) {
        const int64_t kj = (bh * Sk + j) * D;
        double dp = 0;
        for (int64_t d = 0; d < D; ++d) dp += value_at(t, g, qi + d) * value_at(t, v, kj + d);
        const double ds = p[size_t(j)] * (dp - di);
        for (int64_t d = 0; d < D; ++d) {
          dv[size_t(kj + d)] += p[size_t(j)] * value_at(t, g, qi + d);
          dk[size_t(kj + d)] += scale * ds * value_at(t, q, qi + d);
          dq[size_t(qi + d)] += scale * ds * value_at(t, k, kj + d);
        }
      }
    }
  return res;
}
}  // namespace

// layer_norm_backward in float64 from the given mean and rstd: xhat = (x - mean)*rstd, wdy = dy*w,
// dx = rstd*(wdy - mean(wdy) - xhat*mean(wdy*xhat)), dweight = sum over rows of dy*xhat, dbias of dy.
std::map<std::string, std::vector<double>> layer_norm_backward_f64(const Request& r, const HostBuffers& in, int64_t rows) {
  const int64_t N = r.cols;
  const ScalarType xt = r.x_dtype, wt = r.weight_type();
  auto has = [&](const char* n) {
    for (const ArgSpec& a : in.args)
      if (a.name == n) return true;
    return false;
  };
  const ArgSpec* stats = nullptr;
  for (const ArgSpec& a : in.args)
    if (a.name == "mean") stats = &a;
  const uint8_t *x = in.get("x").data(), *dy = in.get("dy").data(), *mean = in.get("mean").data(), *rstd = in.get("rstd").data();
  const uint8_t* w = has("weight") ? in.get("weight").data() : nullptr;
  std::map<std::string, std::vector<double>> out;
  std::vector<double> dw(size_t(N), 0.0), db(size_t(N), 0.0);
  for (int64_t row = 0; row < rows; ++row) {
    const double mu = value_at(stats->dtype, mean, row), rs = value_at(stats->dtype, rstd, row);
    double s1 = 0, s2 = 0;
    for (int64_t j = 0; j < N; ++j) {
      const double g = value_at(xt, dy, row * N + j) * (w ? value_at(wt, w, j) : 1.0);
      const double xhat = (value_at(xt, x, row * N + j) - mu) * rs;
      s1 += g;
      s2 += g * xhat;
      dw[size_t(j)] += value_at(xt, dy, row * N + j) * xhat;
      db[size_t(j)] += value_at(xt, dy, row * N + j);
    }
    for (int64_t j = 0; j < N; ++j) {
      const double g = value_at(xt, dy, row * N + j) * (w ? value_at(wt, w, j) : 1.0);
      const double xhat = (value_at(xt, x, row * N + j) - mu) * rs;
      out["dx"].push_back(rs * (g - s1 / N - xhat * (s2 / N)));
    }
  }
  if (has("dweight")) out["dweight"] = dw;
  if (has("dbias")) out["dbias"] = db;
  return out;
}

// softmax_backward and log_softmax_backward in float64 from the given y: softmax
// dx = (dy - sum(dy*y))*y, log_softmax dx = dy - exp(y)*sum(dy).
std::map<std::string, std::vector<double>> softmax_backward_f64(const Request& r, const HostBuffers& in, int64_t rows) {
  const int64_t N = r.cols;
  const ScalarType t = r.x_dtype;
  const bool log = r.op == OpKind::log_softmax_backward;
  const uint8_t *dy = in.get("dy").data(), *y = in.get("y").data();
  std::map<std::string, std::vector<double>> out;
  std::vector<double>& dx = out["dx"];
  for (int64_t row = 0; row < rows; ++row) {
    double s = 0;
    for (int64_t j = row * N; j < (row + 1) * N; ++j) s += log ? value_at(t, dy, j) : value_at(t, dy, j) * value_at(t, y, j);
    for (int64_t j = row * N; j < (row + 1) * N; ++j)
      dx.push_back(log ? value_at(t, dy, j) - std::exp(value_at(t, y, j)) * s : (value_at(t, dy, j) - s) * value_at(t, y, j));
  }
  return out;
}

// rms_norm_backward in float64, from the given rstd r (or one recomputed from x with eps):
// g = dy*w, dx = r*g - x*(r^3/N)*sum(g*x), dweight = sum over rows of dy*x*r.
std::map<std::string, std::vector<double>> rms_norm_backward_f64(const Request& r, const HostBuffers& in, int64_t rows) {
  const int64_t N = r.cols;
  const ScalarType xt = r.x_dtype, wt = r.weight_type();
  const ArgSpec* rstd_arg = nullptr;
  bool has_weight = false;
  for (const ArgSpec& a : in.args) {
    if (a.name == "rstd" && !a.output) rstd_arg = &a;
    has_weight |= a.name == "weight";
  }
  const uint8_t *x = in.get("x").data(), *dy = in.get("dy").data();
  const uint8_t* w = has_weight ? in.get("weight").data() : nullptr;
  std::map<std::string, std::vector<double>> out;
  std::vector<double> dw(size_t(N), 0.0);
  for (int64_t row = 0; row < rows; ++row) {
    double rs = 0;
    if (rstd_arg) {
      rs = value_at(rstd_arg->dtype, in.get("rstd").data(), row);
    } else {
      double sq = 0;
      for (int64_t j = 0; j < N; ++j) sq += value_at(xt, x, row * N + j) * value_at(xt, x, row * N + j);
      rs = 1.0 / std::sqrt(sq / N + static_cast<double>(static_cast<float>(r.eps)));
      out["rstd"].push_back(rs);
    }
    double gx = 0;
    for (int64_t j = 0; j < N; ++j)
      gx += value_at(xt, dy, row * N + j) * (w ? value_at(wt, w, j) : 1.0) * value_at(xt, x, row * N + j);
    for (int64_t j = 0; j < N; ++j) {
      const double xv = value_at(xt, x, row * N + j), g = value_at(xt, dy, row * N + j) * (w ? value_at(wt, w, j) : 1.0);
      out["dx"].push_back(rs * g - xv * (rs * rs * rs / N) * gx);
      dw[size_t(j)] += value_at(xt, dy, row * N + j) * xv * rs;
    }
  }
  if (has_weight) out["dweight"] = dw;
  return out;
}

// cross_entropy in float64: logp = log_softmax(x), each counted row's -logp[t], reduced as the
// request says (mean over the rows counted); its backward from the given logp: dx = g*onehot(t) -
// exp(logp)*g, g = -dloss/total_weight (mean), -dloss (sum) or -dloss[row] (none), 0 if ignored.
std::map<std::string, std::vector<double>> cross_entropy_f64(const Request& r, const HostBuffers& in, int64_t rows) {
  const int64_t N = r.cols;
  const ScalarType t = r.x_dtype;
  const auto* target = reinterpret_cast<const int64_t*>(in.get("target").data());
  std::map<std::string, std::vector<double>> out;
  if (r.op == OpKind::cross_entropy_backward) {
    const uint8_t *logp = in.get("logp").data(), *dloss = in.get("dloss").data();
    const double total = value_at(t, in.get("total_weight").data(), 0);
    for (int64_t row = 0; row < rows; ++row) {
      const bool counted = target[row] != r.ignore_index;
      const double g = !counted ? 0.0
                       : r.reduction == LossReduction::none ? -value_at(t, dloss, row)
                       : r.reduction == LossReduction::sum  ? -value_at(t, dloss, 0)
                                                            : -value_at(t, dloss, 0) / total;
      for (int64_t j = 0; j < N; ++j)
        out["dx"].push_back((counted && j == target[row] ? g : 0.0) - std::exp(value_at(t, logp, row * N + j)) * g);
    }
    return out;
  }
  const uint8_t* x = in.get("x").data();
  double total = 0;
  int64_t counted = 0;
  for (int64_t row = 0; row < rows; ++row) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < N; ++j) mx = std::max(mx, value_at(t, x, row * N + j));
    for (int64_t j = 0; j < N; ++j) s += std::exp(value_at(t, x, row * N + j) - mx);
    for (int64_t j = 0; j < N; ++j) out["logp"].push_back(value_at(t, x, row * N + j) - mx - std::log(s));
    const bool counts = target[row] != r.ignore_index;
    const double term = counts ? -out["logp"][size_t(row * N + target[row])] : 0.0;
    if (r.reduction == LossReduction::none) out["loss"].push_back(term);
    total += term;
    counted += counts;
  }
  if (r.reduction != LossReduction::none) out["loss"].push_back(r.reduction == LossReduction::mean ? total / double(counted) : total);
  out["total_weight"].push_back(r.reduction == LossReduction::none ? 0.0 : double(counted));
  return out;
}

std::map<std::string, std::vector<double>> reference_f64(const Request& r, const HostBuffers& in, int64_t rows) {
  if (r.op == OpKind::attention) return attention_f64(r, in, rows);
  if (forward_of(r.op) == OpKind::cross_entropy) return cross_entropy_f64(r, in, rows);
  if (r.op == OpKind::layer_norm_backward) return layer_norm_backward_f64(r, in, rows);
  if (r.op == OpKind::rms_norm_backward) return rms_norm_backward_f64(r, in, rows);
  if (r.op == OpKind::softmax_backward || r.op == OpKind::log_softmax_backward) return softmax_backward_f64(r, in, rows);
  if (r.op == OpKind::attention_backward) return attention_backward_f64(r, in, rows);
  if (r.op == OpKind::gelu_tanh_backward) {
    const uint8_t* x = in.get("x").data();
    const uint8_t* dy = in.get("dy").data();
    const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
    std::map<std::string, std::vector<double>> out;
    for (int64_t i = 0; i < rows * r.cols; ++i) {
      const double v = value_at(r.x_dtype, x, i), t = std::tanh(k * (v + c * v * v * v));
      out["dx"].push_back(value_at(r.x_dtype, dy, i) * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * c * v * v)));
    }
    return out;
  }
  if (r.op == OpKind::gelu_backward) {
    const uint8_t* x = in.get("x").data();
    const uint8_t* dy = in.get("dy").data();
    std::map<std::string, std::vector<double>> out;
    for (int64_t i = 0; i < rows * r.cols; ++i) {
      const double v = value_at(r.x_dtype, x, i);
      const double cdf = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))), pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
      out["dx"].push_back(value_at(r.x_dtype, dy, i) * (cdf + v * pdf));
    }
    return out;
  }
  if (r.op == OpKind::silu_backward) {
    const uint8_t* x = in.get("x").data();
    const uint8_t* dy = in.get("dy").data();
    std::map<std::string, std::vector<double>> out;
    for (int64_t i = 0; i < rows * r.cols; ++i) {
      const double v = value_at(r.x_dtype, x, i), s = 1.0 / (1.0 + std::exp(-v));
      out["dx"].push_back(value_at(r.x_dtype, dy, i) * s * (1.0 + v * (1.0 - s)));
    }
    return out;
  }
  if (is_backward(r.op)) throw Error(fmt::format("compare: {} has no float64 reference yet", name(r.op)));
  const int64_t N = r.cols;
  const ScalarType xt = r.x_dtype, wt = r.weight_type();
  const uint8_t* x = in.get("x").data();
  auto has = [&](const char* n) {
    for (const ArgSpec& a : in.args)
      if (a.name == n) return true;
    return false;
  };
  const uint8_t* w = has("weight") ? in.get("weight").data() : nullptr;
  const uint8_t* b = has("bias") ? in.get("bias").data() : nullptr;
  std::map<std::string, std::vector<double>> out;
  for (int64_t row = 0; row < rows; ++row) {
    double sum = 0, sq = 0;
    for (int64_t j = 0; j < N; ++j) {
      double v = value_at(xt, x, row * N + j);
      sum += v;
      sq += v * v;
    }
    const double mean = sum / N;
    double m2 = 0;
    for (int64_t j = 0; j < N; ++j) {
      double d = value_at(xt, x, row * N + j) - mean;
      m2 += d * d;
    }
    const double var = m2 / N;
    switch (r.op) {
      case OpKind::var_mean:
        out["var"].push_back(var);
        out["mean"].push_back(mean);
        break;
      case OpKind::sum: out["sum"].push_back(sum); break;
      case OpKind::mean: out["mean"].push_back(mean); break;
      case OpKind::layer_norm: {
        const double rstd = 1.0 / std::sqrt(var + static_cast<double>(static_cast<float>(r.eps)));
        out["mean"].push_back(mean);
        out["rstd"].push_back(rstd);
        for (int64_t j = 0; j < N; ++j) {
          double y = (value_at(xt, x, row * N + j) - mean) * rstd;
          if (w) y *= value_at(wt, w, j);
          if (b) y += value_at(wt, b, j);
          out["y"].push_back(y);
        }
        break;
      }
      case OpKind::rms_norm: {
        const double rstd = 1.0 / std::sqrt(sq / N + static_cast<double>(static_cast<float>(r.eps)));
        out["rstd"].push_back(rstd);
        for (int64_t j = 0; j < N; ++j) {
          double y = value_at(xt, x, row * N + j) * rstd;
          if (w) y *= value_at(wt, w, j);
          out["y"].push_back(y);
        }
        break;
      }
      case OpKind::softmax:
      case OpKind::log_softmax: {
        double mx = -INFINITY;
        for (int64_t j = 0; j < N; ++j) mx = std::max(mx, value_at(xt, x, row * N + j));
        double s = 0;
        for (int64_t j = 0; j < N; ++j) s += std::exp(value_at(xt, x, row * N + j) - mx);
        for (int64_t j = 0; j < N; ++j) {
          const double d = value_at(xt, x, row * N + j) - mx;
          out["y"].push_back(r.op == OpKind::softmax ? std::exp(d) / s : d - std::log(s));
        }
        break;
      }
      case OpKind::silu:
        for (int64_t j = 0; j < N; ++j) {
          const double v = value_at(xt, x, row * N + j);
          out["y"].push_back(v / (1.0 + std::exp(-v)));
        }
        break;
      case OpKind::gelu_tanh:
        for (int64_t j = 0; j < N; ++j) {
          const double v = value_at(xt, x, row * N + j);
          out["y"].push_back(0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
        }
        break;
      case OpKind::gelu:
        for (int64_t j = 0; j < N; ++j) {
          const double v = value_at(xt, x, row * N + j);
          out["y"].push_back(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
        }
        break;
      default: break;  // attention_f64, layer_norm_backward_f64, softmax_backward_f64
    }
  }
  return out;
}

CompareReport compare_orders(const CompareOptions& opt) {
  CompareReport rep;
  rep.options = opt;
  // A backward op's report is about its weight gradient, the sum over every row, when it has one.
  const bool weight_grad = opt.base.has_weight && (opt.base.op == OpKind::layer_norm_backward || opt.base.op == OpKind::rms_norm_backward);
  rep.primary = opt.base.op == OpKind::var_mean      ? "var"
                : opt.base.op == OpKind::sum         ? "sum"
                : opt.base.op == OpKind::mean        ? "mean"
                : opt.base.op == OpKind::attention   ? "out"
                : opt.base.op == OpKind::attention_backward ? "dq"
                : opt.base.op == OpKind::cross_entropy ? "loss"
                : weight_grad                        ? "dweight"
                : is_backward(opt.base.op)           ? "dx"
                                                     : "y";
  std::map<std::string, std::vector<double>> ref;
  for (const std::string& name : opt.orders) {
    if (opt.progress) opt.progress(rep.results.size(), opt.orders.size(), name);
    OrderResult res;
    res.order = name;
    try {
      Request r = opt.base;
      r.order = name;
      KernelHandle k = compile(r);
      HostBuffers h = make_buffers(*k, opt.rows, opt.seed, opt.offset, opt.scale);
      if (ref.empty()) ref = reference_f64(r, h, opt.rows);
      std::vector<BufferRef> refs = h.refs(opt.rows, r.cols);
      double best = 1e30;
      for (int i = 0; i < std::max(1, opt.repeats); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        k->run(refs, opt.rows);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      res.seconds = best;
      double bytes = 0;
      for (size_t i = 0; i < h.args.size(); ++i) bytes += static_cast<double>(h.bytes[i].size());
      res.gbps = bytes / best / 1e9;
      for (size_t i = 0; i < h.args.size(); ++i) {
        const ArgSpec& a = h.args[i];
        if (!a.output) continue;
        res.outputs[a.name] = h.bytes[i];
        const std::vector<double>& want = ref.at(a.name);
        std::vector<uint8_t> rounded(h.bytes[i].size());
        double max_abs = 0;
        int64_t max_ulp = 0;
        for (int64_t j = 0; j < static_cast<int64_t>(want.size()); ++j) put(a.dtype, rounded.data(), j, want[size_t(j)]);
        for (int64_t j = 0; j < static_cast<int64_t>(want.size()); ++j) {
          double got = value_at(a.dtype, h.bytes[i].data(), j);
          double err = std::fabs(got - want[size_t(j)]);
          max_abs = std::isnan(err) ? err : std::max(max_abs, err);
          int64_t u = ulp_distance(a.dtype, h.bytes[i].data(), rounded.data(), j);
          max_ulp = (u < 0 || max_ulp < 0) ? -1 : std::max(max_ulp, u);
          if (a.name == rep.primary) res.primary_ulps.push_back(u);
        }
        res.max_abs_err[a.name] = max_abs;
        res.max_ulp[a.name] = max_ulp;
      }
    } catch (const Error& e) {
      res.error = e.what();
    }
    rep.results.push_back(std::move(res));
  }
  if (opt.progress) opt.progress(rep.results.size(), opt.orders.size(), "");
  const ScalarType t = opt.base.x_dtype;
  for (OrderResult& a : rep.results) {
    for (const OrderResult& b : rep.results) {
      if (!a.error.empty() || !b.error.empty()) {
        a.identical.push_back(-1);
        continue;
      }
      const std::vector<uint8_t>& ya = a.outputs.at(rep.primary);
      const std::vector<uint8_t>& yb = b.outputs.at(rep.primary);
      const double n = static_cast<double>(ya.size() / static_cast<size_t>(size_bytes(t)));
      a.identical.push_back(static_cast<double>(count_identical(t, ya, yb)) / n);
    }
  }
  return rep;
}

std::string format_report(const CompareReport& rep) {
  const CompareOptions& o = rep.options;
  std::string s = fmt::format("{} rows={} N={} dtype={} input=N({}, {}^2) seed={} target={}\n", name(o.base.op), o.rows, o.base.cols,
                              name(o.base.x_dtype), o.offset, o.scale, o.seed, name(o.base.target));
  if (forward_of(o.base.op) == OpKind::attention)
    s = fmt::format("{} batch*heads={} S_q={} S_k={} D={}{} dtype={} q,k,v=N({}, {}^2) seed={} target={}\n", name(o.base.op), o.rows, o.base.seq_q,
                    o.base.seq_k, o.base.cols, o.base.causal ? " causal" : "", name(o.base.x_dtype), o.offset, o.scale, o.seed,
                    name(o.base.target));
  std::vector<std::string> outs;
  for (const OrderResult& r : rep.results)
    if (r.error.empty()) {
      for (const auto& [n, v] : r.outputs) outs.push_back(n);
      break;
    }
  auto ulp_text = [](int64_t u) { return u < 0 ? std::string("nan") : fmt::format("{}", u); };
  size_t w = 5;
  for (const OrderResult& r : rep.results) w = std::max(w, r.order.size());
  s += fmt::format("\ndistance from float64 (max |err| of {}, max ULP per output) and time\n", rep.primary);
  s += fmt::format("  {:<{}}  {:>11}", "order", w, "max|err|");
  for (const std::string& n : outs) s += fmt::format("  {:>9}", "ulp " + n);
  s += fmt::format("  {:>10}  {:>8}\n", "time ms", "GB/s");
  for (const OrderResult& r : rep.results) {
    if (!r.error.empty()) {
      s += fmt::format("  {:<{}}  error: {}\n", r.order, w, r.error);
      continue;
    }
    s += fmt::format("  {:<{}}  {:>11.3e}", r.order, w, r.max_abs_err.at(rep.primary));
    for (const std::string& n : outs) s += fmt::format("  {:>9}", ulp_text(r.max_ulp.at(n)));
    s += fmt::format("  {:>10.3f}  {:>8.2f}\n", r.seconds * 1e3, r.gbps);
  }
  s += fmt::format("\nagreement: % of {} elements bit-identical (row order vs column order)\n", rep.primary);
  s += fmt::format("  {:<{}}", "", w + 4);
  for (size_t j = 0; j < rep.results.size(); ++j) s += fmt::format("  {:>7}", fmt::format("[{}]", j));
  s += "\n";
  for (size_t i = 0; i < rep.results.size(); ++i) {
    const OrderResult& r = rep.results[i];
    s += fmt::format("  {:<{}}", fmt::format("[{}] {}", i, r.order), w + 4);
    for (double f : r.identical) s += f < 0 ? fmt::format("  {:>7}", "-") : fmt::format("  {:>7.3f}", 100.0 * f);
    s += "\n";
  }
  return s;
}

}  // namespace ordo
