"""The eager-PyTorch variant the model benchmarks compare against: an example model's forward."""

from __future__ import annotations

import torch

from tools.bench import harness
from tools.lower.examples import get_example


def make_eager(example: str, size: str) -> harness.Runner:
    """A runner calling the example's model (at `size`) under torch.no_grad()."""
    spec = get_example(example)
    model, inputs = spec.model(size), spec.sample_inputs(size)

    def run() -> object:
        with torch.no_grad():
            return model(*inputs)

    return run
