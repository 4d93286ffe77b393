"""Measured profiling: reference PyTorch models, LAMB, synthetic pretraining data.

The only package of bertscope that imports torch; nothing outside it imports this one
eagerly, so the analytic model, catalog and sweeps work without torch installed.
"""

from __future__ import annotations

from bertscope.measure.data import PretrainingBatch, synthetic_batch
from bertscope.measure.hf_weights import load_hf_state_dict
from bertscope.measure.lamb import Lamb, make_optimizer
from bertscope.measure.models import EncoderForPretraining, build_model, module_sublayer


def set_threads(threads: int) -> None:
    """Use `threads` CPU threads for torch's intra-op work (`torch.set_num_threads`)."""
    import torch

    torch.set_num_threads(threads)


__all__ = [
    "EncoderForPretraining",
    "Lamb",
    "PretrainingBatch",
    "build_model",
    "load_hf_state_dict",
    "make_optimizer",
    "module_sublayer",
    "set_threads",
    "synthetic_batch",
]
