"""Regenerate the generated tables of README.md (config reference) in place."""

from pathlib import Path

from monitor.config import reference_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


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
