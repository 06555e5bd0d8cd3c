"""et_cpu_plugin: lower PyTorch models to ExecuTorch's CPU delegate and run them.

    from et_cpu_plugin import CpuPartitioner, load_cpu_backend

`CpuPartitioner()` goes to `executorch.exir.to_edge_transform_and_lower(..., partitioner=[...])`;
`load_cpu_backend()` registers the delegate's runtime ("CpuBackend") with the ExecuTorch runtime
of this process before a `.pte` that uses it is loaded. The rest of the package (the passes, the
payload reader, the runtime's query functions) is importable under `et_cpu_plugin.backends`.

This file is the installed package's `__init__.py` (//tools/wheel writes it there); in the
repository the same imports are the top-level `backends` packages.
"""

from backends.cpu.partition.cpu_partitioner import CpuPartitioner
from backends.cpu.runtime.loader import CpuBackendNotFoundError, load_cpu_backend

__all__ = ["CpuBackendNotFoundError", "CpuPartitioner", "load_cpu_backend"]
