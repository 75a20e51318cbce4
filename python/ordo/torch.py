"""ordo's kernels as PyTorch operators, and `pinned(order)`, which routes torch's own calls to them.

    import torch, ordo.torch
    y = ordo.torch.layer_norm(x, (x.shape[-1],), w, b, 1e-5, order="torch2.15-cpu")
    with torch.no_grad(), ordo.torch.pinned("torch2.15-cpu"):
        out = torch.compile(model, fullgraph=True)(x)   # the eager model's bits

The operators (`torch.ops.ordo.*`) are registered with `torch.library` with fake kernels, so
`torch.compile(fullgraph=True)` puts them in its graph; Inductor calls them as extern kernels.
Each takes the order as a string argument, a constant of the graph. They run on the CPU through
ordo's compiled extension; inputs of any layout are copied to contiguous rows first, so the
result is torch's for the same values in contiguous memory.

Inside `pinned(order)`, a TorchFunctionMode sends these calls to the operators:
  torch.nn.functional.layer_norm, rms_norm, softmax, log_softmax, scaled_dot_product_attention,
  cross_entropy (class indices over 2-D logits, no class weights or label smoothing), silu and
  gelu (both forms; not inplace)
  torch.layer_norm, torch.rms_norm, torch.softmax, torch.log_softmax, and Tensor.softmax,
  Tensor.log_softmax
and so the modules that call them (nn.LayerNorm, nn.RMSNorm, nn.Softmax, nn.LogSoftmax, nn.SiLU,
nn.GELU, and transformers' activations that call F.silu or F.gelu: "silu", "gelu",
"gelu_pytorch_tanh"; "gelu_new" is a composite of torch.tanh and is not seen). Dynamo
traces the mode when the compiled function is called inside the block. A call ordo cannot run
with the order (a dtype the order lacks, an attn_mask under an order without masks (the
composites') or of a shape torch's flash kernel does not take, dropout_p > 0,
a 3-D SDPA, a softmax over
a dim other than the last, a layout whose bits torch itself changes: rms_norm or SDPA with a
strided last dim, silu or gelu's tanh form of a strided tensor other than rows of a wider one
(those run with the order's inner_loop=row), gelu's erf form of a non-contiguous tensor or of one
element, for orders
reproducing a library) runs torch's own op instead and warns once
per block and reason (OrdoFallbackWarning, the reason in its text); `pinned(order, strict=True)`
raises ValueError instead. Calls made from inside another overridable torch function
(F.multi_head_attention_forward, which nn.MultiheadAttention uses) are not seen: a
TorchFunctionMode is off while it handles a call. The torch2.15 orders get torch's thread count,
`order(threads=T)`, read when the call is traced. Under dynamic shapes (torch.compile(dynamic=True),
or automatic dynamic shapes) the sizes ordo compiles a kernel for (the reduced length, the attention
shape) are specialized in the graph, with a guard; the other sizes stay symbolic.

Compiled code: with a torch2.15-cpu order (whose promise is eager PyTorch 2.15's bits), a
torch.compile inside the block runs Inductor in its lite mode (torch._inductor.lite_mode_options:
every op an ATen call, no fusion, decomposition or graph rewrite), so the ops ordo does not run
keep the kernels eager runs, and in training F.dropout runs eager's CPU composite as one op
(ordo::eager_dropout) instead of the native_dropout a compile would trace. A Hugging Face causal
LM compiled so gives eager's logits and gradients bit for bit (tests/reference/torch2_hf_models.py).
`pinned(order, eager_kernels=False)` keeps Inductor's own kernels for the other ops; other orders
default to that. Either way the graphs Inductor compiles inside the block run with torch-function
handling off (the mode routed their calls when it traced them), so their ATen calls cost what they
cost outside the block; AOTAutograd's backward graphs still run inside the mode.

Which kernel runs a routed call: under `pinned("torch2.15-cpu")` (the running torch's order: this
capability and host, torch's thread count) torch's own kernel for a routed call computes the
order's bits too, in eager code and in lite mode. There pinned's default, kernels="fastest",
times the two once per call signature (shapes, strides, dtypes, arguments; on specimens, outside
every mode) and runs the faster: a tie goes to torch, and either way the bits are the same and
nothing warns. In eager code (without strict=True) a signature first runs torch's kernel until
torch has spent _MEASURE_AFTER_S (0.1 s) on it, and only then is ordo's kernel compiled and
timed: a compile and a timing cost about that, so a generate() loop, whose attention has a new
K/V length at every step, compiles nothing, while a shape called often is measured. Measured on
a 2-core Intel Xeon (bench/user_path.py): torch's kernel is the faster for SDPA and layer_norm
at every shape there, ordo's for softmax over a few hundred rows and for rms_norm, so a small
model's compiled forward runs no ordo kernel for its attention. `pinned(order, kernels="ordo")`
runs ordo's kernel for every call it can run; any other order (another thread count,
capability or host, `fast`, ...) always runs ordo's.

Backward: every op's gradients run ordo's backward kernels, in the forward's order unless
`backward_order=` (of the function, or of pinned) names another; with a torch2.15 order the
layer_norm, rms_norm, softmax, log_softmax, silu and gelu gradients are eager autograd's bits.
scaled_dot_product_attention's backward takes the forward's log-sum-exp (its forward kernel runs
again for it); under torch2.15-cpu it is eager autograd's (f32, on the hosts the order models).
"""
import builtins
import functools
import math
import operator
import os
import threading
import time
import warnings
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"ordo.torch needs torch >= 2.4 (torch.library.custom_op); this is torch {torch.__version__}. "
                      f"The rest of ordo works without it")

import ordo
from . import _ordo

# ordo's kernels run on torch's own OpenMP threads (ordo.set_executor): a second set of threads
# would compete with torch's, which spin after each of its parallel regions (measured on 2 cores:
# a decode loop's attention took 3.7 to 8.5 times torch's time that way, 1.25 to 1.8 with
# OMP_WAIT_POLICY=PASSIVE). ORDO_EXECUTOR, when set, keeps the user's choice.
if not os.environ.get("ORDO_EXECUTOR") and torch.backends.openmp.is_available():
    ordo.set_executor("openmp")


def _load_aten_shim() -> str:
    """Loads libordo_aten.so (python/aten_shim.h: torch tensors read and allocated in C++ rather than
    through Python, a few microseconds of every small call) when it was built for this torch:
    '' when loaded, else why not. Either way the kernels and their bits are the same.
    ORDO_ATEN_SHIM=off keeps the Python path (to measure what the shim saves)."""
    if os.environ.get("ORDO_ATEN_SHIM", "on") not in ("on", "off"):
        raise ValueError(f"ORDO_ATEN_SHIM={os.environ['ORDO_ATEN_SHIM']!r}: 'on' (the default) or 'off'")
    if os.environ.get("ORDO_ATEN_SHIM") == "off":
        return "ORDO_ATEN_SHIM=off"
    path = os.path.join(os.path.dirname(_ordo.__file__), "libordo_aten.so")
    if not os.path.exists(path):
        return f"{path} was not built (the build found no torch in scripts/torch2-venv's venv)"
    return _ordo.load_aten_shim(path, str(torch.__version__))


# Why ordo.torch reads tensors through Python ('' when the ATen shim does it).
ATEN_SHIM_MISSING = _load_aten_shim()

# sum and mean (ordo.torch.sum, ordo.torch.mean) stay out of __all__: they would hide Python's sum.
__all__ = ["layer_norm", "rms_norm", "softmax", "log_softmax", "silu", "gelu", "scaled_dot_product_attention", "pinned",
           "OrdoFallbackWarning"]

_DTYPE_NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_TORCH_DTYPES = {v: k for k, v in _DTYPE_NAMES.items()}
# F.rms_norm's eps=None: torch takes float32's machine epsilon for every input dtype.
_RMS_NORM_DEFAULT_EPS = float(torch.finfo(torch.float32).eps)


class OrdoFallbackWarning(UserWarning):
    """Inside `pinned`, a call ordo cannot run went to torch's own op; the text names the reason."""


def _row_request(op: str, x_dtype: torch.dtype, w_dtype: Optional[torch.dtype], b_dtype: Optional[torch.dtype], eps: float,
                 order: str) -> tuple:
    """A forward row op's request fields after ordo's name for N (op, x dtype, weight dtype, order, eps,
    weight, bias, mixed dtypes, accumulation), checked: the dtypes of its input, weight and bias
    (None: absent)."""
    for what, dt in (("input", x_dtype), ("weight", w_dtype), ("bias", b_dtype)):
        if dt is not None and dt not in _DTYPE_NAMES:
            raise ValueError(f"{op}: {what} dtype {dt} is not float32, bfloat16 or float16")
    if w_dtype is not None and b_dtype is not None and b_dtype != w_dtype:
        raise ValueError(f"{op}: weight is {w_dtype} but bias is {b_dtype}; ordo takes one dtype for both")
    xd = _DTYPE_NAMES[x_dtype]
    wd = _DTYPE_NAMES[w_dtype] if w_dtype is not None else (_DTYPE_NAMES[b_dtype] if b_dtype is not None else "")
    return op, xd, wd, order, float(eps), w_dtype is not None, b_dtype is not None, bool(wd) and wd != xd, ""


def _norm_kernel(op: str, cols: int, x_dtype: torch.dtype, w_dtype: Optional[torch.dtype], b_dtype: Optional[torch.dtype],
                 eps: float, order: str):
    """(kernel, launch sizes) for one norm call (ordo caches the kernel by request); the kernel's
    args give the output dtypes. The kernel is the one for every N where the order has it
    (ordo._row_kernel)."""
    op, xd, wd, order, eps, weight, bias, mixed, acc = _row_request(op, x_dtype, w_dtype, b_dtype, eps, order)
    return ordo._row_kernel(op, cols, xd, wd, order, eps, weight, bias, mixed, acc)


def _dtype_or_none(t: Optional[Tensor]) -> Optional[torch.dtype]:
    return None if t is None else t.dtype


# How many row-op plans (a compiled kernel and its argument roles) are kept for repeated calls.
# Each holds its kernel alive, so this stays well below the kernel cache's own capacity.
_ROW_PLANS = 64


@functools.lru_cache(maxsize=_ROW_PLANS)
def _row_plan(op: str, cols: int, x_dtype: torch.dtype, w_dtype: Optional[torch.dtype], b_dtype: Optional[torch.dtype],
              eps: float, order: str):
    """A forward row op (norm or softmax) on torch tensors: the kernel, whether it takes N at launch,
    and for each of its arguments in order (name, is_output, shaped like x (else like x's rows),
    torch dtype). cols = 0: the plan for every N (its key holds no N, so rows of a new length find
    it), or None where the order builds its kernels for one N."""
    if op not in ("layer_norm", "rms_norm"):
        w_dtype = b_dtype = None
        eps = 0.0
    request = _row_request(op, x_dtype, w_dtype, b_dtype, eps, order)
    if cols == 0:
        kernel = ordo._row_kernel_any_length(*request)
        if kernel is None:
            return None
    else:
        kernel = _ordo.compile(request[0], cols, *request[1:])
    roles = tuple((name, is_out, extent == "rows*N", _TORCH_DTYPES[dt]) for name, dt, is_out, extent in kernel.args)
    return kernel, cols == 0, roles


def _run_rows(op: str, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float, order: str) -> dict:
    """Runs a forward row op over x's last dim; returns its outputs by name, each allocated here
    by torch (no copy, no fill) and written once by the kernel."""
    x = x.contiguous()
    if weight is not None:
        weight = weight.contiguous()
    if bias is not None:
        bias = bias.contiguous()
    w_dtype, b_dtype = _dtype_or_none(weight), _dtype_or_none(bias)
    plan = _row_plan(op, 0, x.dtype, w_dtype, b_dtype, eps, order)  # rows of any length first
    kernel, n_at_launch, roles = plan if plan is not None else _row_plan(op, x.shape[-1], x.dtype, w_dtype, b_dtype, eps, order)
    given = {"x": x, "weight": weight, "bias": bias}
    outs, tensors = {}, []
    for name, is_out, full, dtype in roles:
        if is_out:
            t = outs[name] = torch.empty(x.shape if full else x.shape[:-1], dtype=dtype)
        else:
            t = given[name]
        tensors.append(t)
    kernel.run_torch(tensors, math.prod(x.shape[:-1]), 0, [x.shape[-1]] if n_at_launch else [], True)
    return outs


