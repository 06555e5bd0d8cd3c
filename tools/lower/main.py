"""`bazel run //tools/lower -- [MODEL.pt2 | --example NAME] [-o OUT.pte] [--compare] [--json FILE]`

Lowers a model to a `.pte` for the CPU delegate, runs it on the ExecuTorch runtime, checks it
against eager PyTorch and prints a report. With no arguments it lowers the default example.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

from tools.lower import quiet
from tools.lower.errors import ExitCode, LowerError

# Kept in step with examples.EXAMPLES.
_EXAMPLE_NAMES = ("resnet", "mobilenet", "mlp_bn", "index", "llm")
_TARGETS = ("cpu", "xnnpack", "none")

EPILOG = """\
examples:
  bazel run //tools/lower                                  lower the default example (resnet, small)
  bazel run //tools/lower -- --example mobilenet --compare side by side with XNNPACK and no delegate
  bazel run //tools/lower -- model.pt2 -o model.pte --json report.json
  bazel run //tools/lower -- --profile                     the slowest ops, from an ETDump

profile (--profile):
  After the check, the .pte runs once more to warm up and --profile-runs times with ETDump. The
  report lists the slowest ops (node, op, provider, fused with, mean ms per run, share of the
  forward); the JSON report has every op. Beside the .pte: NAME.etdp (ETDump), NAME.etrecord
  (ETRecord) for executorch.devtools.Inspector, and NAME.profile.svg, a bar chart per op and per
  op kind. On the CPU delegate an op that fused the ops after it is one row.

quantization (--quantize ptq | qat | 8da4w | int8wo):
  ptq: the model is quantized to int8 (per-channel symmetric weights, per-tensor activations)
  with PT2E and XNNPACK's quantizer, calibrated on the sample inputs, then lowered; on the CPU
  delegate its convolutions and linears run as oneDNN int8 kernels. qat: every convolution is
  quantized by the project's QATConvOutputQuantizer (int8 input, weight and output, int32 bias),
  trained a few steps on the sample inputs to match the float model, converted, and its batch
  norm folded into the int32 bias by FuseQATConvBN; the rest of the model stays float. The
  check compares against the quantized model in eager PyTorch with atol widened to one step of
  the output's quantization grid; the report adds the SQNR against the float model.
  8da4w: every torch.nn.Linear whose input width is a multiple of --group-size (default 32) is
  quantized with torchao (Int8DynamicActivationIntxWeightConfig: int8 activations quantized per
  token at run time, int4 symmetric weights per group); int8wo: torchao IntxWeightOnlyConfig,
  int8 weights per output channel. No calibration; the check compares against the torchao model
  in eager PyTorch; the report says how many linears were quantized, the .pte size against the
  float program's constants, and the SQNR against the float model. Only an example model (or a
  model whose linears are torch.nn.Linear modules) can be quantized this way, not a loaded .pt2.

inputs:
  A .pt2 is run on the example inputs saved with it (torch.export.save keeps them); without them,
  on seeded random tensors of the static shapes its graph declares (integers in [0, 2)).

numerics:
  Float outputs must satisfy |pte - eager| <= atol + rtol * |eager| element-wise; integer and bool
  outputs must be equal, dtype and shape included.

exit codes:
  0  the .pte was written, ran on the runtime and matches eager
  1  the .pte was written and ran, but differs from eager beyond the tolerance
  2  bad command line or input: missing/foreign model file, inputs that cannot be sampled,
     an output path that cannot be written
  3  exporting, lowering, loading or running the program failed

