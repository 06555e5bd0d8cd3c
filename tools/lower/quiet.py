"""The known noise of our dependencies, silenced at the lowering tool's entry point.

Each entry names where the message comes from and what it says, so that nothing else is hidden:
not our own warnings, not a dependency's other messages. `lower -v` installs none of these.
Imports neither torch nor executorch: it must run before they are imported.
"""

from __future__ import annotations

import logging
import warnings

# (logger, text in the message): log records of dependencies, printed to stderr on import.
NOISY_LOG_RECORDS: tuple[tuple[str, str], ...] = (
    # torchao's wheel carries CUDA kernels (_C_mxfp8, _C_cutlass_90a) that cannot load on a
    # CPU-only machine; torchao works without them.
    ("torchao", "Failed to load "),
    # torchao registers an Enum as a pytree constant, which this torch deprecates.
    ("torch.utils._pytree", "is an Enum subclass and is now natively supported"),
)

# (category, message regex, module regex): Python warnings of dependencies.
NOISY_WARNINGS: tuple[tuple[type[Warning], str, str], ...] = (
    # torch deprecates LeafSpec; executorch still builds them (raised from copyreg on deepcopy).
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated", ""),
    # Inspector, reading a profile-only ETDump and the ETRecord's graph: no tensor data was asked
    # for, and kwargs it does not render.
    (UserWarning, r"Output Buffer not found", r"executorch\.devtools\."),
    (UserWarning, r"Unsupported kwarg encountered", r"executorch\.devtools\."),
)


class _DropMatching(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def silence_dependency_noise() -> None:
    """Installs the filters (idempotent)."""
    for logger_name, text in NOISY_LOG_RECORDS:
        logger = logging.getLogger(logger_name)
        if not any(isinstance(f, _DropMatching) and f.text == text for f in logger.filters):
            logger.addFilter(_DropMatching(text))
    for category, message, module in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
