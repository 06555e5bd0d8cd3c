"""Where the parts of a `.pte` sit in the file: headers, program flatbuffer, delegate payloads,
named data.

Facts from ExecuTorch's `docs/source/pte-file-format.md` and `schema/program.fbs` (1.5.1):
bytes 4..8 hold the file identifier ("ET" and two digits); an optional extended header at byte 8
("eh" and two digits, then its length u32, the program size u64 and the segment base offset u64,
little-endian) says where the appended segments start. `Program.segments` lists (offset, size)
of each segment relative to that base; a delegate whose `processed` data location is SEGMENT
names its segment by index, and `Program.named_data` maps each key to a segment index.

Used by the fuzzer (tools/pte_fuzz) to aim its mutations, and by the lowering tool to refuse a
damaged file before ExecuTorch's runtime reads it: ExecuTorch 1.5.1 trusts some of these offsets
(issue 22 found crashes in Program::load, PteDataMap::get_data, BackendDelegate::Init on files
that fail these checks). The names ExecuTorch may log (method names, operator names, backend
ids, named-data keys) must be UTF-8: the Python bindings' log sink aborts the process on other
bytes, and ExecuTorch's own verifier does not look at them. Not a full validation: a file that
passes can still crash the runtime (tools/lower/runtime_check.verify_program adds ExecuTorch's
verifier).
Raises LayoutError naming what does not fit. Imports neither torch nor executorch.
"""

from __future__ import annotations

import dataclasses
import struct

from flatbuffers.table import Table

# Field slots (vtable order) in program.fbs: Program, ExecutionPlan, BackendDelegate, ...
_PROGRAM_EXECUTION_PLAN = 1
_PROGRAM_BACKEND_DELEGATE_DATA = 3
_PROGRAM_SEGMENTS = 4
_PROGRAM_NAMED_DATA = 7
_PLAN_NAME = 0
_PLAN_OPERATORS = 6
_PLAN_DELEGATES = 7
_OPERATOR_NAME = 0
_OPERATOR_OVERLOAD = 1
_DELEGATE_ID = 0
_DELEGATE_PROCESSED = 1
_REFERENCE_LOCATION = 0
_REFERENCE_INDEX = 1
_SEGMENT_OFFSET = 0
_SEGMENT_SIZE = 1
_NAMED_DATA_KEY = 0
_NAMED_DATA_SEGMENT = 1
_INLINE_DATA = 0
_LOCATION_SEGMENT = 1

_EXTENDED_HEADER_OFFSET = 8
_FILE_IDENTIFIER = b"ET12"  # program.fbs `file_identifier` of executorch 1.5.1


class LayoutError(ValueError):
    """The file is not a .pte this reader understands; the message says what is off."""


@dataclasses.dataclass(frozen=True)
class Region:
    """A byte range [start, start + size) of the file and what it holds."""

    kind: str  # "delegate" or "named_data"
    name: str  # the backend id, or the named-data key
    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclasses.dataclass(frozen=True)
class PteLayout:
    file_size: int
    program_size: int  # bytes of the program flatbuffer (headers included)
    segment_base: int  # where segment data starts (0 when there is none)
    regions: tuple[Region, ...]

    def of_kind(self, kind: str) -> tuple[Region, ...]:
        return tuple(r for r in self.regions if r.kind == kind)


def _field(table: Table, slot: int) -> int:
    """The field's offset inside the table, 0 when it is absent."""
    return int(table.Offset(4 + 2 * slot))


def _sub_table(table: Table, slot: int) -> Table | None:
    offset = _field(table, slot)
    if offset == 0:
        return None
    return Table(table.Bytes, table.Indirect(table.Pos + offset))


def _tables(table: Table, slot: int) -> list[Table]:
    """The tables of a vector-of-tables field."""
    offset = _field(table, slot)
    if offset == 0:
        return []
    start, count = table.Vector(offset), table.VectorLen(offset)
    if start + 4 * count > len(table.Bytes):
        raise LayoutError(f"a vector of {count} tables at byte {start} runs past the program")
    return [Table(table.Bytes, table.Indirect(start + 4 * i)) for i in range(count)]


def _scalar(table: Table, slot: int, fmt: str, default: int = 0) -> int:
    offset = _field(table, slot)
    if offset == 0:
        return default
    return int(struct.unpack_from("<" + fmt, table.Bytes, table.Pos + offset)[0])


def _text(table: Table, slot: int, what: str) -> str:
    """A string ExecuTorch may print in a log line (a backend id, an operator or key it cannot
    find): it must be UTF-8, or the Python bindings' log sink throws and aborts the process."""
    offset = _field(table, slot)
    raw = bytes(table.String(table.Pos + offset)) if offset else b""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LayoutError(f"{what} is not UTF-8 text ({raw[:40]!r})") from None