def _forward_direct(op: str, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float, order: str) -> Tensor:
    """_run_rows' row-shaped output, for a call nothing records (_direct): the kernel allocates it
    with torch and writes the statistics, which such a call discards, to memory of its own
    (Kernel.run_rows), so the call costs a plan lookup and one native call."""
    w_dtype = None
    if weight is not None:
        w_dtype = weight.dtype
        weight = weight.contiguous()
    b_dtype = None
    if bias is not None:
        b_dtype = bias.dtype
        bias = bias.contiguous()
    plan = _row_plan(op, 0, x.dtype, w_dtype, b_dtype, eps, order)  # rows of any length first
    if plan is None:
        plan = _row_plan(op, x.shape[-1], x.dtype, w_dtype, b_dtype, eps, order)
    return plan[0].run_rows(x, weight, bias, plan[1])


@functools.lru_cache(maxsize=_ROW_PLANS)
def _attention_plan(d: int, sq: int, sk: int, dtype: torch.dtype, order: str, causal: bool, scale: Optional[float],
                    heads: int, row_strides: Tuple[int, int, int], mask: str = ""):
    """SDPA's forward kernel on torch tensors and the names of its arguments in order. sk = 0: the
    kernel that takes S_k at launch, or None where the order builds its attention for one S_k. mask:
    Request::mask's text, else ""."""
    if sk == 0:
        kernel = ordo._attention_kernel_any_length(d, sq, _DTYPE_NAMES[dtype], order, causal, scale, False, heads, row_strides,
                                                   mask)
    else:
        kernel = _ordo.compile_attention(d, sq, sk, _DTYPE_NAMES[dtype], order, causal, scale, False, heads=heads,
                                         row_strides=row_strides, mask=mask)
    return None if kernel is None else (kernel, tuple(name for name, _, _, _ in kernel.args))


def _kv_group(q: Tensor, k: Tensor) -> int:
    """Query heads per key/value head when k has fewer heads (dim -3) than q, dividing them
    (grouped-query attention); 1 otherwise."""
    if q.dim() < 3 or k.dim() != q.dim() or q.shape[:-3] != k.shape[:-3] or k.shape[-3] == q.shape[-3]:
        return 1
    heads, kv_heads = int(q.shape[-3]), int(k.shape[-3])
    return heads // kv_heads if kv_heads > 0 and heads % kv_heads == 0 else 1


def _grouped(q: Tensor, k: Tensor, v: Tensor, group: int):
    """q [..., H, S_q, D] as [..., H_kv, group, S_q, D], and k and v [..., H_kv, S_k, D] with the
    group a stride-0 dim: query head h reads key/value head h // group, as in torch, each group's
    keys read with the row strides they have."""
    def expanded(t):
        return t.unsqueeze(-3).expand(*t.shape[:-2], group, *t.shape[-2:])
    return q.unflatten(-3, (int(k.shape[-3]), group)), expanded(k), expanded(v)


def _grouped_mask(mask: Optional[Tensor], q: Tensor, k: Tensor) -> Optional[Tensor]:
    """An attn_mask for q's [..., H, S_q] by S_k, as [..., H_kv, group, S_q, S_k] to go with
    _grouped's views (broadcast dims stay stride 0)."""
    if mask is None:
        return None
    return mask.expand(*q.shape[:-1], k.shape[-2]).unflatten(-3, (int(k.shape[-3]), int(q.shape[-3]) // int(k.shape[-3])))


def _run_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float], order: str,
                   mask: Optional[Tensor] = None) -> Tensor:
    """softmax(q kᵀ·scale [causal] [+ mask]) v over the last two dims, q [..., S_q, D], k and v
    [..., S_k, D] (or, grouped-query, [..., H_kv, S_k, D] against q's H heads); mask: an attn_mask
    broadcastable to [..., S_q, S_k] (ordo._attention_mask)."""
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(f"scaled_dot_product_attention: q, k and v must be [..., S, D]; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if (group := _kv_group(q, k)) > 1 and k.shape == v.shape:
        return _run_attention(*_grouped(q, k, v, group), causal, scale, order, _grouped_mask(mask, q, k)).flatten(-4, -3)
    if k.shape != v.shape:
        raise ValueError(f"scaled_dot_product_attention: k has shape {tuple(k.shape)} but v has {tuple(v.shape)}")
    if q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"scaled_dot_product_attention: q {tuple(q.shape)} and k {tuple(k.shape)} differ in leading dims or D")
    if q.dtype not in _DTYPE_NAMES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"scaled_dot_product_attention: q, k, v are {q.dtype}, {k.dtype}, {v.dtype}; ordo takes one of "
                         f"float32, bfloat16, float16 for all three")
    mask, mask_text = ordo._attention_mask(mask, q, k.shape[-2], None)
    (q, qs), (k, ks), (v, vs) = ordo._rows_of("q", q), ordo._rows_of("k", k), ordo._rows_of("v", v)
    d, sq, sk, heads = int(q.shape[-1]), int(q.shape[-2]), int(k.shape[-2]), ordo._heads(q)
    # The plan for any S_k first (sk = 0 in its key: a decode loop's every step finds it), then,
    # for an order that builds its attention for one S_k, the plan for this one.
    plan = _attention_plan(d, sq, 0, q.dtype, order, causal, scale, heads, (qs, ks, vs), mask_text)
    sizes = [sk] if plan is not None else []
    kernel, names = plan if plan is not None else _attention_plan(d, sq, sk, q.dtype, order, causal, scale, heads, (qs, ks, vs),
                                                                  mask_text)
    out = torch.empty(q.shape, dtype=q.dtype)
    given = {"q": q, "k": k, "v": v, "out": out, "mask": mask}
    kernel.run_torch([given[n] for n in names], math.prod(q.shape[:-2]), 0, sizes, True)
    return out


_is_compiling, _dispatch_modes, _grad_enabled = torch.compiler.is_compiling, torch._C._len_torch_dispatch_stack, torch.is_grad_enabled


# Set while pinned times ordo's kernel as a compiled graph would call it (through its custom op).
_as_in_a_graph = threading.local()


def _direct(*tensors) -> bool:
    """Whether a call may run its kernel directly instead of through its custom op: in eager code
    (not while Dynamo traces), on plain tensors or parameters (a module's weights: nn.Parameter
    adds no dispatch of its own), with no gradient to record and no dispatch mode (FakeTensorMode,
    a profiler's or a logger's) that expects to see the op. The result is the same; the custom
    op's dispatch and autograd wrapper cost more than a small call's kernel."""
    if _is_compiling() or _dispatch_modes() or getattr(_as_in_a_graph, "on", False):
        return False
    grad = _grad_enabled()
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN_TENSORS or grad and t.requires_grad):
            return False
    return True


_PLAIN_TENSORS = (Tensor, torch.nn.Parameter)


def _size(v, placeholder: int = 1) -> int:
    """A size as ordo's requests take it: an int, or a placeholder for a symbolic size (dynamic
    shapes), where only checks that do not depend on it can run before the kernel does."""
    return v if isinstance(v, int) else placeholder


def _out_dtype(kernel, name: str) -> torch.dtype:
    for arg, dt, is_out, _ in kernel.args:
        if is_out and arg == name:
            return _TORCH_DTYPES[dt]
    raise AssertionError(f"kernel has no output {name}")


# --- operators -------------------------------------------------------------------------------
# Each takes its input with the reduced dim last; the Python functions below flatten a
# multi-dim normalized_shape into it.

@torch.library.custom_op("ordo::layer_norm", mutates_args=())
def _layer_norm_op(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
                   order: str, backward_order: str) -> Tuple[Tensor, Tensor, Tensor]:
    o = _run_rows("layer_norm", x, weight, bias, eps, order)
    return o["y"], o["mean"], o["rstd"]


@_layer_norm_op.register_fake
def _(x, weight, bias, eps, order, backward_order):
    k, _ = _norm_kernel("layer_norm", _size(x.shape[-1]), x.dtype, _dtype_or_none(weight), _dtype_or_none(bias), eps, order)
    stat = x.shape[:-1]
    return (x.new_empty(x.shape, dtype=_out_dtype(k, "y")), x.new_empty(stat, dtype=_out_dtype(k, "mean")),
            x.new_empty(stat, dtype=_out_dtype(k, "rstd")))


@torch.library.custom_op("ordo::rms_norm", mutates_args=())
def _rms_norm_op(x: Tensor, weight: Optional[Tensor], eps: float, order: str, backward_order: str) -> Tuple[Tensor, Tensor]:
    o = _run_rows("rms_norm", x, weight, None, eps, order)
    return o["y"], o["rstd"]


@_rms_norm_op.register_fake
def _(x, weight, eps, order, backward_order):
    k, _ = _norm_kernel("rms_norm", _size(x.shape[-1]), x.dtype, _dtype_or_none(weight), None, eps, order)
    return x.new_empty(x.shape, dtype=_out_dtype(k, "y")), x.new_empty(x.shape[:-1], dtype=_out_dtype(k, "rstd"))


def _register_same_shape_op(name: str):
    """softmax, log_softmax and silu: an op of one tensor and its order strings, whose output has
    x's shape and dtype, run by ordo's kernel (its gradient is registered with the op's backward).
    Its fake resolves the kernel, so an order ordo lacks fails at trace time."""
    @torch.library.custom_op(f"ordo::{name}", mutates_args=())
    def op(x: Tensor, order: str, backward_order: str) -> Tensor:
        return _forward_direct(name, x, None, None, 0.0, order)

    @op.register_fake
    def _(x, order, backward_order):
        ordo._row_kernel(name, _size(x.shape[-1]), _DTYPE_NAMES[x.dtype], "", order, 0.0, False, False, False, "")
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    return op


_softmax_op = _register_same_shape_op("softmax")
_log_softmax_op = _register_same_shape_op("log_softmax")
_silu_op = _register_same_shape_op("silu")
_gelu_tanh_op = _register_same_shape_op("gelu_tanh")
_gelu_op = _register_same_shape_op("gelu")


@torch.library.custom_op("ordo::scaled_dot_product_attention", mutates_args=())
def _sdpa_op(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor], is_causal: bool, scale: Optional[float],
             order: str, backward_order: str) -> Tensor:
    # The views as given: the torch2.15 orders read their row strides (PyTorch hands them to MKL).
    return _run_attention(query, key, value, is_causal, scale, order, attn_mask)


@_sdpa_op.register_fake
def _(query, key, value, attn_mask, is_causal, scale, order, backward_order):
    ordo._attention_kernel(_size(query.shape[-1], 8), _size(query.shape[-2]), _size(key.shape[-2]), _DTYPE_NAMES[query.dtype], order,
                           is_causal, scale, False)
    return query.new_empty(query.shape)


# Backward ops: each runs ordo's backward kernel with the order it is given (the forward's unless
# the caller named another). An absent weight gradient comes back as an empty tensor (a custom
# op returns tensors only).
@torch.library.custom_op("ordo::layer_norm_backward", mutates_args=())
def _layer_norm_backward_op(dy: Tensor, x: Tensor, weight: Optional[Tensor], mean: Tensor, rstd: Tensor, bias_grad: bool,
                            order: str) -> Tuple[Tensor, Tensor, Tensor]:
    w = weight.contiguous() if weight is not None else None
    dx, dw, db = ordo.layer_norm_backward(dy.contiguous(), x.contiguous(), w, mean.contiguous().reshape(-1),
                                          rstd.contiguous().reshape(-1), order=order, bias=bias_grad,
                                          allow_mixed_dtypes=w is not None and w.dtype != x.dtype)
    empty = x.new_empty(0)
    return dx, empty if dw is None else dw, empty if db is None else db


@_layer_norm_backward_op.register_fake
def _(dy, x, weight, mean, rstd, bias_grad, order):
    wd = weight.dtype if weight is not None else x.dtype
    n = x.shape[-1]
    return (x.new_empty(x.shape), x.new_empty(n if weight is not None else 0, dtype=wd),
            x.new_empty(n if bias_grad else 0, dtype=wd))


def _layer_norm_setup(ctx, inputs, output):
    x, weight, bias, eps, order, backward_order = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.has_bias = bias is not None
    ctx.order = backward_order or order


