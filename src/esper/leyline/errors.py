"""The one error type for bad input: what the user fixes (a flag, a config key, a file), not the code.

The command line turns exactly this type (and the file system's own refusals, `OSError`) into a one-line message
and exit code 2. Every other exception is a fault of esper's: it exits 1 with its traceback saved for a report.
It subclasses `ValueError` so that library callers catching `ValueError` keep working.
"""


class UserInputError(ValueError):
    """Bad input, with a message that names the problem and how to fix it."""
