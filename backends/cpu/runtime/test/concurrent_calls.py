"""Threads calling their own delegated programs at once through ExecuTorch's Python bindings, the
way a Python server does (issue 43): `concurrent_calls.py --threads T --calls C DIR` loads the
stress programs from DIR (stress_programs.py), runs each once alone for its reference outputs,
then starts T threads; thread t loads its own module of program t % P and calls it C times (the
dynamic-batch CNN at batch 1..max in turn), and every output must equal the reference exactly.
Prints one JSON line; exits 0 only if every call matched. The caller also checks that the process
then exits cleanly: the crash issue 43 found came at exit."""

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
from executorch.extension.pybindings import portable_lib

from backends.cpu.runtime import loader
from backends.cpu.runtime.test import stress_programs


def _sizes(name: str) -> list[int]:
    return list(range(1, stress_programs.DYNAMIC_MAX_BATCH + 1)) if name == "dynamic_cnn" else [1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("folder", help="the stress programs' folder (NAME.pte)")
    args = parser.parse_args(argv)
    loader.load_cpu_backend()
    names = sorted(stress_programs.PROGRAMS)
    ptes = {}
    for name in names:
        with open(os.path.join(args.folder, f"{name}.pte"), "rb") as f:
            ptes[name] = f.read()  # kept alive: the runtime does not own a program's buffer
    expected: dict[tuple[str, int], torch.Tensor] = {}
    for name in names:
        module = portable_lib._load_for_executorch_from_buffer(ptes[name])
        for size in _sizes(name):
            inputs = stress_programs.example_inputs(name, size)
            expected[name, size] = module.forward(list(inputs))[0].clone()

    mismatches: list[str] = []
    failures: list[str] = []
    barrier = threading.Barrier(args.threads)

    def work(index: int) -> None:
        name = names[index % len(names)]
        module: Any = portable_lib._load_for_executorch_from_buffer(ptes[name])
        sizes = _sizes(name)
        barrier.wait()
        try:
            for call in range(args.calls):
                size = sizes[call % len(sizes)]
                output = module.forward(list(stress_programs.example_inputs(name, size)))[0]
                if not torch.equal(output, expected[name, size]):
                    mismatches.append(f"{name} size {size} call {call}")
        except Exception as error:  # reported, and the exit code says it
            failures.append(f"thread {index} ({name}): {error}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(args.threads)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "threads": args.threads,
                "calls": args.threads * args.calls,
                "seconds": seconds,
                "mismatches": mismatches[:10],
                "failures": failures[:10],
            }
        )
    )
    sys.stdout.flush()
    return 0 if not mismatches and not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
