"""The Optimized provider's bind table (bind_table.cc) against the route table (routes.py).

Every route the partitioner may place on the Optimized provider (provider=OPTIMIZED) must have a
binder, or the runtime would decline it every time ("no oneDNN kernel for ..."); every binder
must have such a route, or it is unreachable. The table's kernel names come from the runtime
library itself (et_cpu_optimized_kernels), so the test reads what the provider really binds.
"""

import ctypes
from collections import Counter

import pytest

from backends.cpu.routes import ROUTES, Provider
from backends.cpu.runtime import loader


@pytest.fixture(scope="module")
def bound_kernels() -> list[str]:
    """The bind table's kernel names, in table order (repeats kept)."""
    library = ctypes.CDLL(loader.load_cpu_backend())
    query = library.et_cpu_optimized_kernels
    query.restype = ctypes.c_size_t
    query.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    size = int(query(None, 0))
    buffer = ctypes.create_string_buffer(size + 1)
    assert int(query(buffer, len(buffer))) == size
    return buffer.value.decode().splitlines()


def _optimized_routes() -> set[str]:
    return {route.kernel for route in ROUTES.values() if route.provider == Provider.OPTIMIZED}


def test_every_optimized_route_has_a_binder(bound_kernels: list[str]) -> None:
    missing = sorted(_optimized_routes() - set(bound_kernels))
    assert not missing, f"routed to the Optimized provider without a binder: {missing}"


def test_every_binder_has_an_optimized_route(bound_kernels: list[str]) -> None:
    unreachable = sorted(set(bound_kernels) - _optimized_routes())
    assert not unreachable, f"binders no Optimized route reaches: {unreachable}"


def test_each_kernel_has_one_row(bound_kernels: list[str]) -> None:
    repeated = sorted(name for name, count in Counter(bound_kernels).items() if count > 1)
    assert not repeated, f"kernels with more than one bind-table row: {repeated}"
