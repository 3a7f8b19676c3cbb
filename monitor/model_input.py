"""Reading what a user writes (the config file, chaos scenarios): YAML in, a validated model out,
or an error naming the file, each key and the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from invariants.errors import VigilError

M = TypeVar("M", bound=BaseModel)


def format_errors(exc: ValidationError, heading: str) -> str:
    """One line per problem: the key's dotted path and the reason."""
    lines = [heading]
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        lines.append(f"  {path}: {msg}")
    return "\n".join(lines)


def validated(model: type[M], data: Any, what: str, source: str, error: type[VigilError]) -> M:
    """``data`` as ``model`` (a mapping at the top level), or ``error`` naming each key and why."""
    if not isinstance(data, dict):
        raise error(f"invalid {what} in {source}: the top level must be a mapping")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(format_errors(exc, f"invalid {what} in {source}:")) from None


def read_yaml(path: Path, what: str, error: type[VigilError]) -> Any:
    """The YAML document in ``path`` (``what``: how the errors name it)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{what} {path} is not valid YAML: {exc}") from None
