"""The one base of every error Vigil expects and explains to its user.

A :class:`VigilError` carries a message written for the person running Vigil: what went wrong,
which setting or file is involved, and what to do. The CLI prints it as one line and exits
with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class VigilError(Exception):
    """An expected failure with a message meant for the user."""