def _layer_norm_backward(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = torch.ops.ordo.layer_norm_backward(dy, x, weight, mean, rstd, ctx.has_bias, ctx.order)
    return dx, dw if weight is not None else None, db if ctx.has_bias else None, None, None, None


_layer_norm_op.register_autograd(_layer_norm_backward, setup_context=_layer_norm_setup)
@torch.library.custom_op("ordo::rms_norm_backward", mutates_args=())
def _rms_norm_backward_op(dy: Tensor, x: Tensor, weight: Optional[Tensor], rstd: Tensor, eps: float,
                          order: str) -> Tuple[Tensor, Tensor]:
    w = weight.contiguous() if weight is not None else None
    # The backward takes the f32 rstd torch's autograd saves; the forward returns rstd in x's dtype
    # for 16-bit x, rounded, so then the kernel recomputes it as the forward does.
    saved = rstd.contiguous().reshape(-1) if rstd.dtype == torch.float32 else None
    dx, dw = ordo.rms_norm_backward(dy.contiguous(), x.contiguous(), w, saved, order=order, eps=eps,
                                    allow_mixed_dtypes=w is not None and w.dtype != x.dtype)
    return dx, x.new_empty(0) if dw is None else dw


@_rms_norm_backward_op.register_fake
def _(dy, x, weight, rstd, eps, order):
    return x.new_empty(x.shape), (x.new_empty(x.shape[-1], dtype=weight.dtype) if weight is not None else x.new_empty(0))


def _rms_norm_setup(ctx, inputs, output):
    x, weight, eps, order, backward_order = inputs
    ctx.save_for_backward(x, weight, output[1])  # the forward's f32 rstd, as torch's autograd saves it
    ctx.eps, ctx.order = eps, backward_order or order


def _rms_norm_backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = torch.ops.ordo.rms_norm_backward(dy, x, weight, rstd, ctx.eps, ctx.order)
    return dx, dw if weight is not None else None, None, None, None


_rms_norm_op.register_autograd(_rms_norm_backward, setup_context=_rms_norm_setup)
def _register_same_shape_backward(forward, name: str, saves_output: bool):
    """The gradient of a same-shape op: its backward op `name`(dy, t) -> dx, run by ordo's kernel in
    backward_order (by default the forward's order) and registered with `forward`. t is the
    forward's output (saves_output: softmax, log_softmax) or its input (silu, gelu_tanh)."""
    @torch.library.custom_op(f"ordo::{name}", mutates_args=())
    def op(dy: Tensor, t: Tensor, order: str) -> Tensor:
        return getattr(ordo, name)(dy.contiguous(), t.contiguous(), order=order)

    @op.register_fake
    def _(dy, t, order):
        return torch.empty_like(t, memory_format=torch.contiguous_format)

    def setup_context(ctx, inputs, output):
        x, order, backward_order = inputs
        ctx.save_for_backward(output if saves_output else x)
        ctx.order = backward_order or order

    def backward(ctx, dy):
        (t,) = ctx.saved_tensors
        return op(dy, t, ctx.order), None, None

    forward.register_autograd(backward, setup_context=setup_context)
    return op


_softmax_backward_op = _register_same_shape_backward(_softmax_op, "softmax_backward", saves_output=True)
_log_softmax_backward_op = _register_same_shape_backward(_log_softmax_op, "log_softmax_backward", saves_output=True)
_silu_backward_op = _register_same_shape_backward(_silu_op, "silu_backward", saves_output=False)
_gelu_tanh_backward_op = _register_same_shape_backward(_gelu_tanh_op, "gelu_tanh_backward", saves_output=False)
_gelu_backward_op = _register_same_shape_backward(_gelu_op, "gelu_backward", saves_output=False)


def _register_row_reduction(name: str):
    """sum and mean over the last dim: the op, its fake, and eager autograd's gradient, computed
    with torch's own ops as eager's SumBackward and MeanBackward compute it (the incoming gradient
    expanded over the row; mean's then divided by N), so it has eager's bits whatever the order."""
    @torch.library.custom_op(f"ordo::{name}", mutates_args=())
    def op(x: Tensor, order: str) -> Tensor:
        return _forward_direct(name, x, None, None, 0.0, order)

    @op.register_fake
    def _(x, order):
        ordo._row_kernel(name, _size(x.shape[-1]), _DTYPE_NAMES[x.dtype], "", order, 0.0, False, False, False, "")
        return x.new_empty(x.shape[:-1])

    def setup_context(ctx, inputs, output):
        ctx.shape = inputs[0].shape

    def backward(ctx, g):
        dx = g.unsqueeze(-1).expand(ctx.shape)
        return (dx if name == "sum" else dx / ctx.shape[-1]), None

    op.register_autograd(backward, setup_context=setup_context)
    return op


_sum_op = _register_row_reduction("sum")
_mean_op = _register_row_reduction("mean")


@functools.lru_cache(maxsize=_ROW_PLANS)
def _cross_entropy_plan(op: str, cols: int, dtype: torch.dtype, ignore_index: int, reduction: str, order: str):
    """cross_entropy's (or its backward's) kernel and, for each argument in order, (name, is
    output, torch dtype): a repeated call finds them without building a request."""
    kernel = _ordo.compile(op, cols, _DTYPE_NAMES[dtype], "", order, ignore_index=ignore_index, reduction=reduction)
    return kernel, tuple((name, is_out, _TORCH_DTYPES.get(dt, torch.int64)) for name, dt, is_out, _ in kernel.args)


def _run_cross_entropy(x: Tensor, target: Tensor, ignore_index: int, reduction: str, order: str) -> Tuple[Tensor, Tensor, Tensor]:
    """(loss, logp, total_weight) of ordo's cross_entropy over 2-D logits x, each output allocated
    here by torch and written once by the kernel; the targets checked first (ordo._targets)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction={reduction!r} is not 'mean', 'sum' or 'none'")
    x, target = x.contiguous(), target.contiguous()
    rows, cols = x.shape
    ordo._targets(target, rows, cols, ignore_index)
    kernel, roles = _cross_entropy_plan("cross_entropy", cols, x.dtype, ignore_index, reduction, order)
    shapes = {"logp": x.shape, "loss": (rows,) if reduction == "none" else (), "total_weight": ()}
    outs = {name: torch.empty(shapes[name], dtype=dt) for name, is_out, dt in roles if is_out}
    given = {"x": x, "target": target, **outs}
    kernel.run_torch([given[name] for name, _, _ in roles], rows, 0, [], True)
    return outs["loss"], outs["logp"], outs["total_weight"]


@torch.library.custom_op("ordo::cross_entropy", mutates_args=())
def _cross_entropy_op(x: Tensor, target: Tensor, ignore_index: int, reduction: str, order: str,
                      backward_order: str) -> Tuple[Tensor, Tensor, Tensor]:
    """(loss, logp, total_weight): logp and total_weight are what the gradient reads, as eager
    autograd saves log_softmax's output and nll_loss's total_weight."""
    return _run_cross_entropy(x, target, ignore_index, reduction, order)


@_cross_entropy_op.register_fake
def _(x, target, ignore_index, reduction, order, backward_order):
    _ordo.compile("cross_entropy", _size(x.shape[-1]), _DTYPE_NAMES[x.dtype], "", order, ignore_index=ignore_index,
                  reduction=reduction)
    loss = x.new_empty((x.shape[0],) if reduction == "none" else ())
    return loss, torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(())


@torch.library.custom_op("ordo::cross_entropy_backward", mutates_args=())
def _cross_entropy_backward_op(dloss: Tensor, logp: Tensor, target: Tensor, total_weight: Tensor, ignore_index: int,
                               reduction: str, order: str) -> Tensor:
    return ordo.cross_entropy_backward(dloss.contiguous(), logp, target.contiguous(), total_weight, ignore_index, reduction,
                                       order=order)


@_cross_entropy_backward_op.register_fake
def _(dloss, logp, target, total_weight, ignore_index, reduction, order):
    return torch.empty_like(logp)


def _cross_entropy_setup(ctx, inputs, output):
    _, target, ignore_index, reduction, order, backward_order = inputs
    _, logp, total_weight = output
    ctx.mark_non_differentiable(logp, total_weight)
    ctx.save_for_backward(logp, target, total_weight)
    ctx.ignore_index, ctx.reduction, ctx.order = ignore_index, reduction, backward_order or order


def _cross_entropy_backward(ctx, dloss, _dlogp, _dtotal):
    logp, target, total_weight = ctx.saved_tensors
    dx = _cross_entropy_backward_op(dloss, logp, target, total_weight, ctx.ignore_index, ctx.reduction, ctx.order)
    return dx, None, None, None, None, None


_cross_entropy_op.register_autograd(_cross_entropy_backward, setup_context=_cross_entropy_setup)


@torch.library.custom_op("ordo::attention_backward", mutates_args=())
def _attention_backward_op(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor, attn_mask: Optional[Tensor], is_causal: bool,
                           scale: Optional[float], forward_order: str, order: str) -> Tuple[Tensor, Tensor, Tensor]:
    # q, k, v as given (their row strides reach the torch2.15 orders). The log-sum-exp the forward computed, as its kernel writes it (torch's backward reads the one
    # its forward saved; ordo's forward op returns out alone, so it runs again for lse). Grouped-query:
    # the forward read each group's keys once per query head (_grouped), and so does lse's run; the
    # backward sums dk and dv over the group (ordo.attention_backward with k's fewer heads).
    group = _kv_group(q, k)
    if group > 1:
        _, lse = ordo.attention(*_grouped(q, k, v, group), order=forward_order, causal=is_causal, scale=scale, return_lse=True,
                                mask=_grouped_mask(attn_mask, q, k))
        lse = lse.reshape(q.shape[:-1])
    else:
        _, lse = ordo.attention(q, k, v, order=forward_order, causal=is_causal, scale=scale, return_lse=True, mask=attn_mask)
    return ordo.attention_backward(q, k, v, out.contiguous(), dout.contiguous(), lse=lse, order=order, causal=is_causal, scale=scale,
                                   mask=attn_mask)


@_attention_backward_op.register_fake
def _(q, k, v, out, dout, attn_mask, is_causal, scale, forward_order, order):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _sdpa_setup(ctx, inputs, output):
    q, k, v, attn_mask, is_causal, scale, order, backward_order = inputs
    ctx.save_for_backward(q, k, v, output, attn_mask)
    ctx.is_causal, ctx.scale, ctx.forward_order, ctx.order = is_causal, scale, order, backward_order or order


def _sdpa_backward(ctx, dout):
    q, k, v, out, attn_mask = ctx.saved_tensors
    dq, dk, dv = torch.ops.ordo.attention_backward(q, k, v, out, dout, attn_mask, ctx.is_causal, ctx.scale, ctx.forward_order,
                                                   ctx.order)
    return dq, dk, dv, None, None, None, None, None


_sdpa_op.register_autograd(_sdpa_backward, setup_context=_sdpa_setup)


# Dropout as eager runs it on the CPU. ATen's dropout there is a composite: noise = bernoulli(1 - p)
# in the input's dtype, divided by 1 - p in place, then input * noise (ATen/native/Dropout.cpp;
# native_dropout, one fused kernel, is for GPU tensors). A compiled graph traces F.dropout into
# native_dropout instead: its forward gives eager's bits, its gradient does not in 16-bit dtypes
# (measured: 3,159 of 12,288 bf16 elements of one 96x128 input; GPT-2's bf16 gradients in 285,127
# of 495,104). This op keeps the composite whole, drawing the same random numbers in the same
# order; its gradient is autograd's of the product, dy * noise.
@torch.library.custom_op("ordo::eager_dropout", mutates_args=())
def _eager_dropout_op(x: Tensor, p: float) -> Tuple[Tensor, Tensor]:
    if p == 1.0:
        noise = torch.zeros((), dtype=x.dtype)
    else:
        noise = torch.empty_like(x).bernoulli_(1 - p)
        noise.div_(1 - p)
    return x * noise, noise


@_eager_dropout_op.register_fake
def _(x, p):
    return torch.empty_like(x), (x.new_empty(()) if p == 1.0 else torch.empty_like(x))


def _eager_dropout_setup(ctx, inputs, output):
    ctx.save_for_backward(output[1])


def _eager_dropout_backward(ctx, dy, _dnoise):
    (noise,) = ctx.saved_tensors
    return dy * noise, None


_eager_dropout_op.register_autograd(_eager_dropout_backward, setup_context=_eager_dropout_setup)


# --- the functions, with torch's signatures plus order= --------------------------------------

def _normalized_cols(x: Tensor, normalized_shape, op: str) -> int:
    if type(normalized_shape) is tuple and len(normalized_shape) == 1 and x.dim() and x.shape[-1] == normalized_shape[0]:
        return normalized_shape[0]  # the common call, checked without building anything
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) == 0 or len(shape) > x.dim() or tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise ValueError(f"{op}: normalized_shape {list(shape)} is not the trailing shape of input {list(x.shape)}")
    return math.prod(shape)


def _rows_view(input: Tensor, normalized_shape, n: int) -> Tensor:
    """input with its normalized dims as one last dim of n: input itself when that is one dim."""
    if isinstance(normalized_shape, int) or len(normalized_shape) == 1:
        return input
    return input.reshape(input.shape[:input.dim() - len(normalized_shape)] + (n,))


def _flat(t: Optional[Tensor], n: int) -> Optional[Tensor]:
    return t if t is None or t.dim() == 1 else t.reshape(n)


def layer_norm(input: Tensor, normalized_shape, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               eps: float = 1e-5, *, order: str, backward_order: Optional[str] = None) -> Tensor:
    """F.layer_norm with ordo's kernel and order. normalized_shape may span several trailing dims
    (they are normalized as one row, as torch does). Gradients run ordo's layer_norm_backward with
    backward_order, by default the forward's order."""
    n = _normalized_cols(input, normalized_shape, "layer_norm")
    if n == 0:  # rows of no elements: nothing is summed, so torch's op gives the result
        return F.layer_norm(input, normalized_shape, weight, bias, eps)
    x, w, b = _rows_view(input, normalized_shape, n), _flat(weight, n), _flat(bias, n)
    if _direct(x, w, b):
        y = _forward_direct("layer_norm", x, w, b, float(eps), order)
    else:
        y, _, _ = torch.ops.ordo.layer_norm(x, w, b, float(eps), order, backward_order or "")
    return y if x is input else y.reshape(input.shape)


def rms_norm(input: Tensor, normalized_shape, weight: Optional[Tensor] = None, eps: Optional[float] = None, *,
             order: str, backward_order: Optional[str] = None) -> Tensor:
    """F.rms_norm with ordo's kernel and order; eps=None is float32's epsilon, as in torch. Gradients
    run ordo's rms_norm_backward with backward_order, by default the forward's order."""
    n = _normalized_cols(input, normalized_shape, "rms_norm")
    if n == 0:
        return F.rms_norm(input, normalized_shape, weight, eps)
    x, w = _rows_view(input, normalized_shape, n), _flat(weight, n)
    e = _RMS_NORM_DEFAULT_EPS if eps is None else float(eps)
    if _direct(x, w):
        y = _forward_direct("rms_norm", x, w, None, e, order)
    else:
        y, _ = torch.ops.ordo.rms_norm(x, w, e, order, backward_order or "")
    return y if x is input else y.reshape(input.shape)


def _empty_rows(input: Tensor) -> bool:
    """Rows of no elements (a last dim of 0): no order applies, and torch's own op gives the
    result (an empty tensor; sum's zeros, mean's NaN), with its gradient."""
    return input.dim() > 0 and input.shape[-1] == 0


def _last_dim(input: Tensor, dim: int, op: str):
    if dim not in (-1, input.dim() - 1):
        raise ValueError(f"{op}: dim={dim}; ordo reduces the last dim only (dim=-1 or {input.dim() - 1} here)")


def softmax(input: Tensor, dim: int = -1, dtype: Optional[torch.dtype] = None, *, order: str,
            backward_order: Optional[str] = None) -> Tensor:
    """softmax over the last dim with ordo's order; dtype= casts the input first, as torch does.
    Gradients run ordo's softmax_backward with backward_order, by default the forward's order."""
    _last_dim(input, dim, "softmax")
    if _empty_rows(input):
        return F.softmax(input, dim, dtype=dtype)
    x = input if dtype is None else input.to(dtype)
    if _direct(x):
        return _forward_direct("softmax", x, None, None, 0.0, order)
    return torch.ops.ordo.softmax(x, order, backward_order or "")


def log_softmax(input: Tensor, dim: int = -1, dtype: Optional[torch.dtype] = None, *, order: str,
                backward_order: Optional[str] = None) -> Tensor:
    """log_softmax over the last dim with ordo's order; dtype= casts the input first, as torch does.
    Gradients run ordo's log_softmax_backward with backward_order, by default the forward's order."""
    _last_dim(input, dim, "log_softmax")
    if _empty_rows(input):
        return F.log_softmax(input, dim, dtype=dtype)
    x = input if dtype is None else input.to(dtype)
    if _direct(x):
        return _forward_direct("log_softmax", x, None, None, 0.0, order)
    return torch.ops.ordo.log_softmax(x, order, backward_order or "")


def _row_reduction(op: str, input: Tensor, dim: int, keepdim: bool, order: str) -> Tensor:
    _last_dim(input, dim, op)
    if input.dim() == 0:
        raise ValueError(f"{op}: a 0-dim tensor has no row to reduce")
    if _empty_rows(input):  # torch's zeros (sum) and NaN (mean, 0/0)
        return (input.sum if op == "sum" else input.mean)(dim, keepdim)
    if _direct(input):
        out = _forward_direct(op, input, None, None, 0.0, order)
    else:
        out = (torch.ops.ordo.sum if op == "sum" else torch.ops.ordo.mean)(input, order)
    return out.unsqueeze(-1) if keepdim else out


def silu(input: Tensor, *, order: str, backward_order: Optional[str] = None) -> Tensor:
    """F.silu with ordo's order: x / (1 + exp(-x)) elementwise. Under torch2.15-cpu (given torch's
    thread count, as pinned gives it: torch2.15-cpu(threads=T)) torch's bits, forward and gradient
    (silu_backward, in backward_order, by default the forward's order). As for every operator here,
    an input of another layout is computed as its contiguous copy: torch loops over a strided
    tensor by its strides, so its own bits for such an input can differ. For rows of a wider
    tensor (a chunk of the last dim) the order's inner_loop=row gives torch's bits
    (torch2.15-cpu(threads=T,inner_loop=row)); pinned adds it itself."""
    if input.dim() == 0:
        return silu(input.reshape(1), order=order, backward_order=backward_order).reshape(())
    if _empty_rows(input):
        return F.silu(input)
    if _direct(input):
        return _forward_direct("silu", input, None, None, 0.0, order)
    return torch.ops.ordo.silu(input, order, backward_order or "")


def gelu(input: Tensor, approximate: str = "none", *, order: str, backward_order: Optional[str] = None) -> Tensor:
    """F.gelu with ordo's order, in either form: the erf form (approximate="none", ordo's gelu:
    (x/2)(1 + erf(x/sqrt(2))), under torch2.15-cpu oneDNN's eltwise_gelu_erf as torch runs it) or
    the tanh form (approximate="tanh", ordo's gelu_tanh: (x/2)(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))),
    under torch2.15-cpu(threads=T) torch's own kernel). The gradient runs gelu_backward or
    gelu_tanh_backward in backward_order, by default the forward's order; under torch2.15-cpu
    torch's bits, value and gradient. A non-contiguous input is computed as its contiguous copy,
    as for silu; for the erf form torch hands such an input, and a tensor of one element, to ATen's
    own erf kernel instead of oneDNN, so its bits there can differ from these (pinned routes
    neither)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate={approximate!r}; GELU's forms are 'none' (erf) and 'tanh'")
    name = "gelu" if approximate == "none" else "gelu_tanh"
    if input.dim() == 0:
        return gelu(input.reshape(1), approximate, order=order, backward_order=backward_order).reshape(())
    if _empty_rows(input):
        return F.gelu(input, approximate=approximate)
    if _direct(input):
        return _forward_direct(name, input, None, None, 0.0, order)
    return getattr(torch.ops.ordo, name)(input, order, backward_order or "")


# Named as torch names them; this module calls Python's own sum nowhere (builtins.sum if it must).
def sum(input: Tensor, dim: int = -1, keepdim: bool = False, *, order: str) -> Tensor:  # noqa: A001
    """input.sum(dim) over the last dim, summed in ordo's order (its row_sum) and rounded once to
    input's dtype. Under torch2.15-cpu: torch's bits for float32 (torch rounds 16-bit partial sums,
    which the order refuses). The gradient is eager autograd's: the incoming one over the row."""
    return _row_reduction("sum", input, dim, keepdim, order)


def mean(input: Tensor, dim: int = -1, keepdim: bool = False, *, order: str) -> Tensor:
    """input.mean(dim) over the last dim: the row's sum in ordo's order divided by N, rounded once
    to input's dtype; under torch2.15-cpu torch's bits for float32, bfloat16 and float16. The
    gradient is eager autograd's: the incoming one over the row, divided by N."""
    return _row_reduction("mean", input, dim, keepdim, order)


def _cross_entropy_refusal(input: Tensor, target: Tensor, weight, size_average, reduce, reduction, label_smoothing) -> str:
    """Why ordo's cross_entropy does not take this F.cross_entropy call ('' when it does): class
    indices over 2-D logits, no class weights, no label smoothing, the reduction given by name."""
    if weight is not None:
        return "class weights (weight=): ordo's cross_entropy has none"
    if size_average is not None or reduce is not None:
        return "size_average= or reduce= (deprecated): pass reduction="
    if label_smoothing != 0.0:
        return f"label_smoothing={label_smoothing}: ordo's cross_entropy has none"
    if reduction not in ("mean", "sum", "none"):
        return f"reduction={reduction!r} is not 'mean', 'sum' or 'none'"
    if input.dim() != 2:
        return f"input is {input.dim()}-D; ordo's cross_entropy takes 2-D logits (rows, classes)"
    if target.dim() != 1 or target.dtype != torch.int64:
        return f"target is {target.dim()}-D {_dt(target)}; ordo's cross_entropy takes int64 class indices, one per row"
    if input.dtype not in _DTYPE_NAMES:
        return f"input dtype {_dt(input)}; ordo runs float32, bfloat16 and float16"
    return ""


def cross_entropy(input: Tensor, target: Tensor, weight: Optional[Tensor] = None, size_average=None, ignore_index: int = -100,
                  reduce=None, reduction: str = "mean", label_smoothing: float = 0.0, *, order: str,
                  backward_order: Optional[str] = None) -> Tensor:
    """F.cross_entropy with ordo's order, for logits (rows, classes) and int64 class indices (rows,):
    log_softmax in the order's softmax, then nll_loss's sum over the rows (PyTorch's cascade of
    partial sums). Under torch2.15-cpu torch's bits, loss and gradient (cross_entropy_backward, in
    backward_order, by default the forward's order). Class weights, label smoothing, class
    probabilities as targets and N-D inputs raise a ValueError; a target out of range raises one
    too (torch raises IndexError)."""
    why = _cross_entropy_refusal(input, target, weight, size_average, reduce, reduction, label_smoothing)
    if why:
        raise ValueError(f"cross_entropy: {why}")
    if input.shape[0] != target.shape[0]:
        raise ValueError(f"cross_entropy: input has {input.shape[0]} rows but target {target.shape[0]}")
    if input.shape[1] == 0:
        return F.cross_entropy(input, target, ignore_index=ignore_index, reduction=reduction)
    if _direct(input, target):
        return _run_cross_entropy(input, target, int(ignore_index), reduction, order)[0]
    return torch.ops.ordo.cross_entropy(input, target, int(ignore_index), reduction, order, backward_order or "")[0]


@torch.compiler.assume_constant_result
def _gqa_gradients_refused(group: int, order: str) -> str:
    """Why an order that reproduces torch runs no grouped-query attention that needs gradients ("": it
    does). torch's flash backward sums dk and dv over a group's heads inside its kernel; the orders
    that reproduce that kernel (torch2.15-cpu) model it, the others (torch2.15-cpu-math) do not.
    A constant of the graph under torch.compile (it builds a kernel, which Dynamo cannot trace)."""
    try:
        _gqa_backward_kernel(order, group)
    except ValueError as e:
        return (f"grouped-query attention ({group} query heads per key/value head) with gradients: torch's flash backward "
                f"sums dk and dv over a group's heads inside its kernel, which '{order}' does not model ({e}; under "
                f"torch.no_grad() ordo runs it)")
    return ""


@functools.lru_cache(maxsize=64)
def _gqa_backward_kernel(order: str, group: int):
    """A small grouped-query attention_backward of `order` (raises ValueError where it has none)."""
    return _ordo.compile_attention(8, 1, 1, "f32", order, False, None, False, "attention_backward", True, heads=group, kv_group=group)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, is_causal: bool = False,
                                 scale: Optional[float] = None, *, attn_mask: Optional[Tensor] = None, enable_gqa: bool = False,
                                 order: str, backward_order: Optional[str] = None) -> Tensor:
    """F.scaled_dot_product_attention without dropout: [..., S_q, D] x [..., S_k, D], causal
    top-left aligned, scale 1/sqrt(D) by default. Gradients run ordo's attention_backward with
    backward_order, by default the forward's order, from the forward's log-sum-exp.

    attn_mask: broadcastable to [..., S_q, S_k], boolean (True takes part; made 0 / -inf in the
    query's dtype, as torch does) or additive (float32 or the query's dtype), never with
    is_causal. The orders that reproduce torch's flash kernel (torch2.15-cpu) add it as that kernel
    does, forward and backward; the flash orders (fast, flash) add it to their scores. It gets no
    gradient.

    enable_gqa=True: key and value may have fewer heads (dim -3) than query, a divisor of its
    count; query head h reads key/value head h // (H_q / H_kv), as in torch. Each group's keys
    are read once per query head with the row strides they have (what torch's flash kernel hands
    its BLAS), so the forward is torch's bits under torch2.15-cpu. So are its gradients there:
    torch's flash backward sums dk and dv over a group's query heads inside its kernel, in one
    chain, and ordo's torch2.15-cpu attention_backward does the same. An order that reproduces
    torch without modelling that (torch2.15-cpu-math) refuses the gradients; the tiled orders
    (fast, flash) give each query head's dk and dv and autograd sums them over the group."""
    scale = None if scale is None else float(scale)
    if enable_gqa and query.dim() >= 3 and key.dim() == query.dim() and key.shape[-3] != query.shape[-3]:
        heads, kv_heads = int(query.shape[-3]), int(key.shape[-3])
        if kv_heads < 1 or heads % kv_heads:
            raise ValueError(f"scaled_dot_product_attention: enable_gqa with {heads} query heads and {kv_heads} key/value "
                             f"heads; the key/value heads must divide the query heads")
        group = heads // kv_heads
        if _exact(order) and torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
            if why := _gqa_gradients_refused(group, backward_order or order):
                raise ValueError(f"scaled_dot_product_attention: {why}; or pick a tiled order (fast, flash)")
            # torch's backward: the op takes K/V with their own heads, its backward sums over the group.
            return _attend(query, key, value, attn_mask, bool(is_causal), scale, order, backward_order)
        out = _attend(*_grouped(query, key, value, group), _grouped_mask(attn_mask, query, key), bool(is_causal), scale, order,
                      backward_order)
        return out.flatten(-4, -3)
    return _attend(query, key, value, attn_mask, bool(is_causal), scale, order, backward_order)


