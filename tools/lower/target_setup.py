"""What a lowering target provides: its partitioners and how to ask its delegate what it did.

Its own module so that a target's implementation (cpu_delegate.py) and the lowering steps
(lowering.py) both depend on it, not on each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class TargetSetup:
    """How to lower for a target, and how to ask its delegate what it did.

    ``explain(node)`` says why a node stayed out of the delegate as ``(reason, detail)``, where
    the reason is what the report groups by (None: no reason known);
    ``describe_delegate(lowered_module)`` returns figures about one delegated subgraph, where the
    key ``batch_norm_ops`` counts batch norms the subgraph still executes; ``runtime_details()``
    returns figures the runtime knows once the program is loaded (e.g. ``arena_bytes``).
    """

    partitioners: list[Any]
    prepare_runtime: Callable[[], None] = lambda: None
    explain: Callable[[torch.fx.Node], tuple[str, str] | None] = lambda _node: None
    describe_delegate: Callable[[Any], dict[str, Any]] = lambda _module: {}
    runtime_details: Callable[[], dict[str, Any]] = lambda: {}
