"""ordo from Python: normalization, softmax and attention kernels whose reduction order you choose.

    import ordo
    y, mean, rstd = ordo.layer_norm(x, weight, bias, eps=1e-5, order="torch2.15-cpu")

Arrays are passed without copying through DLPack: numpy arrays and torch tensors (CPU,
contiguous), or any other DLPack producer. Results come back as the same kind as `x`: torch in,
torch out; numpy in, numpy out (and numpy for other producers). numpy has no bfloat16, so a
uint16 numpy array holds bf16 bit patterns when `dtype="bf16"` is given.

The order names are those of `ordo orders` (ordo.orders() lists them); an order marked exact
reproduces its library bit for bit.
"""
import math

from . import _ordo

__all__ = ["layer_norm", "rms_norm", "var_mean", "silu", "gelu_tanh", "gelu", "softmax", "log_softmax", "attention", "layer_norm_backward", "rms_norm_backward",
           "softmax_backward", "silu_backward", "gelu_tanh_backward", "gelu_backward", "log_softmax_backward", "attention_backward", "cross_entropy",
           "cross_entropy_backward", "orders", "compare", "cache_stats",
           "set_kernel_cache_capacity"]


def __getattr__(name):
    # ordo.torch (custom ops and pinned) imports torch; `import ordo` alone never does.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'ordo' has no attribute '{name}'")


_TORCH_TYPES = set()  # the torch tensor types seen, so that the test below runs once per type


def _is_torch(a):
    kind = type(a)
    if kind in _TORCH_TYPES:
        return True
    if kind.__module__.split(".")[0] != "torch":
        return False
    _TORCH_TYPES.add(kind)
    return True


def _dtype_of(a, hint):
    """ordo's name for the element type of `a`."""
    if hint is not None:
        return hint
    if _is_torch(a):
        import torch
        names = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
        if a.dtype not in names:
            raise ValueError(f"tensor dtype {a.dtype} is not float32, bfloat16 or float16")
        return names[a.dtype]
    kind = getattr(a, "dtype", None)
    name = str(kind)
    if name in ("float32", "float16"):
        return {"float32": "f32", "float16": "f16"}[name]
    if name == "uint16":
        raise ValueError("a uint16 array is taken as bf16 bit patterns only with dtype='bf16'")
    raise ValueError(f"array dtype {name} is not float32 or float16 (bf16: uint16 bit patterns with dtype='bf16')")


_TORCH_DTYPE_NAMES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


def _empty_like_kind(x, shape, dtype):
    """An uninitialized output of the same kind as x (torch or numpy)."""
    if _is_torch(x):
        import torch
        return torch.empty(shape, dtype=getattr(torch, _TORCH_DTYPE_NAMES[dtype]))
    import numpy as np
    return np.empty(shape, dtype={"f32": np.float32, "bf16": np.uint16, "f16": np.float16}[dtype])


def _capsule(a):
    if not hasattr(a, "__dlpack__"):
        raise TypeError(f"{type(a).__name__} does not support DLPack (__dlpack__)")
    if _is_torch(a):
        a = a.detach()  # a view, not a copy: ordo's kernels are forward only
    return a.__dlpack__()


def _launch(kernel, arrays, rows, threads, sizes=()):
    """Runs `kernel` on `arrays` (in kernel.args order), with the lengths it takes at launch
    (kernel.sizes). Torch tensors go by pointer (Kernel.run_torch checks each one's device,
    layout, dtype and size); anything else, or a mix, through DLPack. The outputs among them were
    allocated just before by the caller, so their pages are fresh (Kernel.run_torch's
    fresh_outputs)."""
    if all(_is_torch(a) for a in arrays):
        kernel.run_torch(arrays, rows, threads, list(sizes), True)
    else:
        kernel.run([_capsule(a) for a in arrays], rows, threads, list(sizes))


# (order, dtype) pairs whose attention is built for one S_k (every order but the flash ones):
# compile_attention refused S_k at launch for them once (FixedLengthError), so it is not asked again.
_FIXED_KEY_LENGTH = set()
# The same for the row ops' N: (op, order, dtype, weight dtype) whose kernels are built for one N.
_FIXED_ROW_LENGTH = set()


