"""The zoo's small models (tools/bench/zoo.py) on a batch of images, lowered once per test
process: squeeze_excite_test and se_gate_fold_test (one target) run the same programs under
their own runtime switches, read when each delegate binds."""

import functools

import torch

from backends.cpu.runtime.test.lowered_program import lower_to_pte
from tools.bench import zoo


@functools.cache
def small_zoo_program(
    name: str, seed: int, batch: int
) -> tuple[torch.nn.Module, torch.Tensor, bytes]:
    """The zoo model `name` at its small size (weights of `seed`), a seeded batch of 3x32x32
    images and its .pte (every op delegated)."""
    model, _ = zoo.create(name, "small", seed=seed)
    model = model.eval()
    x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
    return model, x, lower_to_pte(model, (x,))[0]