Relative paths are resolved against the directory `bazel run` was started from. Progress goes to
stderr; the report to stdout (or, with --json -, the JSON report to stdout). Known warnings of
dependencies (torchao, torch, executorch's Inspector) are hidden; -v shows them.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lower",
        description="Lower a PyTorch model to an ExecuTorch .pte on the CPU delegate, run it on "
        "the ExecuTorch runtime, check it against eager PyTorch and report what was delegated, "
        "folded, how big and how fast it is.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "model",
        nargs="?",
        metavar="MODEL.pt2",
        help="a program saved with torch.export.save (default: the built-in example)",
    )
    parser.add_argument(
        "--example",
        choices=_EXAMPLE_NAMES,
        help="lower a built-in torch.nn example instead of a file (default: resnet)",
    )
    parser.add_argument(
        "--size",
        choices=("small", "full"),
        default="small",
        help="example size: small (seconds) or full (1x3x224x224 images, batch 32 for the MLP); "
        "default: small",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="OUT.pte",
        help="where to write the .pte (default: MODEL.pte next to the model, or EXAMPLE.pte)",
    )
    parser.add_argument(
        "--target",
        choices=_TARGETS,
        default="cpu",
        help="what to lower for: the CPU delegate (default), XNNPACK, or none (portable kernels)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also lower for XNNPACK and with no delegate and time all of them and eager "
        "side by side, as ratios",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=10,
        metavar="N",
        help="timed rounds for the median latency (0: skip timing); default 10",
    )
    parser.add_argument(
        "--atol", type=float, default=1e-4, help="absolute tolerance vs eager (default 1e-4)"
    )
    parser.add_argument(
        "--rtol", type=float, default=1e-4, help="relative tolerance vs eager (default 1e-4)"
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        help="also write the report as JSON to FILE ('-' for stdout instead of the text report)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="threads for eager PyTorch and ExecuTorch's threadpool (default: leave as is); "
        "on a busy shared machine, 1 gives steadier timings",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also run the .pte with ETDump and report the ops that take the most time; writes "
        "NAME.etdp (ETDump), NAME.etrecord (ETRecord) and NAME.profile.svg (a bar chart) beside "
        "the .pte",
    )
    parser.add_argument(
        "--profile-runs",
        type=int,
        default=10,
        metavar="N",
        help="runs with ETDump for --profile, after one warm-up run; default 10",
    )
    parser.add_argument(
        "--quantize",
        choices=("none", "ptq", "qat", "8da4w", "int8wo"),
        default="none",
        help="ptq: quantize to int8 first (PT2E static quantization with XNNPACK's quantizer, "
        "calibrated on the sample inputs) and lower that; qat: the project's QAT flow "
        "(QATConvOutputQuantizer, a few training steps on the sample inputs, convert, "
        "FuseQATConvBN); 8da4w: torchao int8 dynamic activations + int4 weights per group on "
        "the linears; int8wo: torchao int8 weight-only per channel on the linears; default none",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        default=32,
        metavar="N",
        help="--quantize 8da4w: input channels per int4 weight scale; default 32",
    )
    parser.add_argument(
        "--check-sizes",
        action="store_true",
        help="for a program with bounded dynamic dimensions (torch.export.Dim(..., max=N)): also "
        "run the .pte at several sizes within the bounds (each symbol at its min, its max and "
        "two sizes between) against eager",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show the warnings and log messages of dependencies (torch, torchao, "
        "executorch) that are hidden by default (tools/lower/quiet.py lists them)",
    )
    return parser


def resolve(path: str) -> str:
    """Relative paths are relative to where the user ran `bazel run`, not to the runfiles tree."""
    if os.path.isabs(path):
        return path
    base = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    return os.path.normpath(os.path.join(base, path))


def _default_output(args: argparse.Namespace) -> str:
    if args.model:
        stem = os.path.splitext(args.model)[0]
        return f"{stem}.pte"
    return f"{args.example or 'resnet'}.pte"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.verbose:
        quiet.silence_dependency_noise()
    started = time.perf_counter()

    def say(message: str) -> None:
        if not args.quiet:
            print(f"[lower {time.perf_counter() - started:6.1f}s] {message}", file=sys.stderr)

    if args.model and args.example:
        print("lower: error: give either MODEL.pt2 or --example, not both", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.runs < 0:
        print("lower: error: --runs must be >= 0", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.profile_runs < 1:
        print("lower: error: --profile-runs must be >= 1", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.threads is not None and args.threads < 1:
        print("lower: error: --threads must be >= 1", file=sys.stderr)
        return ExitCode.BAD_INPUT

    json_path = None if args.json in (None, "-") else resolve(args.json)
    try:
        # Imported here so that `--help` and argument errors answer without loading torch.
        from tools.lower.pipeline import Request, check_output_path, run, set_threads
        from tools.lower.report import render_text

        if json_path is not None:
            check_output_path(json_path)
        if args.threads is not None:
            set_threads(args.threads)
        request = Request(
            output=resolve(args.output or _default_output(args)),
            model_path=resolve(args.model) if args.model else None,
            example=args.example,
            size=args.size,
            target=args.target,
            compare=args.compare,
            runs=args.runs,
            atol=args.atol,
            rtol=args.rtol,
            profile=args.profile,
            profile_runs=args.profile_runs,
            quantize=args.quantize,
            group_size=args.group_size,
            check_sizes=args.check_sizes,
        )
        report, code = run(request, say)
        document = json.dumps(report.to_dict(), indent=2)
        if args.json == "-":
            print(document)
        else:
            print(render_text(report))
        if json_path is not None:
            with open(json_path, "w") as f:
                f.write(document + "\n")
    except LowerError as exc:
        print(f"lower: error: {exc.message}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("lower: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: still one line unless asked for more
        if os.environ.get("LOWER_TRACEBACK"):
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        print(
            f"lower: internal error: {type(exc).__name__}: {first} "
            "(set LOWER_TRACEBACK=1 for the traceback)",
            file=sys.stderr,
        )
        return ExitCode.LOWERING_FAILED
    return code


if __name__ == "__main__":
    sys.exit(main())