def _row_kernel_any_length(op, xd, wd, order, eps, weight, bias, allow_mixed_dtypes, acc):
    """A row op's forward kernel for every N, given at launch, with the bits of the kernel built for
    each N; None where the order builds its kernels for one N (asked once per request)."""
    key = (op, order, xd, wd, eps, weight, bias, allow_mixed_dtypes, acc)
    if key in _FIXED_ROW_LENGTH:
        return None
    try:
        return _ordo.compile(op, 0, xd, wd, order, eps, weight, bias, allow_mixed_dtypes, acc, cols_at_launch=True)
    except _ordo.FixedLengthError:
        _FIXED_ROW_LENGTH.add(key)
        return None


def _row_kernel(op, cols, xd, wd, order, eps, weight, bias, allow_mixed_dtypes, acc):
    """(kernel, sizes to launch it with) for a row op's forward over rows of `cols`: the kernel for
    every N where the order has one (_row_kernel_any_length), so rows of a new length compile
    nothing; else the one built for `cols`."""
    kernel = _row_kernel_any_length(op, xd, wd, order, eps, weight, bias, allow_mixed_dtypes, acc)
    if kernel is not None:
        return kernel, [cols]
    return _ordo.compile(op, cols, xd, wd, order, eps, weight, bias, allow_mixed_dtypes, acc), []


def _attention_kernel_any_length(d, sq, dtype, order, causal, scale, lse, heads=1, row_strides=(0, 0, 0), mask=""):
    """attention's forward kernel for every S_k, given at launch, or None where the order builds its
    attention for one S_k. The flash orders take S_k at launch, with the bits of a kernel built for
    that S_k: a decode loop, whose K and V grow by a key per step, compiles once instead of every
    step. 16-bit inputs with more than one block of 32 queries keep a kernel per S_k, which widens K
    and V to f32 once per launch instead of once per query block. mask: Request::mask's text (a
    mask that spans the keys is then S_k long at each launch)."""
    if (order, dtype) in _FIXED_KEY_LENGTH or not (dtype == "f32" or sq <= 32):
        return None
    try:
        return _ordo.compile_attention(d, sq, 0, dtype, order, causal, scale, lse, heads=heads, row_strides=row_strides,
                                       seq_k_at_launch=True, mask=mask)
    except _ordo.FixedLengthError:
        _FIXED_KEY_LENGTH.add((order, dtype))
        return None


# attention_backward requests (all but S_k) whose kernel is built for one S_k: asked once each.
# Keyed by S_q among the rest, so bounded: past _FIXED_KEY_LENGTH_BACKWARD_ENTRIES it starts again.
_FIXED_KEY_LENGTH_BACKWARD = set()
_FIXED_KEY_LENGTH_BACKWARD_ENTRIES = 4096


def _attention_backward_kernel(d, sq, sk, dtype, order, causal, scale, saved_stats, heads, row_strides, kv_group, mask):
    """(kernel, sizes to launch it with) for attention_backward over S_k = sk keys: the flash orders'
    fused CPU kernel takes S_k at launch when the forward's lse is given, with the bits of the one
    built for each S_k, so queries of one length against keys of many (a decoder's queries against
    memories of many lengths) compile one backward kernel per S_q; else (the orders that reproduce
    a library, lse recomputed) the kernel built for sk."""
    key = (d, sq, dtype, order, causal, scale, heads, row_strides, kv_group, mask)
    if saved_stats and key not in _FIXED_KEY_LENGTH_BACKWARD:
        try:
            return _ordo.compile_attention(d, sq, 0, dtype, order, causal, scale, False, "attention_backward", True, heads=heads,
                                           row_strides=row_strides, seq_k_at_launch=True, kv_group=kv_group, mask=mask), [sk]
        except _ordo.FixedLengthError:
            if len(_FIXED_KEY_LENGTH_BACKWARD) >= _FIXED_KEY_LENGTH_BACKWARD_ENTRIES:
                _FIXED_KEY_LENGTH_BACKWARD.clear()
            _FIXED_KEY_LENGTH_BACKWARD.add(key)
    return _ordo.compile_attention(d, sq, sk, dtype, order, causal, scale, False, "attention_backward", saved_stats, heads=heads,
                                   row_strides=row_strides, kv_group=kv_group, mask=mask), []


def _attention_kernel(d, sq, sk, dtype, order, causal, scale, lse, heads=1, row_strides=(0, 0, 0), mask=""):
    """(kernel, sizes to launch it with) for attention's forward over S_k = sk keys: the kernel for
    every S_k where the order has one (_attention_kernel_any_length), else the one built for sk."""
    kernel = _attention_kernel_any_length(d, sq, dtype, order, causal, scale, lse, heads, row_strides, mask)
    if kernel is not None:
        return kernel, [sk]
    return _ordo.compile_attention(d, sq, sk, dtype, order, causal, scale, lse, heads=heads, row_strides=row_strides, mask=mask), []


