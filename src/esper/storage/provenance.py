"""Which esper made a result: its version and, in a git checkout, its commit (records name both, so a number can
be traced to the code that produced it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import esper

__all__ = ["UNKNOWN_COMMIT", "esper_commit"]

UNKNOWN_COMMIT = "unknown"


def esper_commit() -> str:
    """`git rev-parse HEAD` of the checkout esper is imported from; "unknown" for an installed package (or no git)."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(esper.__file__).resolve().parent,
                              capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN_COMMIT
    return done.stdout.strip() or UNKNOWN_COMMIT
