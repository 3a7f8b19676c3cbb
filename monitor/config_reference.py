"""The configuration reference: every key with its type, default and meaning, from the models.

``vigil config reference`` prints it; the README's configuration table is its output (a test
keeps the two equal).
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, SecretStr

from monitor.config import Config, WriterConfig


def reference_rows(model: type[BaseModel] = Config, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) for every leaf key, for the docs table."""
    rows: list[tuple[str, str, str, str]] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        nested = _nested_model(ann)
        if nested is not None and name != "writers":
            rows.extend(reference_rows(nested, key + "."))
            continue
        if name == "writers":
            rows.append((key, "list of writers", "idempotent (200/s) and txn (40/s)", field.description or ""))
            rows.extend(reference_rows(WriterConfig, key + "[]."))
            continue
        default = field.get_default(call_default_factory=True)
        if isinstance(default, SecretStr):
            default = "***"
        rows.append((key, _type_name(ann), "" if default is None else repr(default), field.description or ""))
    return rows


def _nested_model(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in get_args(ann):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _type_name(ann: Any) -> str:
    origin = get_origin(ann)
    if origin is Literal:
        return " \\| ".join(str(a) for a in get_args(ann))
    if origin is dict:
        return "mapping"
    args = [a for a in get_args(ann) if a is not type(None)]
    if args and origin is not None:
        return _type_name(args[0])
    return getattr(ann, "__name__", str(ann))


def reference_markdown() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, typ, default, desc in reference_rows():
        lines.append(f"| `{key}` | {typ} | `{default}` | {desc} |" if default else f"| `{key}` | {typ} | | {desc} |")
    return "\n".join(lines)