def _run(op, x, inputs, outputs_spec, order, eps=1e-5, dtype=None, weight_dtype=None, allow_mixed_dtypes=False, acc=None,
         threads=0):
    """Compiles (cached) and runs one op. inputs: {name: array or None}. outputs_spec: [(name, 'row'|'stat')]."""
    if not hasattr(x, "shape") or len(x.shape) < 1:
        raise ValueError("x must have at least one dimension; the op reduces the last")
    xd = _dtype_of(x, dtype)
    cols = int(x.shape[-1])
    rows = math.prod(int(s) for s in x.shape[:-1])
    given = {k: v for k, v in inputs.items() if v is not None}
    wd = weight_dtype
    if wd is None and given:
        first = next(iter(given.values()))
        wd = _dtype_of(first, dtype if not _is_torch(first) and str(getattr(first, "dtype", "")) == "uint16" else None)
    kernel, sizes = _row_kernel(op, cols, xd, wd or "", order, float(eps), "weight" in given, "bias" in given,
                                allow_mixed_dtypes, acc or "")
    outs, tensors = {}, []
    for name, dt, is_out, extent in kernel.args:
        if not is_out:
            tensors.append(x if name == "x" else given[name])
            continue
        shape = tuple(x.shape) if extent == "rows*N" else tuple(x.shape[:-1])
        outs[name] = _empty_like_kind(x, shape, dt)
        tensors.append(outs[name])
    _launch(kernel, tensors, rows, threads, sizes)
    return outs


def layer_norm(x, weight=None, bias=None, eps=1e-5, order="fast", **kw):
    """y, mean, rstd of layer_norm over the last dim."""
    o = _run("layer_norm", x, {"weight": weight, "bias": bias}, None, order, eps, **kw)
    return o["y"], o["mean"], o["rstd"]


def rms_norm(x, weight=None, eps=1e-5, order="fast", **kw):
    """y, rstd of rms_norm over the last dim."""
    o = _run("rms_norm", x, {"weight": weight}, None, order, eps, **kw)
    return o["y"], o["rstd"]


def var_mean(x, order="fast", **kw):
    """var (biased, divided by N) and mean over the last dim."""
    o = _run("var_mean", x, {}, None, order, **kw)
    return o["var"], o["mean"]


# sum and mean are not in __all__: `from ordo import *` would hide Python's own sum.
def sum(x, order="fast", **kw):  # noqa: A001 (ordo.sum, as torch.sum and numpy.sum)
    """x.sum(-1): the sum of each row, in x's dtype, summed in the order's accumulation type."""
    return _run("sum", x, {}, None, order, **kw)["sum"]


def mean(x, order="fast", **kw):
    """x.mean(-1): each row's sum (summed as sum() does) divided by N, in x's dtype."""
    return _run("mean", x, {}, None, order, **kw)["mean"]


def silu(x, order="fast", **kw):
    """torch.nn.functional.silu: x / (1 + exp(-x)) elementwise, with the order's exp at each element
    (under torch2.15-cpu(threads=T), torch's own, by where torch's kernel computes each element)."""
    return _run("silu", x, {}, None, order, **kw)["y"]


def gelu_tanh(x, order="fast", **kw):
    """torch.nn.functional.gelu(x, approximate="tanh"): (x/2)(1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))
    elementwise, with the order's tanh at each element (under torch2.15-cpu(threads=T), torch's own,
    by where torch's kernel computes each element)."""
    return _run("gelu_tanh", x, {}, None, order, **kw)["y"]


def gelu(x, order="fast", **kw):
    """torch.nn.functional.gelu(x), GELU's erf form: (x/2)(1 + erf(x/sqrt(2))) elementwise, with the
    order's erf (under torch2.15-cpu, oneDNN's eltwise_gelu_erf for this CPU, which torch runs for a
    contiguous f32 or bf16 tensor of more than one element)."""
    return _run("gelu", x, {}, None, order, **kw)["y"]


def softmax(x, order="fast", **kw):
    return _run("softmax", x, {}, None, order, **kw)["y"]


def log_softmax(x, order="fast", **kw):
    return _run("log_softmax", x, {}, None, order, **kw)["y"]


