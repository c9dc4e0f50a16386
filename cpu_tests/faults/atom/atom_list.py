"""What ``kvfault list --tier atom`` says of each row, read back from its lines."""

from __future__ import annotations


def listed(lines: list[str], below: int, field: str) -> dict[str, str]:
    """Each row's ``field`` line (stripped), by row name: the line ``below`` lines under
    the row's name line (indented two spaces), where it starts ``      {field}: ``."""
    return {
        line.split()[0]: lines[i + below].strip()
        for i, line in enumerate(lines[:-below])
        if line.startswith("  ") and lines[i + below].startswith(f"      {field}: ")
    }
