#include "ir/order.hpp"

#include <fmt/format.h>

namespace ordo::ir {

static const char* fold_name(LaneFold f) {
  return f == LaneFold::Halving ? "halving" : f == LaneFold::Adjacent ? "adjacent" : "sequential";
}

std::string describe(const SumOrder& s) {
  std::string fma = s.fma ? ", fma" : "";
  if (s.outer_chunk > 0) fma += fmt::format(", outer_chunk={}", s.outer_chunk);
  if (s.tail_after_fold) fma += ", tail_after_fold";
  if (s.tail_unfused_group) fma += fmt::format(", tail_unfused_group={}", s.tail_unfused_group);
  switch (s.kind) {
    case SumOrder::Kind::Sequential: return fmt::format("sequential{}", fma);
    case SumOrder::Kind::Pairwise: return fmt::format("pairwise(block={}, lanes={}, fold={}{})", s.block, s.lanes, fold_name(s.fold), fma);
    case SumOrder::Kind::LevelCascade:
      return fmt::format("level_cascade(lanes={}, accumulators={}{})", s.lanes, s.accumulators, fma);
    case SumOrder::Kind::LaneTree:
      return fmt::format("lane_tree(lanes={}, accumulators={}, fold={}{})", s.lanes, s.accumulators, fold_name(s.fold), fma);
    case SumOrder::Kind::ChunkStack:
      return fmt::format("chunk_stack(lanes={}, chunk={}, fold={}{}{})", s.lanes, s.stack_chunk, fold_name(s.fold),
                         s.parts > 1 ? fmt::format(", parts={}", s.parts) : "", fma);
  }
  return "?";
}

std::string describe(const MomentsOrder& m) {
  switch (m.kind) {
    case MomentsOrder::Kind::LaneWelford:
      return fmt::format("lane_welford(lanes={}{}, chunk={}, cascade=binary_counter{}, acc={}{}{}{})", m.lanes,
                         m.streams > 1 ? fmt::format(", streams={}", m.streams) : "", m.chunk,
                         m.cascade_merge == WelfordMerge::ScaledDelta ? ", merge=scaled_delta" : "", name(m.acc),
                         m.fma_update ? ", fma_update" : "", m.fma_merge ? ", fma_merge" : "", m.fma_tail ? ", fma_tail" : "");
    case MomentsOrder::Kind::VectorWelford:
      return fmt::format("vector_welford(lanes={}{}, chunk={}, fold=shuffle_down{}{}, acc={})", m.lanes,
                         m.streams > 1 ? fmt::format(", streams={}", m.streams) : "", m.chunk,
                         m.parts > 1 ? fmt::format(", parts={}", m.parts) : "",
                         m.two_pass_max_n > 0 ? fmt::format("; N <= {} in a launch of several rows: two_pass(sum={})", m.two_pass_max_n, describe(m.sum)) : "",
                         name(m.acc));
    case MomentsOrder::Kind::SequentialWelford: return fmt::format("sequential_welford(acc={})", name(m.acc));
    case MomentsOrder::Kind::TwoPass:
      if (m.dev_acc || m.dev_sum)
        return fmt::format("two_pass(sum={}, acc={}; deviations: sum={}, acc={})", describe(m.sum), name(m.acc),
                           describe(m.dev_sum.value_or(m.sum)), name(m.dev_acc.value_or(m.acc)));
      return fmt::format("two_pass(sum={}, acc={})", describe(m.sum), name(m.acc));
    case MomentsOrder::Kind::OnePass: return fmt::format("one_pass(sum={}, acc={})", describe(m.sum), name(m.acc));
    case MomentsOrder::Kind::BlockWelford:
      return fmt::format("block_welford(team={}, vector={}, update=fma, warp_tree=shuffle_down(16..1), block_tree=team_memory({}..1), acc={})",
                         m.team, m.lanes, m.team / 64, name(m.acc));
    case MomentsOrder::Kind::BlockReduceWelford:
      return fmt::format("block_reduce_welford(team={}, update=divide, warp_tree=shuffle_down(16..1), "
                         "block_tree=warp_0_shuffle_down(16..1) over the {} warps, acc={})",
                         m.team, m.team / 32, name(m.acc));
  }
  return "?";
}

std::string describe(const AffineOrder& a) {
  const char* form = a.form == AffineOrder::Form::ScaleBias     ? "scale_bias"
                     : a.form == AffineOrder::Form::CenterScale ? "center_scale"
                     : a.form == AffineOrder::Form::CenterDivide ? "center_divide"
                                                                 : "gamma_centered";
  return fmt::format("{}{}{}{}{}{}{}{}{}", form, a.fma ? ", fma" : "", a.round_each_op ? ", round_each_op" : "",
                     a.rsqrt_vector_rows ? fmt::format(", rsqrt_vector_rows={}", a.rsqrt_vector_rows) : "",
                     a.device_rsqrt ? ", rstd=cuda.rsqrtf (device-only)" : "",
                     a.missing_as_identity ? ", missing gamma/beta as 1/0" : "",
                     a.missing_bias_as_zero ? ", missing beta as +0" : "",
                     a.round_before_weight ? ", rounded to storage before the weight" : "",
                     a.one_plus_weight ? ", times (1 + weight)" : "");
}

static const char* math_name(MathImpl m) {
  switch (m) {
    case MathImpl::SleefU10: return "sleef_u10";
    case MathImpl::Glibc: return "glibc";
    case MathImpl::Device: return "cuda (device-only)";
    case MathImpl::GlibcDouble: return "glibc double exp";
    case MathImpl::TorchExpU20: return "torch exp_u20";
    case MathImpl::TorchFexpU20: return "torch fexp_u20";
  }
  return "?";
}

std::string describe(const SoftmaxOrder& s) {
  if (s.kind == SoftmaxOrder::Kind::WarpButterfly)
    return fmt::format("warp_butterfly(team=32, thread max then xor 16..1, exp={}, log={}, {})", math_name(s.exp), math_name(s.log),
                       s.multiply_by_reciprocal ? "y=e*(1/s)" : "y=e/s");
  if (s.kind == SoftmaxOrder::Kind::Decomposed)
    return fmt::format("decomposed(max=lanes {} folded, exp={}, sum={}, y=e/s, log={} from {} rows in the launch, else glibc{})",
                       s.lanes, math_name(s.exp), describe(s.sum), math_name(s.log), s.vector_log_rows,
                       s.scalar_exp_below > 0 ? fmt::format("; scalar glibc exp for several rows of N < {}", s.scalar_exp_below) : "");
  const char* kind = s.kind == SoftmaxOrder::Kind::TwoPass ? "two_pass" : s.kind == SoftmaxOrder::Kind::Staged ? "staged" : "online";
  std::string tail = s.kind == SoftmaxOrder::Kind::Staged ? fmt::format(", tail_exp={}", math_name(s.tail_exp)) : "";
  return fmt::format("{}(lanes={}, fold={}, exp={}{}, log={}, {})", kind, s.lanes, fold_name(s.fold), math_name(s.exp), tail,
                     math_name(s.log), s.multiply_by_reciprocal ? "y=e*(1/s)" : "y=e/s");
}

}  // namespace ordo::ir