def attention(q, k, v, order="fast", causal=False, scale=None, return_lse=False, dtype=None, threads=0, mask=None):
    """Scaled-dot-product attention: softmax(q k^T * scale [causal]) v over the last two dims.

    q is [..., S_q, D], k and v are [..., S_k, D] with the same leading (batch, head) dims and one
    dtype. Strided views with a contiguous last dim are taken as PyTorch takes them: the orders
    that reproduce its flash kernels read their row strides (which its BLAS sees). scale defaults to 1/sqrt(D); causal hides key j from query i when j > i. Returns out
    (shaped like q), and with return_lse=True also the float32 log-sum-exp of each query row.
    order: "torch1.13-cpu-math" and "exact-tiled" reproduce eager PyTorch 1.13 bit for bit;
    "flash" / "flash(Bc)" is the tiled online softmax; "fast" the fastest.
    mask: PyTorch's attn_mask, broadcastable to [..., S_q, S_k]: boolean (True takes part) or
    additive (f32 or q's dtype). The torch2.15-cpu orders add it as PyTorch's CPU flash kernel does;
    the flash orders (fast, flash) add it to their scores, and give a query whose every key is
    masked out 0 and lse -inf."""
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not hasattr(a, "shape") or len(a.shape) < 2:
            raise ValueError(f"{name} must be [..., S, D]")
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}")
    if tuple(q.shape[:-2]) != tuple(k.shape[:-2]) or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in leading dims or D")
    qd = _dtype_of(q, dtype)
    for name, a in (("k", k), ("v", v)):
        if _dtype_of(a, dtype) != qd:
            raise ValueError(f"q is {qd} but {name} is {_dtype_of(a, dtype)}; they must match")
    d, sq, sk = int(q.shape[-1]), int(q.shape[-2]), int(k.shape[-2])
    rows = math.prod(int(s) for s in q.shape[:-2])
    mask, mask_text = _attention_mask(mask, q, sk, dtype)
    (q, qs), (k, ks), (v, vs) = _rows_of("q", q), _rows_of("k", k), _rows_of("v", v)
    kernel, sizes = _attention_kernel(d, sq, sk, qd, order, bool(causal), None if scale is None else float(scale), bool(return_lse),
                                      heads=_heads(q), row_strides=(qs, ks, vs), mask=mask_text)
    outs, tensors = {}, []
    for name, dt, is_out, extent in kernel.args:
        if not is_out:
            tensors.append({"q": q, "k": k, "v": v, "mask": mask}[name])
            continue
        outs[name] = _empty_like_kind(q, tuple(q.shape) if name == "out" else tuple(q.shape[:-1]), dt)
        tensors.append(outs[name])
    _launch(kernel, tensors, rows, threads, sizes)
    return (outs["out"], outs["lse"]) if return_lse else outs["out"]


def _mask_spans(shape, strides, full):
    """Which dims of `full` (q's [..., H, S_q] by S_k, at least 3 dims) a mask expanded to it
    spans, from the expanded view's shape and strides: a dim of one element or stride 0 is
    broadcast, but for a single key (S_k = 1), which counts as spanned: the same one element either
    way, and so the request a decode loop's first step makes is that of its later steps (one kernel
    for every S_k)."""
    spans = [n > 1 and st != 0 for n, st in zip(shape, strides)]
    spans[-1] = spans[-1] or shape[-1] == 1
    return spans