def _attend(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor], is_causal: bool, scale: Optional[float],
            order: str, backward_order: Optional[str]) -> Tensor:
    if attn_mask is not None and is_causal:
        raise ValueError("scaled_dot_product_attention: attn_mask and is_causal together (torch refuses both too)")
    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        raise ValueError("scaled_dot_product_attention: attn_mask requires grad, and ordo's attention gives the mask no "
                         "gradient (torch's math path does); pass attn_mask.detach()")
    if _direct(query, key, value):  # the custom op's own body, without its dispatch
        return _run_attention(query, key, value, is_causal, scale, order, attn_mask)
    return torch.ops.ordo.scaled_dot_product_attention(query, key, value, attn_mask, is_causal, scale, order, backward_order or "")


# --- pinned ----------------------------------------------------------------------------------

def _arg(args, kwargs, i, name, default):
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


# Every dtype's name, filled at import: Dynamo traces _dt, and a dict that grew on a first call
# would make a guard on its keys fail, so the first graph compiled in a process compiled twice.
_DTYPE_TEXT: dict = {d: str(d).replace("torch.", "") for d in vars(torch).values() if isinstance(d, torch.dtype)}


def _dt(t) -> str:
    """A tensor's dtype as torch names it without "torch." ('' for None)."""
    if t is None:
        return ""
    return _DTYPE_TEXT.get(t.dtype) or str(t.dtype).replace("torch.", "")  # a dtype torch's namespace lacks: not stored


