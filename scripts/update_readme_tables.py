"""Regenerate the generated docs in place: README's config table, docs/invariants.md."""

import importlib
from pathlib import Path

from invariants.catalog import CATALOG
from monitor.config_reference import reference_markdown

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INVARIANTS_DOC = ROOT / "docs" / "invariants.md"
FAMILIES = ("acked_writes", "sequence", "offsets", "transactions", "write_cycles", "liveness", "accounting", "unconfirmed", "promises",
            "confirm", "eos", "groups", "reference_confirm")


def invariants_markdown() -> str:
    """The invariant catalog and each family module's docstring (its spec), as one page."""
    out = ["# Invariants", "", "Generated from `invariants/` by `python scripts/update_readme_tables.py`; the "
           "module docstrings are the specification.", "",
           "| invariant | severity | judged for | summary |", "|---|---|---|---|"]
    for info in CATALOG.values():
        isos = ", ".join(i.value for i in info.scope.isolations)
        out.append(f"| `{info.invariant.value}` | {info.severity.value} | {isos} | {info.summary} |")
    for family in FAMILIES:
        doc = importlib.import_module(f"invariants.{family}").__doc__ or ""
        out += ["", f"## {family} (`invariants/{family}.py`)", "", doc.strip()]
    return "\n".join(out) + "\n"


def replace_table(text: str, header: str, table: str) -> str:
    lines = text.splitlines()
    start = lines.index(header)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[:start] + table.rstrip("\n").splitlines() + lines[end:]) + "\n"


if __name__ == "__main__":
    text = README.read_text()
    README.write_text(replace_table(text, "| key | type | default | meaning |", reference_markdown()))
    INVARIANTS_DOC.parent.mkdir(exist_ok=True)
    INVARIANTS_DOC.write_text(invariants_markdown())