def _attention_mask(mask, q, sk, dtype):
    """(the mask as ordo's kernel reads it, its Request text "<dtype>:<dims>") for an attn_mask
    broadcastable to q's [..., H, S_q] by S_k, or (None, "") for None. A boolean mask (True: take
    part) becomes 0 / -inf, as PyTorch's SDPA makes it: in q's dtype for a torch tensor, f32 for a
    numpy array (the same values). The dims before H are the batch. A dim the mask does not span
    (one element, or stride 0 in an expanded view) is kept as one element; the batch dims are
    kept whole when any of them is spanned (those it does not span then repeat)."""
    if mask is None:
        return None, ""
    full = tuple(int(n) for n in q.shape[:-1]) + (int(sk),)
    full = (1,) * (3 - len(full)) + full  # q [S, D] or [N, S, D]: one batch (and one head)
    lead = len(full) - 3
    qd = _dtype_of(q, dtype)
    # The broadcast dims are dropped first, on a view; a boolean mask becomes 0 / -inf only then,
    # at its reduced size (converting first would fill a tensor of the full [..., S_q, S_k]).
    if _is_torch(mask):
        import torch
        try:
            m = mask.expand(full)
        except RuntimeError as e:
            raise ValueError(f"attn_mask of shape {tuple(mask.shape)} does not broadcast to {full}") from e
        spans = _mask_spans(m.shape, m.stride(), full)
        batch = any(spans[:lead])
        for d in range(len(full)):
            if not spans[d] and (d >= lead or not batch):
                m = m.narrow(d, 0, 1)
        if m.dtype == torch.bool:
            m = torch.zeros(m.shape, dtype=q.dtype).masked_fill_(~m, float("-inf"))
        m = m.contiguous()
        md = _dtype_of(m, None)
    else:
        import numpy as np
        mask = np.asarray(mask)
        try:
            m = np.broadcast_to(mask, full)
        except ValueError as e:
            raise ValueError(f"attn_mask of shape {tuple(mask.shape)} does not broadcast to {full}") from e
        spans = _mask_spans(m.shape, m.strides, full)
        batch = any(spans[:lead])
        m = np.ascontiguousarray(m[tuple(slice(0, 1) if not spans[d] and (d >= lead or not batch) else slice(None)
                                         for d in range(len(full)))])
        if m.dtype == np.bool_:
            m = np.where(m, np.float32(0), np.float32(-np.inf)).astype(np.float32)
        md = _dtype_of(m, dtype if m.dtype == np.uint16 else None)
    if md not in ("f32", qd):
        raise ValueError(f"attn_mask is {md}; it must be bool, f32 or q's dtype {qd}")
    return m, md + ":" + "".join(letter if span else "1" for letter, span in zip("BHQK", [batch] + spans[lead:]))


def _heads(q):
    """H of q [..., H, S, D] as PyTorch sees it: a 3-D [N, S, D] is (1, N, S, D) there."""
    return int(q.shape[-3]) if len(q.shape) >= 3 else 1


def _rows_of(name, a):
    """(a with its rows packed, the row stride a had): ordo's kernels read packed rows, and the
    orders that reproduce PyTorch's flash kernels take the stride PyTorch would have handed its
    BLAS (a [B, S, H, D] projection viewed as [B, H, S, D] has rows H*D apart). 0: already packed."""
    if _is_torch(a):
        if a.dim() < 2 or a.is_contiguous():
            return a, 0
        if a.stride(-1) != 1:
            raise ValueError(f"{name}'s last dim has stride {a.stride(-1)}; PyTorch's flash kernel reads contiguous rows: "
                             f"give {name}.contiguous()")
        return a.contiguous(), int(a.stride(-2))
    strides, item = getattr(a, "strides", None), getattr(a, "itemsize", 0)
    if strides is None or len(a.shape) < 2 or getattr(a, "flags", None) is None or a.flags["C_CONTIGUOUS"]:
        return a, 0
    if strides[-1] != item:
        raise ValueError(f"{name}'s last dim is not contiguous; PyTorch's flash kernel reads contiguous rows")
    import numpy as np
    return np.ascontiguousarray(a), int(strides[-2] // item)


def attention_backward(q, k, v, out, dout, lse=None, order="fast", causal=False, scale=None, dtype=None, threads=0, mask=None):
    """dq, dk, dv of scaled-dot-product attention (see attention) from its inputs, its output `out`,
    the gradient `dout` (shaped like q) and its float32 log-sum-exp `lse` ([..., S_q]). Without lse
    the kernel recomputes it as the order's forward does. order: "flash" (FlashAttention-2's
    tiled backward without atomics) or "fast". Grouped-query attention (k and v with fewer heads
    than q, [..., H_kv, S_k, D] against [..., H, S_q, D], H a multiple of H_kv): dk and dv sum
    each K/V head's group of query heads, as PyTorch's CPU flash backward does (the torch2.15-cpu
    orders). mask: the forward's attn_mask (see attention; the torch2.15-cpu and flash orders)."""
    for name, a in (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)):
        if not hasattr(a, "shape") or len(a.shape) < 2:
            raise ValueError(f"{name} must be [..., S, D]")
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}; they must match")
    for name, a in (("out", out), ("dout", dout)):
        if tuple(a.shape) != tuple(q.shape):
            raise ValueError(f"{name} has shape {tuple(a.shape)} but q has {tuple(q.shape)}; they must match")
    grouped = len(q.shape) >= 3 and len(k.shape) == len(q.shape) and tuple(q.shape[:-3]) == tuple(k.shape[:-3]) and \
        int(k.shape[-3]) > 0 and int(q.shape[-3]) != int(k.shape[-3]) and int(q.shape[-3]) % int(k.shape[-3]) == 0
    if not grouped and (tuple(q.shape[:-2]) != tuple(k.shape[:-2]) or q.shape[-1] != k.shape[-1]):
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in leading dims or D (k may have fewer heads, "
                         f"dim -3, when they divide q's)")
    if grouped and q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in D")
    kv_group = int(q.shape[-3]) // int(k.shape[-3]) if grouped else 1
    qd = _dtype_of(q, dtype)
    for name, a in (("k", k), ("v", v), ("out", out), ("dout", dout)):
        if _dtype_of(a, dtype) != qd:
            raise ValueError(f"q is {qd} but {name} is {_dtype_of(a, dtype)}; they must match")
    if lse is not None:
        if tuple(lse.shape) != tuple(q.shape[:-1]):
            raise ValueError(f"lse has shape {tuple(lse.shape)} but q has {tuple(q.shape)}; lse has one value per query row")
        if _dtype_of(lse, None) != "f32":
            raise ValueError(f"lse is {_dtype_of(lse, None)}; the forward's log-sum-exp is f32")
    d, sq, sk = int(q.shape[-1]), int(q.shape[-2]), int(k.shape[-2])
    rows = math.prod(int(s) for s in k.shape[:-2])  # (batch, K/V head)s: one each, its query heads with it
    mask, mask_text = _attention_mask(mask, q, sk, dtype)
    (q, qs), (k, ks), (v, vs) = _rows_of("q", q), _rows_of("k", k), _rows_of("v", v)
    kernel, sizes = _attention_backward_kernel(d, sq, sk, qd, order, bool(causal), None if scale is None else float(scale),
                                               lse is not None, _heads(q), (qs, ks, vs), kv_group, mask_text)
    given = {"q": q, "k": k, "v": v, "out": out, "dout": dout, "lse": lse, "mask": mask}
    outs, tensors = {}, []
    for name, dt, is_out, extent in kernel.args:
        if not is_out:
            tensors.append(given[name])
            continue
        outs[name] = _empty_like_kind(q, tuple(q.shape) if name == "dq" else tuple(k.shape), dt)
        tensors.append(outs[name])
    _launch(kernel, tensors, rows, threads, sizes)
    return outs["dq"], outs["dk"], outs["dv"]


