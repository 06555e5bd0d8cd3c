"""What a transform pass did to a program, in a form a lowering tool can print or dump as JSON."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class SkippedNode:
    """A node the pass looked at and left alone, with the reason a person can act on."""

    node: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"node": self.node, "reason": self.reason}


@dataclasses.dataclass
class PassReport:
    """The outcome of one pass on one program.

    `folded` counts the patterns the pass rewrote (batch norms folded, constants lifted or pruned,
    depending on the pass). `added_constants` / `removed_constants` name the state-dict or constants
    entries the pass created or dropped, so a tool can account for constant bytes.
    """

    pass_name: str
    changed: bool = False
    folded: int = 0
    skipped: list[SkippedNode] = dataclasses.field(default_factory=list)
    added_constants: list[str] = dataclasses.field(default_factory=list)
    removed_constants: list[str] = dataclasses.field(default_factory=list)

    def skip(self, node: str, reason: str) -> None:
        """Records that `node` was left untouched because of `reason`."""
        self.skipped.append(SkippedNode(node=node, reason=reason))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (only str, int, bool and lists of them)."""
        return {
            "pass_name": self.pass_name,
            "changed": self.changed,
            "folded": self.folded,
            "skipped": [s.to_dict() for s in self.skipped],
            "added_constants": list(self.added_constants),
            "removed_constants": list(self.removed_constants),
        }

    def summary(self) -> str:
        """One line for a console report, e.g. `FuseBatchNormWithConvPass: folded 3, skipped 1`."""
        line = f"{self.pass_name}: folded {self.folded}, skipped {len(self.skipped)}"
        if self.added_constants or self.removed_constants:
            line += f", constants +{len(self.added_constants)} -{len(self.removed_constants)}"
        return line