_ORDERS = None
# Per thread (as torch's mode stack is), one set of (op, reason) per active pinned block: each
# reason warns once per block.
_blocks = threading.local()


def _warned_stack() -> List[set]:
    if not hasattr(_blocks, "warned"):
        _blocks.warned = []
    return _blocks.warned


def _orders():
    """{name: reproduces a library bit for bit}"""
    global _ORDERS
    if _ORDERS is None:
        _ORDERS = {o["name"]: o["exact"] for o in _ordo.orders()}
    return _ORDERS


def _exact(order: str) -> bool:
    return _orders().get(order.split("(", 1)[0], False)


def _with_threads(order: str, threads: int) -> str:
    """An order that reproduces torch 2.15 names torch's thread count: torch splits a single long
    row of rms_norm between threads, MKL some attention products, and Inductor's kernels long
    rows; other orders are taken as given."""
    if "(" in order or threads <= 1 or not order.startswith(("torch2.15-cpu", "inductor2.15-cpu")):
        return order
    return f"{order}(threads={threads})"


def _why_not(op: str, order: str, call: tuple, resolve_only: bool = False) -> str:
    """'' when ordo runs this call with `order`; else the reason it cannot. `call` is plain data
    (dtype names, flags, the sizes ordo compiles for) so the result is a constant of a traced
    graph. resolve_only: compile nothing, only check the requests against their orders
    (gen::resolve: every refusal a compile raises for the request itself; one that only building
    the kernel finds, which is rare, is left to the compile)."""
    def row_kernel(op, cols, xd, wd, order, eps, weight, bias, mixed, acc):
        if resolve_only:
            _ordo.compile(op, cols, xd, wd, order, eps, weight, bias, mixed, acc, resolve_only=True)
        else:
            ordo._row_kernel(op, cols, xd, wd, order, eps, weight, bias, mixed, acc)

    if op in ("layer_norm", "rms_norm"):
        x_dtype, w_dtype, b_dtype, n, eps, last_contiguous = call
        for what, dt in (("input", x_dtype), ("weight", w_dtype), ("bias", b_dtype)):
            if dt and getattr(torch, dt) not in _DTYPE_NAMES:
                return f"{what} dtype {dt}; ordo runs float32, bfloat16 and float16"
        if op == "rms_norm" and not last_contiguous and _exact(order):
            # layer_norm and softmax copy a strided input to rows first; F.rms_norm's composite
            # reduces it in place, in another order (measured: its bits change with the layout).
            return (f"the input's last dim is strided: torch's rms_norm sums such a row in another order than a "
                    f"contiguous one, which '{order}' does not model; pass a contiguous input")
        wd = w_dtype or b_dtype
        if n == 0:
            return ""
        try:
            row_kernel(op, n, _DTYPE_NAMES[getattr(torch, x_dtype)], _DTYPE_NAMES[getattr(torch, wd)] if wd else "", order,
                       float(eps), bool(w_dtype), bool(b_dtype), bool(wd) and wd != x_dtype, "")
        except ValueError as e:
            return str(e)
        return ""
    if op in ("softmax", "log_softmax"):
        x_dtype, ndim, cols, dim, dtype = call
        if dim is None:
            return "dim=None (torch picks a dim implicitly); pass dim=-1"
        if not isinstance(dim, int):
            return f"dim={dim!r} is not an int"
        if ndim == 0:
            return "the input is 0-d; ordo reduces a last dim"
        if dim not in (-1, ndim - 1):
            return f"dim={dim} is not the last dim; ordo reduces the last dim only"
        dt = dtype or x_dtype
        if getattr(torch, dt) not in _DTYPE_NAMES:
            return f"dtype {dt}; ordo runs float32, bfloat16 and float16"
        if cols == 0:
            return ""
        try:
            row_kernel(op, cols, _DTYPE_NAMES[getattr(torch, dt)], "", order, 0.0, False, False, False, "")
        except ValueError as e:
            return str(e)
        return ""
    if op in _POINTWISE_OPS:
        dtype, cols, layout, one_element, inplace, grad = call
        if inplace:
            return "inplace=True; ordo writes a new tensor"
        if getattr(torch, dtype) not in _DTYPE_NAMES:
            return f"dtype {dtype}; ordo runs float32, bfloat16 and float16"
        if _exact(order) and (layout == "strided" or layout == "rows" and op == "gelu"):
            return (f"the input is not contiguous{'' if op == 'gelu' else ' and not rows of a wider tensor'}: torch then computes it "
                    f"in another order ({_POINTWISE_STRIDED[op]}), which '{order}' does not model; pass a contiguous input")
        if op == "gelu" and _exact(order) and one_element:
            return f"a single element: torch computes it with ATen's own erf kernel, not oneDNN's, which '{order}' does not model"
        if cols == 0:
            return ""
        try:
            row_kernel(op, cols, _DTYPE_NAMES[getattr(torch, dtype)], "", order, 0.0, False, False, False, "")
            if grad:
                _ordo.compile(op + "_backward", cols, _DTYPE_NAMES[getattr(torch, dtype)], "", order, resolve_only=resolve_only)
        except ValueError as e:
            return str(e)
        return ""
    if op == "cross_entropy":
        refusal, dtype, cols, ignore_index, reduction, grad = call
        if refusal:
            return refusal
        try:
            _ordo.compile("cross_entropy", cols, dtype, "", order, ignore_index=ignore_index, reduction=reduction,
                          resolve_only=resolve_only)
            if grad:
                _ordo.compile("cross_entropy_backward", cols, dtype, "", order, ignore_index=ignore_index, reduction=reduction,
                              resolve_only=resolve_only)
        except ValueError as e:
            return str(e)
        return ""
    # scaled_dot_product_attention
    (q_dtype, k_dtype, v_dtype, ndim, shapes_ok, d, s_q, s_k, last_contiguous, mask, dropout_p, is_causal, scale,
     group, grad) = call
    if dropout_p != 0.0:
        return f"dropout_p={dropout_p}; ordo's attention has no dropout"
    if ndim != 4:
        return f"query is {ndim}-D; torch runs its flash kernel (which ordo reproduces) on 4-D inputs only"
    if not (q_dtype == k_dtype == v_dtype):
        return f"query, key, value dtypes differ ({q_dtype}, {k_dtype}, {v_dtype})"
    if getattr(torch, q_dtype) not in _DTYPE_NAMES:
        return f"dtype {q_dtype}; ordo runs float32, bfloat16 and float16"
    if not all(last_contiguous) and _exact(order):
        return (f"a last dim is strided (contiguous: query {last_contiguous[0]}, key {last_contiguous[1]}, value "
                f"{last_contiguous[2]}): torch then runs its math path, not the flash kernel '{order}' reproduces; pass "
                f"tensors whose last dim is contiguous")
    if not shapes_ok:
        return ("query, key, value shapes: ordo needs one batch, one head dim, key and value of one shape, and as many "
                "key/value heads as query heads, or one (which torch broadcasts), or with enable_gqa=True a divisor of them "
                "(no other broadcasting)")
    if mask is not None:  # (dtype, dims, shape fits torch's flash kernel, requires grad, the spans' text)
        mask_dtype, mask_dims, mask_fits, mask_grad, mask_spans = mask
        if is_causal:
            return "attn_mask and is_causal together (torch raises)"
        if mask_grad:
            return "attn_mask requires grad: torch runs its math path, not the flash kernel ordo reproduces"
        if not mask_fits:
            return (f"attn_mask is {mask_dims}-D or its sizes do not fit the query's: torch's flash kernel (which ordo "
                    f"reproduces) takes a 2-D or 4-D mask whose dims are 1 or the query's")
        if mask_dtype not in ("bool", "float32", q_dtype):
            return f"attn_mask dtype {mask_dtype}; ordo takes a boolean mask, float32 or the query's dtype"
    if group > 1 and grad and _exact(order) and (why := _gqa_gradients_refused(group, order)):
        return why
    try:
        mask_text = f"{'f32' if mask[0] == 'float32' else _DTYPE_NAMES[getattr(torch, q_dtype)]}:{mask[4]}" if mask is not None else ""
        if resolve_only:
            _ordo.compile_attention(d, s_q, s_k, _DTYPE_NAMES[getattr(torch, q_dtype)], order, bool(is_causal), scale, False,
                                    mask=mask_text, resolve_only=True)
        elif mask is not None:
            _attention_plan(d, s_q, s_k, getattr(torch, q_dtype), order, False, scale, 1, (0, 0, 0), mask_text)
        else:
            ordo._attention_kernel(d, s_q, s_k, _DTYPE_NAMES[getattr(torch, q_dtype)], order, bool(is_causal), scale, False)
    except ValueError as e:
        return str(e)
    return ""