def _run_backward(op, data, inputs, order, bias=False, saved_stats=True, dtype=None, weight_dtype=None,
                  allow_mixed_dtypes=False, threads=0, eps=1e-5):
    """A row-wise backward op: `data` is the forward tensor that gives the shape (x, or softmax's y),
    inputs {name: array or None} the others (dy first). Outputs shaped like data (dx), (N,) for the
    weight gradients."""
    dname = "y" if op in ("softmax_backward", "log_softmax_backward") else "x"
    if not hasattr(data, "shape") or len(data.shape) < 1:
        raise ValueError(f"{dname} must have at least one dimension; the op reduces the last")
    given = {k: v for k, v in inputs.items() if v is not None}
    if tuple(given["dy"].shape) != tuple(data.shape):
        raise ValueError(f"dy has shape {tuple(given['dy'].shape)} but {dname} has {tuple(data.shape)}; they must match")
    xd = _dtype_of(data, dtype)
    if _dtype_of(given["dy"], dtype) != xd:
        raise ValueError(f"dy is {_dtype_of(given['dy'], dtype)} but {dname} is {xd}; they must match")
    cols = int(data.shape[-1])
    rows = math.prod(int(s) for s in data.shape[:-1])
    wd = weight_dtype or (_dtype_of(given["weight"], None) if "weight" in given else "")
    # eps matters only where the kernel recomputes a statistic (saved_stats false).
    kernel = _ordo.compile(op, cols, xd, wd, order, float(eps), "weight" in given, bool(bias), allow_mixed_dtypes, "", bool(saved_stats))
    outs, tensors = {}, []
    for name, dt, is_out, extent in kernel.args:
        if not is_out:
            tensors.append(data if name in ("x", "y") else given[name])
            continue
        shape = tuple(data.shape) if extent == "rows*N" else (cols,) if extent == "N" else tuple(data.shape[:-1])
        outs[name] = _empty_like_kind(data, shape, dt)
        tensors.append(outs[name])
    _launch(kernel, tensors, rows, threads)
    return outs


def layer_norm_backward(dy, x, weight, mean, rstd, order="fast", bias=True, **kw):
    """dx, dweight, dbias of layer_norm over the last dim, from its saved mean and rstd (as
    layer_norm returns them). dweight is None without a weight, dbias None when bias=False."""
    o = _run_backward("layer_norm_backward", x, {"dy": dy, "weight": weight, "mean": mean, "rstd": rstd}, order, bias, **kw)
    return o["dx"], o.get("dweight"), o.get("dbias")


