// Expanding Orders into IR: the reductions every op shares.
#pragma once

#include <functional>
#include <optional>

#include "ir/ir.hpp"
#include "ir/order.hpp"

namespace ordo::gen {

// Arithmetic in the compute type `t`, each result optionally rounded to a storage type
// (PyTorch 1.13's bf16 kernels). All gen/ arithmetic on statistics goes through this, so the
// rounding points are one decision, visible as Cast pairs in the IR.
struct Arith {
  ScalarType t = ScalarType::f32;
  std::optional<ScalarType> round_to;

  ir::ExprRef r(ir::ExprRef e) const { return round_to ? ir::cast(ir::cast(std::move(e), *round_to), t) : e; }
  ir::ExprRef constant(double v, int lanes = 1) const;
  ir::ExprRef count(ir::ExprRef i64, int lanes = 1) const;  // an element count as a value
  ir::ExprRef add(ir::ExprRef a, ir::ExprRef b) const { return r(ir::add(std::move(a), std::move(b))); }
  ir::ExprRef sub(ir::ExprRef a, ir::ExprRef b) const { return r(ir::sub(std::move(a), std::move(b))); }
  ir::ExprRef mul(ir::ExprRef a, ir::ExprRef b) const { return r(ir::mul(std::move(a), std::move(b))); }
  ir::ExprRef div(ir::ExprRef a, ir::ExprRef b) const { return r(ir::div(std::move(a), std::move(b))); }
  ir::ExprRef fma(ir::ExprRef a, ir::ExprRef b, ir::ExprRef c) const { return r(ir::fma(std::move(a), std::move(b), std::move(c))); }
  ir::ExprRef sqrt(ir::ExprRef a) const { return r(ir::unary(ir::Op::Sqrt, std::move(a))); }
  // a*b + c, as one fma or as a rounded product then a rounded sum.
  ir::ExprRef mul_add(ir::ExprRef a, ir::ExprRef b, ir::ExprRef c, bool fused) const {
    return fused ? fma(std::move(a), std::move(b), std::move(c)) : add(mul(std::move(a), std::move(b)), std::move(c));
  }
};

// A reduced length: fixed when the kernel is built, or given at each launch (Request::cols_at_launch:
// a uniform i64 that ir::launch_size reads). For a length given at launch, the blocks that take a
// Length build loops whose bounds and branches read it, with the operations of the fixed-length
// expansion at every length; for a fixed one, exactly that expansion.
struct Length {
  int64_t fixed = 0;
  ir::ExprRef at_launch;

  Length(int64_t n) : fixed(n) {}  // NOLINT(google-explicit-constructor): a fixed length where an int64_t was
  static Length launch(ir::ExprRef n) {
    Length l(0);
    l.at_launch = std::move(n);
    return l;
  }
  bool is_fixed() const { return !at_launch; }
  ir::ExprRef expr() const { return at_launch ? at_launch : ir::index_const(fixed); }
};

// A term of a sum: a, or the product a*b when b is set. Vectors of `lanes` terms.
struct Term {
  ir::ExprRef a, b;
};
// Terms starting at column `index` (i64), `lanes` of them, in the compute type.
using TermFn = std::function<Term(ir::ExprRef index, int lanes)>;
// acc + term, or fma(a, b, acc) for a product term when the order fuses.
inline ir::ExprRef accumulate(const Arith& ar, const ir::ExprRef& acc, const Term& t, bool fuse) {
  if (!t.b) return ar.add(acc, t.a);
  return ar.mul_add(t.a, t.b, acc, fuse);
}
// The first term of an accumulator, which starts from it (not from 0 + it).
inline ir::ExprRef first_value(const Arith& ar, const Term& t) { return t.b ? ar.mul(t.a, t.b) : t.a; }
// Values of x starting at column `index`, in the compute type.
using LoadFn = std::function<ir::ExprRef(ir::ExprRef index, int lanes)>;

// Sum of terms 0..n-1 in `order`; returns a read of a scalar local.
// A length given at launch takes a Sequential, LaneTree or LevelCascade sum without outer chunks
// (gen::resolve refuses the others).
ir::ExprRef emit_sum(ir::Builder& b, const ir::SumOrder& order, const Arith& ar, const Length& n, const TermFn& term,
                     const std::string& label);
// Several sums over the same n columns, each in `order`: the same bits as one emit_sum per sum.
// A lane tree (without outer chunks) runs their whole-vector steps in one loop, so a row is read
// once for all of them. Returns the sums in order.
struct LabelledTerm {
  TermFn term;
  std::string label;
};
std::vector<ir::ExprRef> emit_sums(ir::Builder& b, const ir::SumOrder& order, const Arith& ar, const Length& n,
                                   const std::vector<LabelledTerm>& sums);

struct Moments {
  ir::ExprRef mean, var;  // scalars in the order's accumulation type; var = M2 / N
};
// passes_as_loop (the CUDA targets, where NVRTC's compile time follows the size of the code): a
// TwoPass order that sums both passes in one order and type runs them as one loop over the pass,
// with one copy of the sum; same bits as the two sums written out. A length given at launch takes
// TwoPass moments only.
Moments emit_moments(ir::Builder& b, const ir::MomentsOrder& order, const Arith& ar, const Length& n, const LoadFn& x,
                     bool passes_as_loop);
// The lane Welford cascade (MomentsOrder::Kind::LaneWelford, lanes <= 32) as team statements
// of a 32-thread team kernel, a lane per thread, with the one-thread expansion's bits. mean and
// var are reads of per-thread locals, equal on every thread: use them in later team statements.
Moments emit_lane_welford_warp(ir::Builder& b, const ir::MomentsOrder& order, const Arith& ar, int64_t n, const LoadFn& x);

// Folds scalar lane values by `fold` (the vector length must be a power of two unless Sequential).
ir::ExprRef fold_lanes(const std::vector<ir::ExprRef>& lanes, ir::LaneFold fold, const Arith& ar);

}  // namespace ordo::gen