def _specimen(spec) -> Optional[Tensor]:
    """A tensor of normal values with a call argument's (shape, strides, dtype name), for timing;
    None for an absent argument. Strides may overlap (an expanded K/V head). Drawn from a generator
    of its own: the global one's stream (dropout's masks) must not move because pinned timed."""
    if spec is None:
        return None
    shape, strides, dt = spec
    extent = 1 + builtins.sum((size - 1) * stride for size, stride in zip(shape, strides)) if all(shape) else 0
    values = torch.randn(extent, generator=torch.Generator().manual_seed(extent))
    return values.to(getattr(torch, dt)).as_strided(shape, strides)


def _spec(t: Optional[Tensor]):
    """A tensor argument as _specimen rebuilds it (None for an absent one). Reading the sizes
    specializes them in a trace: pinned reads them only where none is symbolic."""
    return None if t is None else (tuple(t.shape), tuple(t.stride()), _dt(t))


@torch.compiler.assume_constant_result
def _trace_has_symbolic_sizes() -> bool:
    """While Dynamo traces: whether its frame has symbolic sizes (torch.compile(dynamic=True), or
    automatic dynamic shapes after a recompile). Runs at trace time, with the trace's fake
    tensors made for the tensors the traced code has touched so far."""
    from torch._guards import TracingContext
    context = TracingContext.try_get()
    shape_env = getattr(getattr(context, "fake_mode", None), "shape_env", None)
    if shape_env is None:
        return True  # no way to tell: read no size
    symbols = getattr(shape_env, "backed_var_to_val", None)
    return bool(shape_env.var_to_val if symbols is None else symbols)


def _calls_to_time(op: str, run: str, call: tuple, specs: tuple):
    """(torch's own call, ordo's call with order `run`) of one routed call, on specimens."""
    if op in ("layer_norm", "rms_norm"):
        x, w, b = (_specimen(s) for s in specs[:3])
        shape, eps = specs[3], call[4]
        if op == "layer_norm":
            return (lambda: F.layer_norm(x, shape, w, b, eps)), (lambda: layer_norm(x, shape, w, b, eps, order=run))
        return (lambda: F.rms_norm(x, shape, w, eps)), (lambda: rms_norm(x, shape, w, eps, order=run))
    if op in ("softmax", "log_softmax"):
        x, dim, dtype = _specimen(specs[0]), call[3], getattr(torch, call[4]) if call[4] else None
        theirs, ours = (F.softmax, softmax) if op == "softmax" else (F.log_softmax, log_softmax)
        return (lambda: theirs(x, dim, dtype=dtype)), (lambda: ours(x, dim, dtype, order=run))
    if op in _POINTWISE_OPS:
        x = _specimen(specs[0])
        if op == "silu":
            return (lambda: F.silu(x)), (lambda: silu(x, order=run))
        approximate = "none" if op == "gelu" else "tanh"
        return (lambda: F.gelu(x, approximate=approximate)), (lambda: gelu(x, approximate, order=run))
    if op == "cross_entropy":
        x, ignore_index, reduction = _specimen(specs[0]), call[3], call[4]
        target = torch.zeros(x.shape[0], dtype=torch.int64)
        return ((lambda: F.cross_entropy(x, target, ignore_index=ignore_index, reduction=reduction)),
                (lambda: cross_entropy(x, target, ignore_index=ignore_index, reduction=reduction, order=run)))
    q, k, v = (_specimen(s) for s in specs[:3])
    mask = _specimen(specs[3]) if len(specs) > 3 else None
    is_causal, scale, gqa = call[11], call[12], call[13] > 1
    return ((lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale, enable_gqa=gqa)),
            (lambda: scaled_dot_product_attention(q, k, v, is_causal, scale, attn_mask=mask, enable_gqa=gqa, order=run)))


# How long pinned may time one call signature's two kernels (after a first call of each).
_TIMING_BUDGET_S = 0.05


@functools.lru_cache(maxsize=4096)
def _torch_is_faster(op: str, run: str, call: tuple, specs: tuple, in_graph: bool) -> bool:
    """Whether torch's own kernel runs this call faster than ordo's, measured once per process and
    signature: remembered, because a trace that Dynamo restarts (after a graph break) must take
    the same branch again."""
    return _time_torch_against_ordo(op, run, call, specs, in_graph)


