"""The local cluster's error."""

from __future__ import annotations

from invariants.errors import VigilError


class ClusterError(VigilError):
    pass
