"""One exception type for every problem the user can fix.

The CLI turns an `AttncliError` into a one-line message and exit code 2; anything
else is a bug and exits 1. Raising this instead of printing keeps library code
usable from Python and keeps the "no traceback for bad input" rule in one place.
"""


class AttncliError(Exception):
    """A problem with the user's input (config, data, run folder, text): exit code 2."""