def _time_torch_against_ordo(op: str, run: str, call: tuple, specs: tuple, in_graph: bool) -> bool:
    """Whether torch's own kernel runs this call faster than ordo's: each called once
    (ordo compiles its kernel here), then the two alternately, the fastest of each compared, up
    to 9 rounds within _TIMING_BUDGET_S (at least 3). On specimens of the call's shapes, strides
    and dtypes, outside every mode and without a gradient; ordo's through its custom op when the
    call is in a compiled graph (the path the graph takes). A tie goes to torch."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import _disable_current_modes
    with unset_fake_temporarily(), _disable_current_modes(), torch._C.DisableTorchFunction(), torch.no_grad():
        theirs, ours = _calls_to_time(op, run, call, specs)
        _as_in_a_graph.on = in_graph
        try:
            best = [math.inf, math.inf]
            deadline = time.perf_counter() + _TIMING_BUDGET_S
            for rounds in range(10):
                for i, fn in enumerate((theirs, ours)):
                    start = time.perf_counter()
                    fn()
                    if rounds:
                        best[i] = min(best[i], time.perf_counter() - start)
                if rounds >= 3 and time.perf_counter() > deadline:
                    break
        finally:
            _as_in_a_graph.on = False
    return best[0] <= best[1]


@torch.compiler.assume_constant_result
def _route(op: str, order: str, strict: bool, threads: int, call: tuple, specs: Optional[tuple] = None,
           in_graph: bool = False) -> Tuple[str, str, str]:
    """(the order to run this call with, or '' for torch's own op; the error to raise when
    strict, else ''; the warning for a fallback, else ''). Runs once per call in eager and once at
    trace time under torch.compile, where its result is a constant of the graph. The caller
    raises, so that Dynamo sees an ordinary exception of user code, and warns through
    _fallback_warning, so that a graph warns each time it runs in a new block.
    specs: given when torch's own kernel computes this call in `order`'s bits (pinned's
    kernels="fastest" with the running torch's order): then the faster of the two runs, measured
    (_torch_is_faster), with no warning either way."""
    run = _with_threads(order, threads)
    why = _why_not(op, run, call)
    if not why:
        if specs is not None and _torch_is_faster(op, run, call, specs, in_graph):
            return "", "", ""
        return run, "", ""
    if strict:
        return "", f"ordo.torch.pinned({order!r}): {op} cannot run in ordo: {why}", ""
    return "", "", f"ordo.torch.pinned({order!r}): {op} runs torch's own kernel, not ordo's: {why}"


@functools.lru_cache(maxsize=1024)
def _route_in_eager(op: str, order: str, strict: bool, threads: int, call: tuple,
                    specs: Optional[tuple]) -> Tuple[str, str, str]:
    """_route, remembered: in eager code every call of a block asks it, and its answer depends on
    nothing but its arguments (a routed call's kernel is compiled, or refused, by request; the
    faster kernel is measured once per call signature)."""
    return _route(op, order, strict, threads, call, specs, False)


# pinned's kernels="fastest" in eager code: a call signature whose bits torch's own kernel computes
# runs torch's kernel until torch has spent this long on it; only then does pinned compile ordo's
# kernel for it and time the two (_torch_is_faster). That compile and timing cost about this much
# (measured: a torch2.15-cpu attention kernel compiles in about 30 ms, the timing takes up to
# _TIMING_BUDGET_S), so a signature never costs more than about twice what the better choice
# would have, whichever it is (the rent-or-buy rule). A decode loop, whose K/V length is new at
# every step, so compiles nothing; a shape called many times is measured and may run ordo's.
_MEASURE_AFTER_S = 0.1
# Seconds torch's kernel has run each such signature so far, by (op, order, torch's threads, the
# call's plain data, its tensors' shapes, strides and dtypes); bounded: the oldest entries go first.
_torch_seconds: dict = {}
_TORCH_SECONDS_ENTRIES = 4096
# The signature of the call that pinned has just left to torch's kernel to be charged its time.
_deferred = threading.local()


def _defers_to_torch(key: tuple) -> bool:
    """Whether this call signature runs torch's kernel without a measurement yet (_MEASURE_AFTER_S)."""
    spent = _torch_seconds.get(key)
    if spent is None:
        if len(_torch_seconds) >= _TORCH_SECONDS_ENTRIES:  # another thread may have dropped it first
            _torch_seconds.pop(next(iter(_torch_seconds), None), None)
        _torch_seconds[key] = spent = 0.0
    return spent < _MEASURE_AFTER_S


def _run_torch_charged(func, args, kwargs):
    """func(*args, **kwargs), its time charged to the signature _route_call deferred, if any."""
    key = _deferred.__dict__.pop("key", None)
    if key is None:
        return func(*args, **kwargs)
    start = time.perf_counter()
    try:
        return func(*args, **kwargs)
    finally:
        if key in _torch_seconds:
            _torch_seconds[key] += time.perf_counter() - start


def _route_call(op: str, order: str, strict: bool, threads: int, call: tuple,
                specs: Optional[tuple] = None) -> Tuple[str, str, str]:
    """_route for one call: remembered in eager code; asked afresh while Dynamo traces (its result
    is then a constant of the graph, and Dynamo would not trace through the cache) and for a call
    the cache cannot key (an unhashable argument, such as F.softmax's dim given as a list, which
    _route names in its refusal). In eager code a signature whose bits torch's kernel computes
    (specs given) goes to torch's kernel, unasked, until torch has run it for _MEASURE_AFTER_S
    (the caller charges the time: _run_torch_charged); not under strict=True, and not a call
    whose request ordo refuses (_refused), so that a refusal raises or warns at the first call."""
    if torch.compiler.is_compiling():
        return _route(op, order, strict, threads, call, specs, True)
    if not _hashable(call):
        return _route(op, order, strict, threads, call, specs, False)
    _deferred.__dict__.pop("key", None)
    if specs is not None and not strict and not _refused(op, _with_threads(order, threads), call):
        key = (op, order, threads, call, specs)
        if _defers_to_torch(key):
            _deferred.key = key
            return "", "", ""
    return _route_in_eager(op, order, strict, threads, call, specs)


@functools.lru_cache(maxsize=4096)
def _refused(op: str, run: str, call: tuple) -> bool:
    """Whether ordo refuses this call by its request alone (_why_not, compiling nothing): such a
    call is routed at once, so that its fallback warns at the first call."""
    return bool(_why_not(op, run, call, resolve_only=True))


def _hashable(value) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False


def _warn_once_per_block(text: str, stacklevel: int) -> None:
    stack = _warned_stack()
    seen = stack[-1] if stack else set()
    if text not in seen:
        seen.add(text)
        warnings.warn(text, OrdoFallbackWarning, stacklevel=stacklevel + 1)


# A fallback's warning as an operator of the graph, so that a compiled graph run again in a later
# pinned block warns there too (a warning at trace time alone would be silent on reuse). It has
# a side effect, so no pass removes it.
@torch.library.custom_op("ordo::fallback_warning", mutates_args=())
def _fallback_warning_op(text: str) -> None:
    _warn_once_per_block(text, stacklevel=4)


@_fallback_warning_op.register_fake
def _(text):
    return None


torch.fx.node.has_side_effect(torch.ops.ordo.fallback_warning.default)


def _fallback_warning(text: str) -> None:
    """Warns once per pinned block and text: now in eager code, each time the graph runs in
    compiled code."""
    if torch.compiler.is_compiling():
        torch.ops.ordo.fallback_warning(text)
    else:
        _warn_once_per_block(text, stacklevel=3)


def _interpolate_when_compiled(args, kwargs) -> str:
    """F.interpolate(input, size, scale_factor, mode, align_corners, recompute_scale_factor,
    antialias): '' for the modes a compile keeps exact, else why it cannot."""
    mode, antialias = _arg(args, kwargs, 3, "mode", "nearest"), bool(_arg(args, kwargs, 6, "antialias", False))
    if mode in ("nearest", "nearest-exact") and not antialias:
        return ""
    return (f"mode={mode!r}{' with antialias' if antialias else ''}: a compile traces it through torch's Python "
            f"decomposition of upsample, which rounds otherwise than eager's kernel (measured in lite mode: linear, "
            f"bilinear and bicubic differ from eager in 35% to 81% of their outputs)")


# Functions that a compile traces into other arithmetic than eager's kernels even in Inductor's
# lite mode (a Python decomposition registered for a composite op), with the test of a call's
# arguments that says why ('' where the call stays exact). Inside the block such a call breaks
# the graph and runs eagerly. Measured in torch 2.15 on the CPU; nearest interpolation,
# batch_norm, matmul, LSTM, GRU and stft kept eager's bits there.
_INEXACT_WHEN_COMPILED = {F.interpolate: ("interpolate", _interpolate_when_compiled)}


@functools.partial(torch.compiler.disable, reason="ordo.torch.pinned runs this call eagerly so that it keeps eager's "
                                                  "bits (its OrdoFallbackWarning names the op)")
def _run_eagerly(func, args, kwargs, note: str):
    """The call, eagerly, with one warning per pinned block (this runs each time the compiled
    code reaches it, so a reused graph warns in a new block too)."""
    _warn_once_per_block(note, stacklevel=2)
    return func(*args, **kwargs)


@torch.compiler.assume_constant_result
def _torch_threads() -> int:
    return torch.get_num_threads()


def _promises_eager_bits(order: str) -> bool:
    """The torch2.15-cpu orders promise eager PyTorch 2.15's bits, so a compile inside their
    block must keep eager's kernels for the ops ordo does not run."""
    return order.startswith("torch2.15-cpu") and _exact(order)


def _eager_kernels_config():
    """Inductor's settings under which every op of a compiled graph runs as an ATen call, the
    kernel eager runs, with no fusion, decomposition or graph rewrite: torch 2.15's lite mode
    (torch._inductor.lite_mode_options, what torch.compile(mode="lite") applies). Measured: a
    Hugging Face model compiled so gives eager's logits and gradients bit for bit, where
    Inductor's generated code (even under TORCHINDUCTOR_NUMERICS=strict) does not."""
    import torch._inductor
    options = getattr(torch._inductor, "lite_mode_options", None)
    if options is None:
        raise RuntimeError(f"ordo.torch.pinned: torch {torch.__version__} has no Inductor lite mode "
                           f"(torch._inductor.lite_mode_options), which keeps eager's kernels in compiled code; pass "
                           f"eager_kernels=False to compile with Inductor's own kernels")
    # Inductor checks each ATen call's output against its traced size, stride and dtype as the
    # graph runs (a Python call per op, 0.6 ms of a small Llama's 4 ms forward); in lite mode every
    # op is such a call. The graph is eager's ATen calls, whose metadata the trace took from them.
    _allow_lite_mode_fallbacks()
    return torch._inductor.config.patch({**options, "size_asserts": False})


@functools.cache
def _allow_lite_mode_fallbacks() -> None:
    """Lets lite mode call eager's kernel for an op Inductor has a decomposition for but no
    lowering. Lite mode keeps such an op undecomposed in its graph (selective_decompose), and
    then Inductor's lowering refuses to make it a fallback ("both a fallback and a decomp for same
    op"): measured in torch 2.15, the backward of a compiled F.layer_norm or softmax with torch's
    own kernel (aten.native_layer_norm_backward, aten._softmax_backward_data) fails so, outside
    ordo too. Such ops join Inductor's FALLBACK_ALLOW_LIST (torch._inductor.lowering), whose ops
    are made fallbacks without that check: an ATen call, eager's kernel, as lite mode makes every
    other op. Process-wide from the first block on, and never undone: AOTAutograd may compile a
    backward graph when backward() runs, after the block (it keeps lite mode's config for it, not
    this list); outside lite mode these ops are decomposed before lowering, so the list changes
    nothing there but the assertion error."""
    import torch._inductor.lowering as lowering
    from torch._inductor.decomposition import select_decomp_table
    for op in select_decomp_table():
        if isinstance(op, torch._ops.OpOverload) and op not in lowering.lowerings:
            lowering.FALLBACK_ALLOW_LIST.add(op.name().split(".")[0])


class _InductorCompilesInTheBlock:
    """While active, each graph torch.compile's Inductor backend compiles (torch.compile(model),
    backend="inductor": torch._TorchCompileInductorWrapper) is compiled under `config` (a
    context manager factory, or None: lite mode's settings for eager's kernels) and runs with
    torch-function handling off, so that its ATen calls do not pass through pinned's
    TorchFunctionMode one by one (a Python call each: a small Llama's forward makes about 180).
    The mode has done its work when the graph was traced: a routed call is an ordo operator in
    the graph. Patches the wrapper's __call__ for the block (process-wide, like Inductor's config
    patches) and imports none of Inductor's compiler until it compiles: importing
    torch._inductor.compile_fx takes about a second, which a block of eager code should not pay.
    The config, once applied by the block's first compile, stays until the block ends:
    AOTAutograd compiles a backward graph when backward() first runs, and inside the block that
    compile takes it too. A backend of the user's own that calls Inductor's compile_fx itself
    compiles with the settings in force. The backward graphs AOTAutograd compiles run from
    autograd, still inside the mode."""

    def __init__(self, config):
        self._config = config
        self._applied = None  # the config's patch, from the block's first compile to its end

    def __enter__(self):
        wrapper = torch._TorchCompileInductorWrapper
        self._call = inner = wrapper.__call__

        @functools.wraps(inner)
        def compile_in_the_block(self_, *args, **kwargs):
            if self._config is not None and self._applied is None:
                self._applied = self._config()
                self._applied.__enter__()
            compiled = inner(self_, *args, **kwargs)

            def run_outside_the_mode(*call_args, **call_kwargs):
                with torch._C.DisableTorchFunction():
                    return compiled(*call_args, **call_kwargs)

            if hasattr(compiled, "_boxed_call"):  # Dynamo calls a boxed function with one list
                run_outside_the_mode._boxed_call = compiled._boxed_call
            return run_outside_the_mode

        wrapper.__call__ = compile_in_the_block
        return self

    def __exit__(self, *exc):
        torch._TorchCompileInductorWrapper.__call__ = self._call
        if self._applied is not None:
            self._applied.__exit__(None, None, None)
            self._applied = None


class pinned(TorchFunctionMode):
    """with ordo.torch.pinned(order): torch's layer_norm, rms_norm, softmax, log_softmax and
    scaled_dot_product_attention run ordo's kernels with `order`, in eager mode and in functions
    torch.compile traces inside the block. A call ordo cannot run goes to torch with one
    OrdoFallbackWarning per block and reason, or raises ValueError when strict=True. Gradients of
    the routed calls run ordo's backward kernels with `backward_order` (default: `order`).
    eager_kernels (default: True for the torch2.15-cpu orders): compiles inside the block keep
    eager's ATen kernels for every op ordo does not run (see the module's docstring).
    kernels: "fastest" (default) runs torch's own kernel instead of ordo's where it computes the
    order's bits (order "torch2.15-cpu" under torch 2.15 with no backward_order, in eager code or
    with eager_kernels) and is measured faster; "ordo" runs ordo's kernel for every call it can run."""

    def __init__(self, order: str, *, strict: bool = False, backward_order: Optional[str] = None,
                 eager_kernels: Optional[bool] = None, kernels: str = "fastest"):
        super().__init__()
        if kernels not in ("fastest", "ordo"):
            raise ValueError(f"kernels={kernels!r}: 'fastest' (torch's own kernel where it computes the order's bits "
                             f"and runs faster) or 'ordo' (ordo's kernel for every call it can run)")
        if not isinstance(order, str) or not order:
            raise ValueError(f"order must be a non-empty string, got {order!r}")
        base = order.split("(", 1)[0]
        if base not in _orders():
            raise ValueError(f"unknown order '{order}'; ordo.orders() lists them")
        if base.startswith(("llama-rmsnorm", "gemma-rmsnorm")):
            raise ValueError(f"order '{order}' is a Hugging Face RMSNorm class's formula, not F.rms_norm's; pinned routes "
                             f"torch's functions, so it would change their math (call ordo.torch.rms_norm with it instead)")
        self.order = order
        self.strict = bool(strict)
        if backward_order is not None and backward_order.split("(", 1)[0] not in _orders():
            raise ValueError(f"unknown backward_order '{backward_order}'; ordo.orders() lists them")
        self.backward_order = backward_order
        if eager_kernels is None:
            eager_kernels = _promises_eager_bits(order)
        self.eager_kernels = bool(eager_kernels)
        # torch's own kernels compute this order's bits: the running torch's order (the alias
        # for this capability and host; threads are torch's), under torch 2.15, with no other
        # backward order asked for.
        self._torch_runs_the_order = (kernels == "fastest" and order == "torch2.15-cpu" and backward_order is None
                                      and torch.__version__.split("+")[0].startswith("2.15."))

    def _route(self, op: str, call: tuple, specs: Optional[tuple]) -> str:
        """The order to run this call with ('' for torch's own op), by _route_call: raises its
        error under strict=True, warns its fallback note."""
        order, error, note = _route_call(op, self.order, self.strict, _torch_threads(), call, specs)
        if error:
            raise ValueError(error)
        if note:
            _fallback_warning(note)
        return order

    def _backward_order(self) -> Optional[str]:
        """backward_order as a routed call takes it (torch's thread count named), or None."""
        return _with_threads(self.backward_order, _torch_threads()) if self.backward_order else None

    def _specs(self, *tensors, extra=None) -> Optional[tuple]:
        """What _route times torch's kernel against ordo's on, when torch's kernel may run the call
        with the order's bits: in eager code, and in compiled code whose other ops are eager's
        kernels (lite mode; Inductor's own code would not call torch's kernel for it) and whose
        sizes are all static (reading a symbolic size would specialize it; with symbolic sizes
        ordo's kernel runs, as under kernels="ordo"). Else None."""
        if not self._torch_runs_the_order:
            return None
        if torch.compiler.is_compiling():
            for t in tensors:  # every argument's fake tensor made before the frame is asked
                if t is not None:
                    t.dim()
            if not self.eager_kernels or _trace_has_symbolic_sizes():
                return None
        specs = tuple(_spec(t) for t in tensors)
        return specs if extra is None else specs + (tuple(extra),)

    def __enter__(self):
        _warned_stack().append(set())
        # Floats a routed call passes (eps, scale, dropout_p) are part of the order ordo runs,
        # so they stay constants of a traced graph under dynamic=True too.
        self._patches = [torch._dynamo.config.patch(specialize_float=True),
                         _InductorCompilesInTheBlock(_eager_kernels_config if self.eager_kernels else None)]
        for patch in self._patches:
            patch.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for patch in reversed(self._patches):
                patch.__exit__(None, None, None)
            _warned_stack().pop()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # Dynamo traces this method. What _route decides from must be constants: conditions on
        # sizes and strides become constants through `True if ... else False` (a guard), and the
        # sizes ordo compiles its kernel for through operator.index, which specializes a
        # symbolic size (dynamic=True, or automatic dynamic shapes) to its value with a guard.
        # Every other size stays symbolic: a graph compiled with dynamic shapes serves every
        # row count, and a new reduced length or attention shape recompiles it.
        kwargs = kwargs or {}
        if func not in _ROUTED:
            # Every op of a graph compiled inside the block passes here as it runs: the shortest path.
            return func(*args, **kwargs)
        if func in _NORMS:
            op = _NORMS[func]
            x, norm_shape, w = args[0], _arg(args, kwargs, 1, "normalized_shape", None), _arg(args, kwargs, 2, "weight", None)
            if op == "layer_norm":
                b, eps = _arg(args, kwargs, 3, "bias", None), _arg(args, kwargs, 4, "eps", 1e-5)
            else:
                b, eps = None, _arg(args, kwargs, 3, "eps", None)
                eps = _RMS_NORM_DEFAULT_EPS if eps is None else eps
            shape = (norm_shape,) if isinstance(norm_shape, int) else tuple(norm_shape)
            shape_ok = True if 0 < len(shape) <= x.dim() and tuple(x.shape[x.dim() - len(shape):]) == shape else False
            if not shape_ok:
                return func(*args, **kwargs)  # torch's own error for a normalized_shape that does not fit
            n = 1
            for size in shape:
                n = n * operator.index(size)
            last_contiguous = True if x.shape[-1] == 1 or x.stride(-1) == 1 else False
            call = (_dt(x), _dt(w), _dt(b), n, float(eps), last_contiguous)
            order = self._route(op, call, self._specs(x, w, b, extra=shape))
            if order:
                if op == "layer_norm":
                    return layer_norm(x, shape, w, b, eps, order=order, backward_order=self._backward_order())
                return rms_norm(x, shape, w, eps, order=order, backward_order=self._backward_order())
        elif func in _SOFTMAXES:
            op = _SOFTMAXES[func]
            # F.softmax(input, dim, _stacklevel, dtype); torch.softmax and Tensor.softmax (input, dim, dtype)
            x, dim = args[0], _arg(args, kwargs, 1, "dim", None)
            dtype = _arg(args, kwargs, 3 if func in (F.softmax, F.log_softmax) else 2, "dtype", None)
            call = (_dt(x), x.dim(), operator.index(x.shape[-1]) if x.dim() else 1, dim, _dt_name(dtype))
            order = self._route(op, call, self._specs(x))
            if order:
                return (softmax if op == "softmax" else log_softmax)(x, dim, dtype, order=order, backward_order=self._backward_order())
        elif func is F.cross_entropy:
            # F.cross_entropy(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)
            x, target = args[0], _arg(args, kwargs, 1, "target", None)
            weight, size_average = _arg(args, kwargs, 2, "weight", None), _arg(args, kwargs, 3, "size_average", None)
            ignore_index, reduce = _arg(args, kwargs, 4, "ignore_index", -100), _arg(args, kwargs, 5, "reduce", None)
            reduction, smoothing = _arg(args, kwargs, 6, "reduction", "mean"), _arg(args, kwargs, 7, "label_smoothing", 0.0)
            refusal = _cross_entropy_refusal(x, target, weight, size_average, reduce, reduction, float(smoothing))
            shape_ok = True if not refusal and x.shape[0] == target.shape[0] else False
            if not refusal and not shape_ok:
                return func(*args, **kwargs)  # torch's own error for mismatched rows
            cols = operator.index(x.shape[1]) if not refusal else 0
            if not refusal and cols == 0:
                return func(*args, **kwargs)
            grad = True if torch.is_grad_enabled() and x.requires_grad else False
            call = (refusal, _DTYPE_NAMES.get(x.dtype, ""), cols, int(ignore_index), reduction, grad)
            order = self._route("cross_entropy", call, self._specs(x, extra=(int(ignore_index),)))
            if order:
                return cross_entropy(x, target, ignore_index=int(ignore_index), reduction=reduction, order=order,
                                     backward_order=self._backward_order())
        elif func in _POINTWISE:
            # F.silu(input, inplace); F.gelu(input, approximate)
            x = args[0]
            if func is F.gelu:
                approximate, inplace = _arg(args, kwargs, 1, "approximate", "none"), False
                if approximate not in ("none", "tanh"):
                    return func(*args, **kwargs)  # torch's own error
                op = "gelu" if approximate == "none" else "gelu_tanh"
            else:
                approximate, inplace, op = None, bool(_arg(args, kwargs, 1, "inplace", False)), "silu"
            layout = _pointwise_layout(x)
            one_element = True if x.numel() == 1 else False
            cols = operator.index(x.shape[-1]) if x.dim() else 1
            grad = True if torch.is_grad_enabled() and x.requires_grad else False
            call = (_dt(x), cols, layout, one_element, inplace, grad)
            order = self._route(op, call, self._specs(x))
            if order and layout == "rows" and _exact(order):
                # torch loops over each row of the view; the order's tails follow (its backward too)
                order = _add_param(order, "inner_loop=row")
            if order:
                backward_order = self._backward_order()
                if backward_order and layout == "rows" and _exact(backward_order):
                    backward_order = _add_param(backward_order, "inner_loop=row")
                if op == "silu":
                    return silu(x, order=order, backward_order=backward_order)
                return gelu(x, approximate, order=order, backward_order=backward_order)
        elif func is F.dropout and self.eager_kernels:
            # F.dropout(input, p, training, inplace): only what eager computes with its composite
            x, p = args[0], float(_arg(args, kwargs, 1, "p", 0.5))
            training, inplace = _arg(args, kwargs, 2, "training", True), _arg(args, kwargs, 3, "inplace", False)
            if training and 0.0 < p <= 1.0 and not inplace and x.dtype.is_floating_point:
                return _eager_dropout_op(x, p)[0]
        elif func in _INEXACT_WHEN_COMPILED:
            op, test = _INEXACT_WHEN_COMPILED[func]
            why = test(args, kwargs) if self.eager_kernels and torch.compiler.is_compiling() else ""
            if why:
                # Dynamo does not trace into _run_eagerly: the call runs between two compiled
                # graphs, on torch's kernel; under fullgraph=True Dynamo reports the break.
                return _run_eagerly(func, args, kwargs, f"ordo.torch.pinned({self.order!r}): {op} runs eagerly, between "
                                    f"compiled graphs (a graph break), so that it keeps eager's bits: {why}")
        elif func is F.scaled_dot_product_attention:
            q, k, v = args[0], _arg(args, kwargs, 1, "key", None), _arg(args, kwargs, 2, "value", None)
            mask = _arg(args, kwargs, 3, "attn_mask", None)
            dropout_p = float(_arg(args, kwargs, 4, "dropout_p", 0.0))
            is_causal = bool(_arg(args, kwargs, 5, "is_causal", False))
            scale = _arg(args, kwargs, 6, "scale", None)
            enable_gqa = bool(_arg(args, kwargs, 7, "enable_gqa", False))
            four_d = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
            # One key/value head without enable_gqa broadcasts over the query heads: torch's flash
            # kernel then computes what it does with enable_gqa=True, gradients included (measured:
            # Falcon's multi-query attention), so ordo runs it as one group.
            heads_ok = four_d and (q.shape[1] == k.shape[1] or
                                   (enable_gqa or k.shape[1] == 1) and k.shape[1] > 0 and q.shape[1] % k.shape[1] == 0)
            shapes_ok = True if heads_ok and q.shape[0] == k.shape[0] and k.shape == v.shape and q.shape[3] == k.shape[3] else False
            group = operator.index(q.shape[1]) // operator.index(k.shape[1]) if shapes_ok else 1
            grad = True if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad) else False
            last_contiguous = tuple(True if t.shape[-1] == 1 or t.stride(-1) == 1 else False for t in (q, k, v))
            call = (_dt(q), _dt(k), _dt(v), q.dim(), shapes_ok, operator.index(q.shape[-1]) if shapes_ok else 0,
                    operator.index(q.shape[-2]) if shapes_ok else 0, operator.index(k.shape[-2]) if shapes_ok else 0, last_contiguous,
                    _mask_call(mask, q, k) if mask is not None and shapes_ok else None if mask is None else ("", 0, False, False, ""),
                    dropout_p, is_causal, None if scale is None else float(scale), group, grad)
            order = self._route("scaled_dot_product_attention", call,
                                self._specs(q, k, v) if mask is None else self._specs(q, k, v, mask))
            if order:
                backward = self._backward_order()
                # Routing asked the forward order; a backward_order of its own must sum a group too.
                if group > 1 and grad and backward and _exact(order) and (why := _gqa_gradients_refused(group, backward)):
                    if self.strict:
                        raise ValueError(f"ordo.torch.pinned({self.order!r}): scaled_dot_product_attention cannot run in ordo: {why}")
                    _fallback_warning(f"ordo.torch.pinned({self.order!r}): scaled_dot_product_attention runs torch's own kernel, "
                                      f"not ordo's: {why}")
                    return func(*args, **kwargs)
                return scaled_dot_product_attention(q, k, v, is_causal, scale, attn_mask=mask, enable_gqa=group > 1, order=order,
                                                    backward_order=backward)
        if torch.compiler.is_compiling():
            return func(*args, **kwargs)
        return _run_torch_charged(func, args, kwargs)


