"""Seeded whole-file mutations of a `.pte`: a case id names its mutation exactly.

A mutation is drawn from `random.Random(f"{seed}/{program}/{index}")` (string seeds hash the same
on every run and machine) and written down as a recipe, a JSON-able dict that `apply` replays on
the original bytes. Kinds:

- `flip1`, `flip4`, `flip16`: XOR 1, 4 or 16 bytes at random offsets with random non-zero bytes;
- `int`: overwrite 4 or 8 bytes with a boundary integer (0, -1, 2^31-1, 2^31, 2^63, ...), the
  values a size, shape or offset field is likeliest to be wrong with;
- `truncate`: cut the file at an offset;
- `insert`: insert 1-64 random bytes at an offset;
- `delete`: delete 1-64 bytes at an offset.

Offsets fall in one target area: the whole file, or a delegate payload, or a named-data entry (the
regions of pte_layout), so that the parts our runtime reads get a fair share of the cases.
"""

from __future__ import annotations

import random
import struct
from typing import Any

from tools.lower.pte_layout import PteLayout, Region

KINDS = ("flip1", "flip4", "flip16", "int", "truncate", "insert", "delete")
AREAS = ("file", "delegate", "named_data")
# How often each area is chosen (areas the file lacks fall back to the whole file).
_AREA_WEIGHTS = (4, 3, 3)
_BOUNDARY_INTS = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 2**31 - 1, 2**31, 2**32 - 1, 2**63)
_MAX_RANGE = 64

Recipe = dict[str, Any]


def case_rng(seed: int, program: str, index: int) -> random.Random:
    return random.Random(f"{seed}/{program}/{index}")


def _pick_area(rng: random.Random, layout: PteLayout) -> tuple[str, Region]:
    area = rng.choices(AREAS, weights=_AREA_WEIGHTS)[0]
    candidates = layout.of_kind(area) if area != "file" else ()
    candidates = tuple(r for r in candidates if r.size > 0)
    if not candidates:
        return "file", Region("file", "", 0, layout.file_size)
    return area, rng.choice(candidates)


def draw(seed: int, program: str, index: int, layout: PteLayout) -> Recipe:
    """The recipe of case (seed, program, index) for a file of this layout."""
    rng = case_rng(seed, program, index)
    kind = rng.choice(KINDS)
    area, region = _pick_area(rng, layout)

    def offset() -> int:
        return region.start + rng.randrange(region.size)

    recipe: Recipe = {"kind": kind, "area": area, "region": region.name}
    if kind.startswith("flip"):
        count = int(kind[4:])
        recipe["xor"] = [[offset(), rng.randrange(1, 256)] for _ in range(count)]
    elif kind == "int":
        width = rng.choice((4, 8))
        value = rng.choice(_BOUNDARY_INTS) % (1 << (8 * width))
        raw = struct.pack("<Q", value)[:width]
        recipe["write"] = [offset(), raw.hex()]
    elif kind == "truncate":
        recipe["length"] = offset()
    elif kind == "insert":
        recipe["insert"] = [offset(), rng.randbytes(rng.randint(1, _MAX_RANGE)).hex()]
    else:
        recipe["delete"] = [offset(), rng.randint(1, _MAX_RANGE)]
    return recipe


def apply(data: bytes, recipe: Recipe) -> bytes:
    """The mutated file: `data` with the recipe applied (offsets past the end are clipped)."""
    out = bytearray(data)
    kind = recipe["kind"]
    if kind.startswith("flip"):
        for position, mask in recipe["xor"]:
            if position < len(out):
                out[position] ^= mask
    elif kind == "int":
        position, raw = recipe["write"][0], bytes.fromhex(recipe["write"][1])
        out[position : position + len(raw)] = raw[: max(0, len(out) - position)]
    elif kind == "truncate":
        del out[recipe["length"] :]
    elif kind == "insert":
        position, raw = recipe["insert"][0], bytes.fromhex(recipe["insert"][1])
        out[position:position] = raw
    elif kind == "delete":
        position, length = recipe["delete"]
        del out[position : position + length]
    else:
        raise ValueError(f"unknown mutation kind {kind!r}")
    return bytes(out)


def describe(recipe: Recipe) -> str:
    """One line for a person: what changed where."""
    where = recipe["area"] + (f" {recipe['region']!r}" if recipe["region"] else "")
    kind = recipe["kind"]
    if kind.startswith("flip"):
        offsets = ", ".join(str(p) for p, _ in recipe["xor"][:4])
        more = ", ..." if len(recipe["xor"]) > 4 else ""
        return f"{kind} in {where} at {offsets}{more}"
    if kind == "int":
        return f"int 0x{recipe['write'][1]} (LE) in {where} at {recipe['write'][0]}"
    if kind == "truncate":
        return f"truncate to {recipe['length']} bytes (in {where})"
    if kind == "insert":
        count = len(recipe["insert"][1]) // 2
        return f"insert {count} bytes in {where} at {recipe['insert'][0]}"
    return f"delete {recipe['delete'][1]} bytes in {where} at {recipe['delete'][0]}"
