"""The shadow error bound a user reads beside shadow numbers (the demo's table, the
dashboard's hit-ratio panel) is the one measured and stated in the README's "Shadows"."""

from __future__ import annotations

import pathlib
import re

from loadgen.cli import SHADOW_ERROR_NOTE

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _bound(text: str) -> tuple[str, str]:
    found = re.search(r"ranged\s+from\s+(\d+)%\s+fewer.*?to\s+(\d+)%\s+more", text, re.S)
    assert found, text[:300]
    return found.group(1), found.group(2)


def test_the_demo_and_the_dashboard_state_the_readme_s_measured_bound() -> None:
    readme = (ROOT / "README.md").read_text()
    shadows = readme[readme.index("### Shadows") :]
    stated = _bound(shadows)
    assert _bound(SHADOW_ERROR_NOTE) == stated
    dashboard = (ROOT / "broker/http/static/dashboard.html").read_text()
    assert _bound(dashboard) == stated
