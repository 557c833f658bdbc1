"""The preset scenarios shipped in ``conf/scenarios``: their names, without loading the
scenario models (the CLI lists them in its help)."""

from __future__ import annotations

import pathlib

PRESETS = pathlib.Path(__file__).resolve().parent.parent / "conf" / "scenarios"


def preset_names() -> list[str]:
    """The presets' names, sorted. O(n) in the files of ``PRESETS``."""
    return sorted(path.stem for path in PRESETS.glob("*.toml"))