namespace ordo::ir {

std::string describe(const GemmOrder& g) {
  if (g.kind == GemmOrder::Kind::MklAmd) return fmt::format("mkl_amd_avx512(threads={})", g.threads);
  return fmt::format("mkl_intel_avx512(threads={}, mkl_threads={})", g.threads, g.mkl_threads);
}

std::string describe(const AttentionOrder& a) {
  if (a.kind == AttentionOrder::Kind::CpuFlash)
    return fmt::format("cpu_flash(key_block={}, gemm={}, lanes={}, exp={}, tail_exp={}, fold={}, sum={}{})",
                       a.key_block, describe(a.gemm), a.softmax.lanes, math_name(a.softmax.exp),
                       math_name(a.softmax.tail_exp), fold_name(a.softmax.fold),
                       a.rescale_fma ? "fma" : "mul+add",
                       a.round_to_storage ? fmt::format(", p rounded to storage{}", a.paired_exp_sum ? ", paired exp sum" : "") : "");
  if (a.kind == AttentionOrder::Kind::CpuMatmul)
    return fmt::format("cpu_matmul(gemm={}, softmax={})", describe(a.gemm), describe(a.softmax));
  const char* kind = a.kind == AttentionOrder::Kind::Materialized ? "materialized"
                     : a.kind == AttentionOrder::Kind::ExactTiled ? "exact_tiled"
                                                                  : "flash";
  std::string s = fmt::format("{}(query_lanes={}", kind, a.query_lanes);
  if (a.kind == AttentionOrder::Kind::Materialized && a.pv_lanes != 8) s += fmt::format(", pv_lanes={}", a.pv_lanes);
  if (a.keep_scores) s += ", keep_scores";
  if (a.kind == AttentionOrder::Kind::Flash) s += fmt::format(", key_block={}{}", a.key_block, a.exp2 ? ", exp2" : "");
  if (a.team > 0) s += fmt::format(", team={} (a query per thread, K/V tiles in team memory)", a.team);
  s += fmt::format(", dots=sequential{}, scale={}", a.dot_fma ? "+fma" : "", a.scale_divides ? "divide" : "multiply");
  if (a.round_to_storage)
    s += fmt::format(", round_to_storage, qk={}, pv={}", a.qk_round_each_step ? "round_each_step" : "round_once",
                     a.pv_round_each_step ? "round_each_step" : "round_once");
  if (a.kind != AttentionOrder::Kind::Flash) s += ", softmax=" + describe(a.softmax);
  return s + ")";
}

}  // namespace ordo::ir