def _mask_call(mask: Tensor, q: Tensor, k: Tensor) -> tuple:
    """An attn_mask as _why_not reads it (plain data): its dtype, dims, whether its shape is one
    torch's flash kernel takes (2-D or 4-D, each dim 1 or the query's), whether it requires grad,
    and the dims it spans of (batch, head, S_q, S_k) as Request::mask's text (ordo._attention_mask)."""
    full = (operator.index(q.shape[0]), operator.index(q.shape[1]), operator.index(q.shape[2]), operator.index(k.shape[2]))
    shape = tuple(operator.index(n) for n in mask.shape)
    fits = mask.dim() in (2, 4) and all(n in (1, want) for n, want in zip(shape[::-1], full[::-1]))
    spans = "1111"
    if fits:
        m = mask.expand(full)
        spans = "".join(letter if span else "1" for letter, span in zip("BHQK", ordo._mask_spans(m.shape, m.stride(), full)))
    return _dt(mask), mask.dim(), fits, bool(mask.requires_grad), spans


def _dt_name(dtype) -> str:
    return "" if dtype is None else str(dtype).replace("torch.", "")


_NORMS = {F.layer_norm: "layer_norm", torch.layer_norm: "layer_norm", F.rms_norm: "rms_norm", torch.rms_norm: "rms_norm"}
_SOFTMAXES = {F.softmax: "softmax", torch.softmax: "softmax", Tensor.softmax: "softmax", F.log_softmax: "log_softmax",
              torch.log_softmax: "log_softmax", Tensor.log_softmax: "log_softmax"}
# The elementwise activations pinned routes (ordo's op names: F.gelu's two forms are two ops), and
# what torch does with a strided input of each.
_POINTWISE = {F.silu: "silu", F.gelu: "gelu"}
_POINTWISE_OPS = ("silu", "gelu", "gelu_tanh")
_POINTWISE_STRIDED = {"silu": "its loops follow the strides", "gelu_tanh": "its loops follow the strides",
                      "gelu": "ATen's own erf kernel instead of oneDNN's"}


def _pointwise_layout(x: Tensor) -> str:
    """How torch's elementwise loop (TensorIterator) walks x: "contiguous" (one loop over every
    element), "rows" (a last dim of stride 1 in rows it cannot coalesce, such as the first half of
    each row of a wider tensor: one loop per row, each with its own scalar tail, the orders'
    inner_loop=row), or "strided" (any other layout, not modelled). The leading dims of "rows"
    coalesce with each other, so the loop has exactly two dims."""
    if x.is_contiguous():
        return "contiguous"
    if x.dim() < 2 or x.stride(-1) != 1:
        return "strided"
    for d in range(x.dim() - 2):
        if x.shape[d] != 1 and x.stride(d) != x.stride(d + 1) * x.shape[d + 1]:
            return "strided"
    return "rows" if x.stride(-2) > x.shape[-1] else "strided"


def _add_param(order: str, param: str) -> str:
    """order with one more parameter: 'torch2.15-cpu(threads=2)' + 'inner_loop=row'."""
    return f"{order[:-1]},{param})" if order.endswith(")") else f"{order}({param})"
# What __torch_function__ may send elsewhere; every other function goes straight to torch.
_ROUTED = (frozenset(_NORMS) | frozenset(_SOFTMAXES) | frozenset(_POINTWISE) | frozenset(_INEXACT_WHEN_COMPILED) |
           {F.scaled_dot_product_attention, F.dropout, F.cross_entropy})