def rms_norm_backward(dy, x, weight=None, rstd=None, order="fast", eps=1e-5, **kw):
    """dx and dweight of rms_norm over the last dim. rstd: the forward's f32 (opmath) rstd, one per
    row (leading dims of x); None recomputes it with `eps` as the order's forward does (the kernel
    then also outputs it, as "rstd", which this function drops). dweight is None without a weight."""
    o = _run_backward("rms_norm_backward", x, {"dy": dy, "weight": weight, "rstd": rstd}, order, False, saved_stats=rstd is not None,
                      eps=eps, **kw)
    return o["dx"], o.get("dweight")


def softmax_backward(dy, y, order="fast", **kw):
    """dx of softmax over the last dim from dy and the forward's output y (torch's
    _softmax_backward_data): dx = (dy - sum(dy*y))*y, in the order's summation."""
    return _run_backward("softmax_backward", y, {"dy": dy}, order, **kw)["dx"]


def log_softmax_backward(dy, y, order="fast", **kw):
    """dx of log_softmax over the last dim from dy and the forward's output y (torch's
    _log_softmax_backward_data): dx = dy - exp(y)*sum(dy), in the order's summation and exp."""
    return _run_backward("log_softmax_backward", y, {"dy": dy}, order, **kw)["dx"]


def gelu_tanh_backward(dy, x, order="fast", **kw):
    """dx of gelu_tanh from dy and the forward's input x (torch's gelu_backward(dy, x, approximate="tanh")):
    dx = dy*(0.5(1 + t) + 0.5x(1 - t^2) sqrt(2/pi)(1 + 3*0.044715 x^2)), t the forward's tanh."""
    return _run_backward("gelu_tanh_backward", x, {"dy": dy}, order, **kw)["dx"]


def gelu_backward(dy, x, order="fast", **kw):
    """dx of gelu from dy and the forward's input x (torch's gelu_backward(dy, x)):
    dx = dy*(cdf + x*pdf), cdf = (1 + erf(x/sqrt(2)))/2, pdf the standard normal density, with the
    order's erf and exp."""
    return _run_backward("gelu_backward", x, {"dy": dy}, order, **kw)["dx"]


def silu_backward(dy, x, order="fast", **kw):
    """dx of silu from dy and the forward's input x (torch's silu_backward): dx = dy*s*(1 + x*(1 - s)),
    s = 1/(1 + exp(-x)), elementwise, with the order's exp at each element and its fma."""
    return _run_backward("silu_backward", x, {"dy": dy}, order, **kw)["dx"]


_REDUCTIONS = ("mean", "sum", "none")


def _targets(target, rows, classes, ignore_index):
    """Checks cross_entropy's class indices: int64, one per row, each in [0, classes) or ignore_index
    (torch raises for any other; ordo's kernel would make that row's loss NaN)."""
    dtype = str(getattr(target, "dtype", type(target).__name__))
    if dtype not in ("torch.int64", "int64"):
        raise ValueError(f"target dtype {dtype.replace('torch.', '')} is not int64 (class indices)")
    if tuple(target.shape) != (rows,):
        raise ValueError(f"target has shape {tuple(target.shape)}; x of shape ({rows}, {classes}) needs ({rows},)")
    bad = _ordo.first_bad_target(target.detach() if _is_torch(target) else target, classes, ignore_index)
    if bad is not None:
        raise ValueError(f"target {bad[1]} is out of bounds: not in [0, {classes}) and not ignore_index ({ignore_index})")


def _loss_kernel(op, x, reduction, ignore_index, order, dtype):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction '{reduction}' is not mean, sum or none")
    xd = _dtype_of(x, dtype)
    return _ordo.compile(op, int(x.shape[-1]), xd, "", order, ignore_index=int(ignore_index), reduction=reduction), xd


