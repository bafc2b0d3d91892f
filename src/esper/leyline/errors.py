"""The one error type for bad input: what the user fixes (a flag, a config key, a file), not the code.

The command line turns exactly this type (and the file system's own refusals, `OSError`) into a one-line message
and exit code 2. Every other exception is a fault of esper's: it exits 1 with its traceback saved for a report.
It subclasses `ValueError` so that library callers catching `ValueError` keep working.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserInputError(ValueError):
    """Bad input, with a message that names the problem and how to fix it."""


def did_you_mean(name: str, choices: Iterable[str], *, rest: str = "") -> str:
    """` (did you mean 'X'?)` for the choice `name` most likely misspells (case aside), else "": every message
    refusing an unknown name (blueprint, controller, task, preset) suggests the fix the same way. `rest` follows the
    suggested name, so a misspelt `fixd:norm@mid` is answered with the whole corrected text."""
    by_lower = {choice.lower(): choice for choice in choices}
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return f" (did you mean '{by_lower[match[0]]}{rest}'?)" if match else ""
