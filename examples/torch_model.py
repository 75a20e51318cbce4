#!/usr/bin/python3
"""ordo inside a PyTorch model: pin the order and the output is eager's, bit for bit; choose
`fast` and see how far it moves.

A small transformer block (LayerNorm, single-head attention, a feed-forward Linear, a final
LayerNorm) runs three ways on the same input:
  eager        PyTorch's own kernels, attention materialized: softmax(q @ k^T / sqrt(D)) @ v;
  pinned       LayerNorm and the whole attention replaced by ordo kernels with the orders that
               reproduce PyTorch 1.13 on this CPU (torch1.13-cpu-<capability>, and for attention
               exact-tiled, which never keeps the score matrix);
  fast         the same replacement with ordo's `fast` orders (attention: a flash kernel).
The replacement is a `torch.library` custom op (ordo::layer_norm, ordo::attention), so the
model code calls torch.ops.ordo.*.

    PYTHONPATH=build/python ATEN_CPU_CAPABILITY=avx2 /usr/bin/python3 examples/torch_model.py

Exit status 0 means: pinned == eager bit for bit, and `fast` differs (the drift is printed).
"""
import os
import sys

import torch

import ordo

CAPABILITY = os.environ.get("ATEN_CPU_CAPABILITY", "avx2")  # torch 1.13 picks avx2 on an AVX2 CPU by default
if CAPABILITY not in ("default", "avx2"):
    sys.exit(f"ATEN_CPU_CAPABILITY={CAPABILITY}: this example verifies default or avx2 only")

# The custom ops: the order is an argument, so one registration serves both variants.
lib = torch.library.Library("ordo", "DEF")
lib.define("layer_norm(Tensor x, Tensor weight, Tensor bias, float eps, str order) -> Tensor")
lib.define("attention(Tensor q, Tensor k, Tensor v, str order) -> Tensor")
lib.impl("layer_norm", lambda x, w, b, eps, order: ordo.layer_norm(x.contiguous(), w, b, eps=eps, order=order)[0], "CPU")
lib.impl("attention", lambda q, k, v, order: ordo.attention(q.contiguous(), k.contiguous(), v.contiguous(), order=order), "CPU")


class Block(torch.nn.Module):
    def __init__(self, dim, order=None):
        super().__init__()
        self.order = order  # None: eager PyTorch kernels
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.ff = torch.nn.Linear(dim, dim)

    def layer_norm(self, m, x):
        if self.order is None:
            return m(x)
        return torch.ops.ordo.layer_norm(x, m.weight, m.bias, m.eps, self.order["layer_norm"])

    def attention(self, q, k, v):
        if self.order is None:
            return torch.softmax(q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5), -1) @ v
        return torch.ops.ordo.attention(q, k, v, self.order["attention"])

    def forward(self, x):
        h = self.layer_norm(self.norm1, x)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        h = x + self.attention(q, k, v)
        return self.layer_norm(self.norm2, h + self.ff(h))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dim, seq = 256, 128
    x = torch.randn(4, seq, dim) * 2 + 0.5
    eager = Block(dim).eval()
    pinned_orders = {"layer_norm": f"torch1.13-cpu-{CAPABILITY}", "attention": "exact-tiled" + ("-default" if CAPABILITY == "default" else "")}
    variants = {"pinned": pinned_orders, "fast": {"layer_norm": "fast", "attention": "fast"}}
    with torch.no_grad():
        want = eager(x)
        results = {}
        for name, orders in variants.items():
            eager.order = orders
            results[name] = eager(x)
        eager.order = None
    print(f"transformer block, x {tuple(x.shape)}, ATEN_CPU_CAPABILITY={CAPABILITY}, torch {torch.__version__}")
    ok = True
    for name, got in results.items():
        differ = int((got.view(torch.int32) != want.view(torch.int32)).sum())
        diff = (got - want).abs().max().item()
        print(f"  {name:<7} orders {variants[name]}: {differ} of {want.numel()} outputs differ from eager; "
              f"max |diff| {diff:.3g} (outputs up to {want.abs().max().item():.3g})")
        if name == "pinned":
            ok &= differ == 0
        else:
            ok &= differ > 0
    print("pinned reproduces eager bit for bit; fast drifts by the amounts above" if ok else "UNEXPECTED: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