def cross_entropy(x, target, ignore_index=-100, reduction="mean", order="fast", dtype=None, threads=0):
    """torch.nn.functional.cross_entropy(x, target, ignore_index=, reduction=) over logits x of shape
    (rows, classes) and int64 class indices target (rows,): log_softmax(x) in the order's softmax, then
    the negative log-likelihood of each row's target, reduced over the rows as the order says
    (PyTorch's nll_loss: a cascade of partial sums). Rows whose target is ignore_index count for
    nothing. Returns (loss, logp, total_weight): the loss (a scalar, or one per row under
    reduction="none"), log_softmax(x) (what cross_entropy_backward reads) and the rows counted."""
    if not hasattr(x, "shape") or len(x.shape) != 2:
        raise ValueError(f"x must be 2-D logits (rows, classes), got shape {tuple(getattr(x, 'shape', ()))}")
    rows, classes = int(x.shape[0]), int(x.shape[1])
    _targets(target, rows, classes, ignore_index)
    kernel, _ = _loss_kernel("cross_entropy", x, reduction, ignore_index, order, dtype)
    outs, tensors = {}, []
    for name, dt, is_out, extent in kernel.args:
        if not is_out:
            tensors.append(x if name == "x" else target)
            continue
        shape = (rows, classes) if extent == "rows*N" else (rows,) if extent == "rows" else ()
        outs[name] = _empty_like_kind(x, shape, dt)
        tensors.append(outs[name])
    _launch(kernel, tensors, rows, threads)
    return outs["loss"], outs["logp"], outs["total_weight"]


def cross_entropy_backward(dloss, logp, target, total_weight, ignore_index=-100, reduction="mean", order="fast", dtype=None,
                           threads=0):
    """dx of cross_entropy from the loss's gradient dloss (a scalar, or one per row under
    reduction="none") and the forward's logp and total_weight (as cross_entropy returns them):
    log_softmax_backward of nll_loss's one-hot gradient, as eager autograd runs them."""
    if not hasattr(logp, "shape") or len(logp.shape) != 2:
        raise ValueError(f"logp must be 2-D (rows, classes), got shape {tuple(getattr(logp, 'shape', ()))}")
    rows, classes = int(logp.shape[0]), int(logp.shape[1])
    _targets(target, rows, classes, ignore_index)
    want = (rows,) if reduction == "none" else ()
    if tuple(getattr(dloss, "shape", (None,))) not in (want, (1,) if not want else want):
        raise ValueError(f"dloss has shape {tuple(getattr(dloss, 'shape', ()))}; reduction={reduction} needs {want}")
    if math.prod(getattr(total_weight, "shape", (0, 0))) != 1:
        raise ValueError(f"total_weight must hold one element, got shape {tuple(getattr(total_weight, 'shape', ()))}")
    kernel, xd = _loss_kernel("cross_entropy_backward", logp, reduction, ignore_index, order, dtype)
    for name, value in (("dloss", dloss), ("total_weight", total_weight)):
        if _dtype_of(value, dtype) != xd:
            raise ValueError(f"{name} is {_dtype_of(value, dtype)} but logp is {xd}; they must match")
    given = {"dloss": dloss, "logp": logp, "target": target, "total_weight": total_weight}
    dx = _empty_like_kind(logp, (rows, classes), xd)
    _launch(kernel, [dx if is_out else given[name] for name, _, is_out, _ in kernel.args], rows, threads)
    return dx


def cache_stats():
    """The in-memory kernel cache: hits, misses, entries, evictions, capacity, shared_programs."""
    return _ordo.cache_stats()


def set_kernel_cache_capacity(entries):
    """At most `entries` kernels stay in the in-memory cache (ORDO_KERNEL_CACHE_ENTRIES sets it at
    start, default 512); past it the least recently requested is dropped and its machine code
    unloaded once nothing holds it."""
    _ordo.set_kernel_cache_capacity(int(entries))


def set_executor(name):
    """Where kernels split over threads run: "pool" (ordo's own threads, the default) or "openmp"
    (the OpenMP runtime already loaded in the process: PyTorch's, so ordo's kernels run on torch's
    threads instead of competing with them). ordo.torch picks "openmp" when torch runs on OpenMP,
    unless ORDO_EXECUTOR is set. Bits never depend on it."""
    _ordo.set_executor(str(name))


def executor():
    """The executor in use: "pool" or "openmp"."""
    return _ordo.executor()


def orders():
    """Every named order: name, description, ops, dtypes, exact, unverified."""
    return _ordo.orders()


def compare(op, cols=4096, rows=64, dtype="f32", orders=(), seed=1, offset=0.0, scale=1.0):
    """Runs `orders` (default: every order for op) on one random input. Returns a list of rows:
    order, max_abs_err and max_ulp per output against float64, and `identical`: the fraction of
    the primary output bit-identical to each other order. The printed report is in .report."""
    table, report = _ordo.compare(op, cols, rows, dtype, list(orders), seed, offset, scale)
    return _Table(table, report)


class _Table(list):
    def __init__(self, rows, report):
        super().__init__(rows)
        self.report = report

    def __str__(self):
        return self.report