namespace ordo::ir {

std::string describe(const ColumnSumOrder& c) {
  if (c.kind == ColumnSumOrder::Kind::ThreadSlots)
    return fmt::format("thread_slots(slots={}{})", c.slots, c.round_slots ? ", slots rounded to storage per row" : "");
  if (c.kind == ColumnSumOrder::Kind::LevelCascade) return fmt::format("level_cascade(vector={}, slots={})", c.vector, c.slots);
  return fmt::format("block_tree(block_rows={}, {})", c.block_rows, c.fma ? "fma" : "mul+add");
}

std::string describe(const NormBackwardOrder& n) {
  if (n.kind == NormBackwardOrder::Kind::TorchCpu)
    return fmt::format("torch_cpu(lanes={}, fold={}, {}, columns={})", n.lanes, fold_name(n.fold), n.fma ? "gcc fma" : "no fma",
                       describe(n.columns));
  if (n.kind == NormBackwardOrder::Kind::TorchComposite)
    return fmt::format("torch_composite(sum={}, columns={})", describe(n.sum), describe(n.columns));
  return fmt::format("centered(sum={}, dx={}, columns={})", describe(n.sum), n.fma_dx ? "fma" : "mul+add", describe(n.columns));
}

std::string describe_gelu_erf(const PointwiseOrder& p) {
  const char* forward = p.gelu_erf == PointwiseOrder::GeluErf::OneDnnMinimax ? "onednn_minimax" : "onednn_abramowitz_stegun";
  return fmt::format("gelu_erf(forward={}, backward=onednn_abramowitz_stegun{})", forward,
                     p.bf16_flushes_subnormals ? ", bf16 stores flush subnormals" : "");
}

std::string describe(const PointwiseOrder& p) {
  // The library function is the op's own: silu's exp, gelu_tanh's tanh.
  const char* fma = p.fma ? ", the op's fma (silu_backward's 1 + x(1 - s), gelu_tanh's x + 0.044715 x^3 and its backward's 1 - t^2 and 1 + 3*0.044715 x^2)" : "";
  const std::string grain = fmt::format("{}{}", p.threads_grain_above ? fmt::format(", grain elements/threads above {}", p.threads_grain_above) : "",
                                        p.tail_per_row ? ", a tail per row" : "");
  if (p.vector_elements == 0) return fmt::format("pointwise(function={}{}{})", math_name(p.vector_exp), fma, grain);
  return fmt::format("pointwise(per chunk: steps of {} with function={}, the rest with function={}{}{})", p.vector_elements,
                     math_name(p.vector_exp), math_name(p.scalar_exp), fma, grain);
}

std::string describe(const LossOrder& l) {
  return fmt::format("loss_cascade(levels={}, {} rows per level, partial sums in the storage type)", l.levels, int64_t(1) << l.level_bits);
}

std::string describe(const SoftmaxBackwardOrder& s) {
  const char* dx = s.fma ? "log dx fma" : "log dx mul+sub";
  if (s.kind == SoftmaxBackwardOrder::Kind::TorchCpu) {
    using T = SoftmaxBackwardOrder::TailFma;
    const char* tail = s.fma_tail == T::Always ? "fma" : s.fma_tail == T::Never ? "mul+add" : "fma when inline (threads=1 or one row)";
    return fmt::format("torch_cpu(vec_reduce_all lanes={}, fold={}, tail {}, {}, exp={})", s.lanes, fold_name(s.fold), tail, dx,
                       math_name(s.exp));
  }
  return fmt::format("summed(sum={}, {}, exp={})", describe(s.sum), dx, math_name(s.exp));
}

}  // namespace ordo::ir

namespace ordo::ir {

std::string describe(const AttentionBackwardOrder& a) {
  if (a.kind == AttentionBackwardOrder::Kind::CpuFlash)
    return fmt::format("cpu_flash_backward(key_block={}, gemm={}, dsum lanes={} fold={} no fma, exp={}, bf16 gemm_stub {}{})", a.key_block,
                       describe(a.gemm), a.dsum_lanes, fold_name(a.dsum_fold), math_name(a.exp), a.bf16_stub_fma ? "fma" : "no fma",
                       a.onednn_16bit == AttentionBackwardOrder::OneDnn::Off ? " at every size"
                       : a.onednn_16bit == AttentionBackwardOrder::OneDnn::Avx512Bf16 ? " or oneDNN over 4096 multiply-adds"
                       : a.onednn_16bit == AttentionBackwardOrder::OneDnn::Avx512Fp16 ? " or oneDNN (f16 as f32) over 4096 multiply-adds"
                                                                                       : " or oneDNN (bf16 emulated) over 4096 multiply-adds");
  if (a.kind == AttentionBackwardOrder::Kind::CpuMatmul)
    return fmt::format("composite_backward(autograd of softmax(q@k^T*scale)@v, gemm={})", describe(a.gemm));
  return fmt::format("tiled_backward(lanes={}, dots=sequential{}, dk/dv: queries ascending, dq: keys ascending, exp=sleef_u10)", a.lanes,
                     a.fma ? "+fma" : "");
}

}  // namespace ordo::ir
