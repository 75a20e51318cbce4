"""Bit-pattern comparison of torch tensors, for the worker processes of the torch 2.15 reference
tests (they put this directory on PYTHONPATH). bits.py is the numpy counterpart."""
import numpy as np
import torch


def bits(t):
    t = t.contiguous()
    return t.view(torch.int16).numpy() if t.element_size() == 2 else t.view(torch.int32).numpy()


def same(a, b):
    """(ok, why) for torch's `a` and ordo's `b`: same dtype, shape and bit patterns; every NaN
    equals every NaN."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False, f"dtype/shape {b.dtype}{tuple(b.shape)} vs torch {a.dtype}{tuple(a.shape)}"
    differ = (bits(a) != bits(b)) & ~(torch.isnan(a.float()) & torch.isnan(b.float())).numpy()
    if differ.any():
        i = int(np.flatnonzero(differ.ravel())[0])
        return False, f"{int(differ.sum())} of {a.numel()} differ; first at {i}: ordo {b.reshape(-1)[i].item()!r} torch {a.reshape(-1)[i].item()!r}"
    return True, ""