def read_layout(data: bytes) -> PteLayout:
    """The regions of a well-formed .pte; LayoutError names what does not fit."""
    try:
        return _read_layout(data)
    except (IndexError, TypeError, struct.error, UnicodeError, OverflowError) as exc:
        raise LayoutError(f"the program flatbuffer points outside the file ({exc})") from None


def _read_layout(data: bytes) -> PteLayout:
    if len(data) < 16 or data[4:6] != b"ET":
        raise LayoutError("not a .pte: no 'ET' file identifier at byte 4")
    if data[4:8] != _FILE_IDENTIFIER:
        # ExecuTorch logs the identifier it found: raw bytes, which abort the Python bindings.
        raise LayoutError(
            f"file identifier {data[4:8]!r} at byte 4, this ExecuTorch reads {_FILE_IDENTIFIER!r}"
        )
    program_size, segment_base = len(data), 0
    if data[_EXTENDED_HEADER_OFFSET : _EXTENDED_HEADER_OFFSET + 2] == b"eh":
        header_length = struct.unpack_from("<I", data, _EXTENDED_HEADER_OFFSET + 4)[0]
        if header_length < 24:
            raise LayoutError(f"extended header of {header_length} bytes, expected >= 24")
        program_size, segment_base = struct.unpack_from("<QQ", data, _EXTENDED_HEADER_OFFSET + 8)
        if program_size > len(data):
            raise LayoutError(f"header: program of {program_size} bytes, file of {len(data)}")
        if header_length >= 32:
            segment_data = struct.unpack_from("<Q", data, _EXTENDED_HEADER_OFFSET + 24)[0]
            if segment_base + segment_data > len(data):
                raise LayoutError(
                    f"header: segments end at byte {segment_base + segment_data}, file has "
                    f"{len(data)} (truncated?)"
                )
    root_offset = struct.unpack_from("<I", data, 0)[0]
    if root_offset >= program_size:
        raise LayoutError(f"flatbuffer root at byte {root_offset}, program has {program_size}")
    root = Table(bytearray(data[:program_size]), root_offset)

    segments = [
        (_scalar(s, _SEGMENT_OFFSET, "Q"), _scalar(s, _SEGMENT_SIZE, "Q"))
        for s in _tables(root, _PROGRAM_SEGMENTS)
    ]

    def segment_region(kind: str, name: str, index: int) -> Region:
        if index >= len(segments):
            raise LayoutError(f"{kind} {name!r} names segment {index} of {len(segments)}")
        offset, size = segments[index]
        region = Region(kind, name, segment_base + offset, size)
        if segment_base < program_size or region.end > len(data):
            raise LayoutError(f"{kind} {name!r} ends at byte {region.end}, past {len(data)}")
        return region

    inline = _tables(root, _PROGRAM_BACKEND_DELEGATE_DATA)
    regions: list[Region] = []
    for p, plan in enumerate(_tables(root, _PROGRAM_EXECUTION_PLAN)):
        method = _text(plan, _PLAN_NAME, f"the name of method {p}")
        for o, operator in enumerate(_tables(plan, _PLAN_OPERATORS)):
            for slot, part in ((_OPERATOR_NAME, "name"), (_OPERATOR_OVERLOAD, "overload")):
                _text(operator, slot, f"method {method!r}: the {part} of operator {o}")
        for d, delegate in enumerate(_tables(plan, _PLAN_DELEGATES)):
            backend = _text(delegate, _DELEGATE_ID, f"method {method!r}: the id of delegate {d}")
            processed = _sub_table(delegate, _DELEGATE_PROCESSED)
            if processed is None:
                raise LayoutError(f"delegate {backend!r} has no processed data")
            location = _scalar(processed, _REFERENCE_LOCATION, "b")
            index = _scalar(processed, _REFERENCE_INDEX, "I")
            if location == _LOCATION_SEGMENT:
                regions.append(segment_region("delegate", backend, index))
                continue
            if index >= len(inline):
                raise LayoutError(f"delegate {backend!r} names inline data {index}")
            vector = _field(inline[index], _INLINE_DATA)
            start = inline[index].Vector(vector)
            regions.append(Region("delegate", backend, start, inline[index].VectorLen(vector)))
    for n, named in enumerate(_tables(root, _PROGRAM_NAMED_DATA)):
        key = _text(named, _NAMED_DATA_KEY, f"the key of named data entry {n}")
        regions.append(segment_region("named_data", key, _scalar(named, _NAMED_DATA_SEGMENT, "I")))
    return PteLayout(len(data), program_size, segment_base, tuple(regions))
