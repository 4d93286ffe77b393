"""The one error type users see: a one-line message that says what is wrong and how to fix it."""

from __future__ import annotations


class BertscopeError(ValueError):
    """Bad input (config, preset name, file, CLI value). The CLI prints it as one line, exit 2."""
