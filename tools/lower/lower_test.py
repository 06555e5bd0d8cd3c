"""Tests of the lowering tool's parts that need no delegate: examples, input sampling, the output
check, the report, and bad-input handling of the command line (one line, right exit code)."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tools.lower import main as cli
from tools.lower.errors import ExitCode, LowerError
from tools.lower.examples import EXAMPLES, get_example
from tools.lower.lowering import Delegation
from tools.lower.profile_chart import MAX_OP_ROWS, render_svg
from tools.lower.profiling import OpTime, Profile, ProfilePaths
from tools.lower.program_io import load_pt2, sample_inputs
from tools.lower.report import PROFILE_ROWS, Report, render_profile, render_text
from tools.lower.runtime_check import compare_outputs


class _Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return x[idx] * 2


def _save(tmp_path: Path, name: str, dynamic: bool, keep_example_inputs: bool) -> Path:
    x, idx = torch.randn(4, 3), torch.tensor([0, 1])
    shapes = ({0: torch.export.Dim("rows", min=2)}, None) if dynamic else None
    program = torch.export.export(_Scale(), (x, idx), dynamic_shapes=shapes)
    if not keep_example_inputs:
        program.example_inputs = None
    path = tmp_path / name
    torch.export.save(program, str(path))
    return path


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_are_deterministic_eval_models_with_nontrivial_batch_norms(name: str) -> None:
    example = get_example(name)
    a, b = example.model("small"), example.model("small")
    assert not a.training
    for pa, pb in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)
    for xa, xb in zip(example.sample_inputs("small"), example.sample_inputs("small"), strict=True):
        assert torch.equal(xa, xb)
    norms = [m for m in a.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for bn in norms:  # identity batch norms would hide a wrong fold
        assert bn.running_mean is not None and bn.running_mean.abs().sum() > 0
    assert (len(norms) > 0) == (name not in ("index", "llm"))


def test_full_sizes_are_the_benchmark_shapes() -> None:
    assert get_example("resnet").sample_inputs("full")[0].shape == (1, 3, 224, 224)
    assert get_example("mobilenet").sample_inputs("full")[0].shape == (1, 3, 224, 224)
    assert get_example("mlp_bn").sample_inputs("full")[0].shape[0] == 32


def test_unknown_example_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown example 'vgg'; known examples: resnet"):
        get_example("vgg")


def test_integer_outputs_must_match_exactly_and_floats_within_tolerance() -> None:
    ints = torch.tensor([1, 2, 3])
    floats = torch.tensor([1.0, 2.0])
    ok = compare_outputs([ints, floats + 1e-6], [ints, floats], atol=1e-4, rtol=0)
    assert [c.ok for c in ok] == [True, True]
    off_by_one = compare_outputs([ints + 1, floats], [ints, floats])
    assert [c.ok for c in off_by_one] == [False, True]
    assert off_by_one[0].exact_required and off_by_one[0].max_abs_error == 1.0
    too_far = compare_outputs([ints, floats + 1e-3], [ints, floats], atol=1e-4, rtol=1e-4)
    assert [c.ok for c in too_far] == [True, False]
    wrong_dtype = compare_outputs([ints.int()], [ints])
    assert not wrong_dtype[0].ok and wrong_dtype[0].problem == "got int32[3], expected int64[3]"
    assert compare_outputs([], [ints])[0].problem == "missing"


def test_inputs_come_from_the_saved_examples_or_the_declared_static_shapes(tmp_path: Path) -> None:
    with_inputs = load_pt2(str(_save(tmp_path, "a.pt2", dynamic=False, keep_example_inputs=True)))
    assert with_inputs.inputs_origin == "example inputs saved with the program"
    program = torch.export.load(str(_save(tmp_path, "b.pt2", False, keep_example_inputs=False)))
    inputs, origin = sample_inputs(program, "b.pt2")
    assert origin.startswith("seeded random inputs")
    assert [t.shape for t in inputs] == [(4, 3), (2,)]
    assert inputs[1].dtype == torch.int64 and int(inputs[1].max()) < 4


def test_dynamic_inputs_without_saved_examples_cannot_be_sampled(tmp_path: Path) -> None:
    path = _save(tmp_path, "dyn.pt2", dynamic=True, keep_example_inputs=False)
    with pytest.raises(LowerError, match=r"cannot sample input 'x': dimension .* is dynamic") as e:
        load_pt2(str(path))
    assert e.value.code == ExitCode.BAD_INPUT


def _report() -> Report:
    delegation = Delegation(subgraphs=1)
    delegation.delegated.update({"aten.convolution.default": 3, "aten.relu.default": 2})
    delegation.not_delegated["dtype (float64 output)"] = Counter({"aten.add.Tensor": 1})
    return Report(
        source="example resnet (small)",
        target="cpu",
        output_path="/tmp/x.pte",
        inputs_origin="seeded",
        export_s=1.0,
        lowering_s=2.0,
        delegation=delegation,
        batch_norms_before=3,
        batch_norms_left=0,
        constant_bytes=2048,
        pte_bytes=3072,
        atol=1e-4,
        rtol=1e-4,
        checks=compare_outputs([torch.ones(2)], [torch.ones(2)]),
        delegate_details={"arena_bytes": 4096},
    )


def test_report_reads_at_a_glance_and_round_trips_to_json() -> None:
    text = render_text(_report())
    assert "Ops: 5 delegated in 1 subgraph(s), 1 not delegated" in text
    assert "delegated: convolution x3, relu x2" in text
    assert "not delegated, dtype (float64 output): add.Tensor x1" in text
    assert "Batch norms folded: 3 of 3" in text
    assert "Size: .pte 3.0 KiB (1.50x) vs constants of the exported program 2.0 KiB" in text
    assert "Delegate arena: 4.0 KiB" in text
    assert "MATCHES eager on 1 output(s) (float: atol 0.0001 + rtol 0.0001" in text
    data = json.loads(json.dumps(_report().to_dict()))
    assert data["batch_norms"] == {"before": 3, "left": 0, "folded": 3}
    assert data["delegation"]["not_delegated"] == {"dtype (float64 output)": {"aten.add.Tensor": 1}}
    assert data["check"]["matches_eager"] is True


def _run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(args)
    err = capsys.readouterr().err
    return code, err


def test_help_documents_exit_codes_and_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for needle in (
        "exit codes:",
        "--compare",
        "--example",
        "resnet",
        "mlp_bn",
        "atol",
        "--profile",
    ):
        assert needle in out


@pytest.mark.parametrize(
    ("make_input", "message"),
    [
        (lambda d: d / "missing.pt2", "missing.pt2: no such file"),
        (lambda d: d, "is a directory, expected a .pt2 file"),
        (lambda d: _write(d / "text.pt2", b"hello"), "text.pt2: not an exported program"),
        (lambda d: _zip(d / "zip.pt2"), "zip.pt2: not a loadable exported program"),
    ],
)
def test_bad_model_files_give_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make_input: Callable[[Path], Path],
    message: str,
) -> None:
    path = make_input(tmp_path)
    code, err = _run_cli([str(path), "-o", str(tmp_path / "o.pte"), "-q"], capsys)
    assert code == ExitCode.BAD_INPUT
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "o.pte").exists()


def test_unsampleable_inputs_give_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _save(tmp_path, "dyn.pt2", dynamic=True, keep_example_inputs=False)
    code, err = _run_cli([str(path), "-o", str(tmp_path / "o.pte"), "-q"], capsys)
    assert code == ExitCode.BAD_INPUT
    assert "cannot sample input 'x'" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("no/such/dir/out.pte", "does not exist"),
        (".", "is a directory, expected a .pte file path"),
        ("ro/out.pte", "permission denied"),
        ("file.txt/out.pte", "file.txt is not a directory"),
    ],
)
def test_unwritable_outputs_fail_before_lowering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str, message: str
) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "file.txt").write_text("")
    os.chmod(tmp_path / "ro", 0o500)
    if output.startswith("ro/") and os.access(tmp_path / "ro", os.W_OK):
        pytest.skip("running as root: directory permissions do not bind")
    os.environ["BUILD_WORKING_DIRECTORY"] = str(tmp_path)
    try:
        code, err = _run_cli(["--example", "mlp_bn", "-o", output, "-q"], capsys)
    finally:
        del os.environ["BUILD_WORKING_DIRECTORY"]
    assert code == ExitCode.BAD_INPUT
    assert message in err and err.count("\n") == 1


def test_model_and_example_together_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run_cli(["m.pt2", "--example", "resnet"], capsys)
    assert code == ExitCode.BAD_INPUT and "either MODEL.pt2 or --example" in err


def test_relative_paths_resolve_against_the_bazel_working_directory(tmp_path: Path) -> None:
    os.environ["BUILD_WORKING_DIRECTORY"] = str(tmp_path)
    try:
        assert cli.resolve("a/b.pte") == str(tmp_path / "a" / "b.pte")
        assert cli.resolve("/abs.pte") == "/abs.pte"
    finally:
        del os.environ["BUILD_WORKING_DIRECTORY"]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "not a program")
    return path


def _profile(count: int) -> Profile:
    ops = [
        OpTime(
            node=f"aten_convolution_default_{i}",
            op="convolution" if i % 2 else "linear",
            provider="Optimized" if i % 3 else "Reference",
            fused_with=("aten_relu_default",) if i == 0 else (),
            ms=float(count - i),
            share=(count - i) / 1000.0,
        )
        for i in range(count)
    ]
    return Profile(
        runs=4,
        warmup_runs=1,
        forward_ms=1000.0,
        ops=ops,
        delegate_calls={"CpuBackend": 990.0},
        paths=ProfilePaths.beside("/out/model.pte"),
    )


def test_profile_table_shows_the_slowest_ops_then_the_rest_and_the_files() -> None:
    lines = render_profile(_profile(PROFILE_ROWS + 2))
    assert lines[0].startswith("Profile (ETDump; mean of 4 run(s) after 1 warm-up): forward")
    assert "DELEGATE_CALL CpuBackend 990.000 ms" in lines[0]
    assert lines[1].split() == ["node", "op", "provider", "ms", "share", "fused", "with"]
    assert lines[2].split() == [
        "aten_convolution_default_0",
        "linear",
        "Reference",
        "12.0000",
        "1.2%",
        "aten_relu_default",
    ]
    assert lines[3].split()[-1] == "-"  # fused with nothing
    assert len([line for line in lines if "aten_convolution_default_" in line]) == PROFILE_ROWS
    assert "  ... 2 more ops: 3.0000 ms (0.3%)" in lines
    assert "  picture: /out/model.profile.svg" in lines
    assert "  ETDump: /out/model.etdp  ETRecord: /out/model.etrecord" in lines
    data = json.loads(json.dumps(_profile(3).to_dict()))
    assert [op["ms"] for op in data["ops"]] == [3.0, 2.0, 1.0]
    assert data["files"]["etdump"] == "/out/model.etdp"


def test_profile_chart_has_a_bar_per_op_and_per_kind_scaled_to_the_time() -> None:
    profile = _profile(MAX_OP_ROWS + 5)
    profile.ops[0] = OpTime("n" * 80, "convolution", "Optimized", (), 40.0, 0.04)
    svg = ET.fromstring(render_svg(profile, "title <&>"))
    ns = "{http://www.w3.org/2000/svg}"
    bars = [r for r in svg.iter(f"{ns}rect") if r.get("class") == "bar"]
    # MAX_OP_ROWS ops, one bar for the other 5, then the two op kinds.
    assert len(bars) == MAX_OP_ROWS + 1 + 2
    widths = [float(b.get("width", "0")) for b in bars]
    assert widths[0] == 350.0 and abs(widths[1] - 350.0 * 29 / 40) < 0.1
    texts = [t.text or "" for t in svg.iter(f"{ns}text")]
    assert "title <&>" in texts
    assert "n" * 59 + "…" in texts  # a long label is cut; its bar's tooltip has all of it
    assert "5 more ops" in texts and "per op kind" in texts


def test_quiet_hides_the_listed_dependency_noise_and_nothing_else() -> None:
    code = (
        "import logging, warnings\n"
        "from tools.lower import quiet\n"
        "quiet.silence_dependency_noise()\n"
        "logging.getLogger('torchao').warning('Failed to load /x/_C_mxfp8.so: no GPU')\n"
        "logging.getLogger('torchao').warning('torchao says something else')\n"
        "warnings.warn('`isinstance(treespec, LeafSpec)` is deprecated', FutureWarning)\n"
        "warnings.warn('our own warning')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert "Failed to load" not in proc.stderr and "LeafSpec" not in proc.stderr
    assert "torchao says something else" in proc.stderr
    assert "our own warning" in proc.stderr


def test_profile_runs_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run_cli(["--profile", "--profile-runs", "0"], capsys)
    assert code == ExitCode.BAD_INPUT and "--profile-runs must be >= 1" in err


def test_profile_without_a_delegate_counts_each_portable_kernel_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, report = tmp_path / "mlp.pte", tmp_path / "report.json"
    args = ["--example", "mlp_bn", "--target", "none", "--runs", "0", "--profile"]
    code = cli.main([*args, "--profile-runs", "2", "-o", str(out), "--json", str(report), "-q"])
    capsys.readouterr()
    assert code == ExitCode.OK
    profile = json.loads(report.read_text())["profile"]
    ops = profile["ops"]
    # Named after the program's nodes (through the ETRecord), not ExecuTorch's event names; the
    # instruction event around each kernel is not counted again.
    assert ops and all(op["node"].startswith("aten_") for op in ops), ops
    assert all(op["provider"] == "portable" and op["op"] != "-" for op in ops)
    assert 0.5 < sum(op["share"] for op in ops) <= 1.0


def test_quantize_ptq_lowers_an_int8_program_fully_delegated_with_its_sqnr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, report = tmp_path / "resnet_int8.pte", tmp_path / "report.json"
    args = ["--example", "resnet", "--quantize", "ptq", "--runs", "0", "-q"]
    code = cli.main([*args, "-o", str(out), "--json", str(report)])
    text = capsys.readouterr().out
    assert code == ExitCode.OK, text
    document = json.loads(report.read_text())
    assert document["delegation"]["not_delegated"] == {}, document["delegation"]
    assert any("quantize_per_tensor" in op for op in document["delegation"]["delegated"])
    # Against the quantized model within one output step; the quantization error is the SQNR.
    assert document["check"]["sqnr_db"] > 20.0, document["check"]
    assert "SQNR against the float model" in text


class _BatchCnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def test_check_sizes_runs_a_bounded_dynamic_pt2_at_sizes_within_its_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=1, max=9)
    program = torch.export.export(
        _BatchCnn().eval(), (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: batch},)
    )
    program.example_inputs = None  # sampled at the upper bound
    path = tmp_path / "cnn.pt2"
    torch.export.save(program, str(path))
    out_json = tmp_path / "r.json"
    args = [str(path), "-o", str(tmp_path / "cnn.pte"), "--runs", "0", "-q", "--check-sizes"]
    code = cli.main([*args, "--json", str(out_json)])
    text = capsys.readouterr().out
    assert code == ExitCode.OK, text
    report = json.loads(out_json.read_text())
    assert report["delegation"]["not_delegated_count"] == 0
    sizes = report["check"]["sizes"]
    assert [next(iter(s["sizes"].values())) for s in sizes] == [1, 9, 4, 6]
    assert [s["input_shapes"][0][0] for s in sizes] == [1, 9, 4, 6]
    assert all(s["ok"] for s in sizes)
    assert "sizes within the dynamic bounds (4 checked, one .pte)" in text


def test_quantize_qat_lowers_the_folded_qat_program_fully_delegated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, report = tmp_path / "resnet_qat.pte", tmp_path / "report.json"
    args = ["--example", "resnet", "--size", "small", "--quantize", "qat", "--runs", "0", "-q"]
    code = cli.main([*args, "-o", str(out), "--json", str(report)])
    text = capsys.readouterr().out
    assert code == ExitCode.OK, text
    document = json.loads(report.read_text())
    assert document["delegation"]["not_delegated"] == {}, document["delegation"]
    # FuseQATConvBN left each conv a per-channel output quantize, fused into the int8 conv.
    assert any("quantize_per_channel" in op for op in document["delegation"]["delegated"])
    assert document["check"]["sqnr_db"] > 10.0, document["check"]
    assert "QAT" in document["source"], document["source"]


def test_quantize_8da4w_quantizes_the_linears_fully_delegated_and_shrinks_the_pte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, report = tmp_path / "mlp_8da4w.pte", tmp_path / "report.json"
    args = ["--example", "mlp_bn", "--size", "full", "--quantize", "8da4w", "--runs", "0", "-q"]
    code = cli.main([*args, "-o", str(out), "--json", str(report)])
    text = capsys.readouterr().out
    assert code == ExitCode.OK, text
    document = json.loads(report.read_text())
    assert document["delegation"]["not_delegated"] == {}, document["delegation"]
    # Three 1024-wide hidden linears and the classifier, int4 weights per group of 32.
    assert document["quantization"].startswith("4 linear(s) 8da4w"), document["quantization"]
    assert "per group of 32" in document["quantization"]
    assert any("choose_qparams_affine" in op for op in document["delegation"]["delegated"])
    # ~0.63 bytes a weight instead of 4 (the batch norms and biases stay float).
    assert document["pte_bytes"] < 0.25 * document["float_constant_bytes"], document
    assert document["check"]["matches_eager"] and document["check"]["sqnr_db"] > 10.0
    assert "Quantized: 4 linear(s) 8da4w" in text and "the float program's constants" in text


def test_quantize_torchao_leaves_linears_the_group_does_not_divide_float() -> None:
    from tools.lower import quantize
    from tools.lower.program_io import export_example

    source = export_example("mlp_bn", "small")  # linears 16 -> 32 -> 32 -> 10
    quantized, float_model, summary = quantize.quantize_torchao(source, "8da4w", 32)
    assert (summary.linears, summary.linears_left_float) == (2, 1)
    assert float_model is source.eager
    targets = Counter(str(n.target) for n in quantized.program.graph.nodes)
    assert targets["torchao.choose_qparams_affine.default"] == 2
    assert "1 left float" in quantized.label
    _, _, weight_only = quantize.quantize_torchao(source, "int8wo")
    assert (weight_only.linears, weight_only.linears_left_float) == (3, 0)
    assert weight_only.scheme.startswith("int8wo")


def test_quantize_8da4w_without_a_divisible_linear_gives_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--example", "mlp_bn", "--quantize", "8da4w", "--group-size", "7", "-q"]
    code, err = _run_cli([*args, "-o", str(tmp_path / "o.pte")], capsys)
    assert code == ExitCode.BAD_INPUT
    assert "no linear's input width is a multiple of --group-size 7" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_llm_example_with_its_kv_caches_lowers_8da4w_fully_delegated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, report = tmp_path / "llm.pte", tmp_path / "report.json"
    args = ["--example", "llm", "--quantize", "8da4w", "--runs", "0", "-q"]
    code = cli.main([*args, "-o", str(out), "--json", str(report)])
    text = capsys.readouterr().out
    assert code == ExitCode.OK, text
    document = json.loads(report.read_text())
    assert document["delegation"]["not_delegated"] == {}, document["delegation"]
    # 2 layers x (q, k, v, o, w1, w2, w3) and the output projection.
    assert document["quantization"].startswith("15 linear(s) 8da4w"), document["quantization"]
    assert document["check"]["matches_eager"]


def test_quantize_int8wo_lowers_weight_only_linears_fully_delegated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, report = tmp_path / "mlp_int8wo.pte", tmp_path / "report.json"
    args = ["--example", "mlp_bn", "--size", "full", "--quantize", "int8wo", "--runs", "0", "-q"]
    code = cli.main([*args, "-o", str(out), "--json", str(report)])
    text = capsys.readouterr().out
    assert code == ExitCode.OK, text
    document = json.loads(report.read_text())
    assert document["delegation"]["not_delegated"] == {}, document["delegation"]
    assert document["quantization"].startswith("4 linear(s) int8wo"), document["quantization"]
    assert any("dequantize_affine" in op for op in document["delegation"]["delegated"])
    # One byte a weight plus a float32 scale per output channel, instead of 4 bytes.
    assert document["pte_bytes"] < 0.35 * document["float_constant_bytes"], document
    assert document["check"]["matches_eager"] and document["check"]["sqnr_db"] > 20.0
