"""CpuBackend: the ahead-of-time half of the CPU delegate (the C++ runtime registers the same name).

`preprocess` receives one partition (a private copy of it), runs `CPU_PREPROCESS_PASSES`, lifts
constants and drops unused ones, then serializes the graph into the schema.fbs payload and the
constants into ExecuTorch's named data store. Its debug-handle map names every profiling event
the runtime may log for the payload (see profiling_events.py).
"""

from collections.abc import Callable
from typing import Any, final

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torch.export import ExportedProgram

from backends.cpu import profiling_events, symbolic_dims
from backends.cpu.fuse_rms_norm import FuseRmsNormPass
from backends.cpu.fuse_rotary import FuseRotaryPass
from backends.cpu.fuse_safe_softmax import FuseSafeSoftmaxPass
from backends.cpu.quantized_fusion import FuseQuantizedGroups
from backends.cpu.serialization.graph_writer import serialize_program
from backends.cpu.torchao.fusion import FuseTorchaoOps
from backends.transforms.fold_constant_subgraphs import FoldConstantSubgraphsPass
from backends.transforms.fuse_batch_norm_with_conv import FuseBatchNormWithConvPass
from backends.transforms.fuse_batch_norm_with_linear import FuseBatchNormWithLinearPass
from backends.transforms.pass_report import PassReport
from backends.transforms.pipeline import run_passes
from backends.transforms.remove_identity_copies import RemoveIdentityCopiesPass

# The one extension point for graph rewrites inside the delegate: factories of passes, each applied
# as `report = make_pass()(program)`, editing the program in place. Every lowering flow gets its
# passes from here; constant lifting and pruning always run after them (see run_passes).
CPU_PREPROCESS_PASSES: list[Callable[[], Callable[[ExportedProgram], PassReport]]] = [
    FuseBatchNormWithConvPass,
    FuseBatchNormWithLinearPass,
    FuseQuantizedGroups,
    FuseTorchaoOps,
    FuseRotaryPass,
    FuseRmsNormPass,
    FuseSafeSoftmaxPass,
    FoldConstantSubgraphsPass,
    RemoveIdentityCopiesPass,
]


@final
class CpuBackend(BackendDetails):
    """Preprocess for the CPU delegate; the runtime's BackendInterface is named "CpuBackend" too."""

    @staticmethod
    def preprocess(
        edge_program: ExportedProgram, compile_specs: list[CompileSpec]
    ) -> PreprocessResult:
        """Rewrites and serializes one partition.

        Raises backends.cpu.serialization.graph_writer.SerializationError naming the node when the
        partition holds something the delegate cannot run (an op without a route, an unsupported
        dtype, a symbolic shape).
        """
        if compile_specs:
            keys = ", ".join(spec.key for spec in compile_specs)
            raise ValueError(f"CpuBackend takes no compile specs, got: {keys}")
        handles_before = profiling_events.snapshot_handles(edge_program)
        # The program's shape environment is the owning program's (a deep copy shares it): a
        # guard a rewrite's fake kernels install here would narrow the bounds to_executorch plans.
        with symbolic_dims.guards_suppressed(edge_program):
            reports = run_passes(edge_program, [make_pass() for make_pass in CPU_PREPROCESS_PASSES])
            serialized = serialize_program(edge_program)
        # Not serialized into the .pte: kept on the lowered module for lowering reports.
        info: dict[str, Any] = {
            "pass_reports": [report.to_dict() for report in reports],
            "constant_keys": dict(serialized.constant_keys),
        }
        return PreprocessResult(
            processed_bytes=serialized.payload,
            debug_handle_map=profiling_events.debug_handle_map(
                edge_program, serialized.ops, handles_before
            ),
            data_store_output=serialized.named_data,
            _delegate_info_meta=info,
        )
