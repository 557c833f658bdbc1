"""The route reference of docs/api.md, rendered from the operations the handlers declare
(:class:`broker.http.contract.Operation`), the same declarations ``/openapi.json`` is
generated from.

docs/api.md is written by hand except between marker comments, which this module fills:

- ``<!-- generated:routes ID ID ... -->`` ... ``<!-- /generated -->``: the sections of
  the operations named by id, in that order: heading (method, path, summary), the
  description, and the list of statuses with when each happens. Every operation of the
  contract is named by exactly one such region; where a new one goes is the writer's
  choice (its region, its place in it).
- ``<!-- generated:errors any -->`` and ``<!-- generated:errors changing -->``: the
  statuses every route, and every route that changes state, can return.

``python -m broker.http.apidoc --write`` rewrites docs/api.md; ``--check`` (the
default) exits 1 when it is stale, which ``tests/http/test_apidoc.py`` also checks.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from collections.abc import Mapping, Sequence

from broker.http.contract import CHANGING_ERRORS, COMMON_ERRORS, Operation
from broker.http.errors import ERRORS

API_MD = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"

REGION = re.compile(
    r"<!-- generated:(?P<kind>routes|errors)(?P<names>[^>]*?)-->\n.*?<!-- /generated -->",
    re.DOTALL,
)
#: What a 503 adds: every 503 answer carries Retry-After.
RETRY_AFTER = " `Retry-After` set."


class DocError(ValueError):
    """docs/api.md's markers do not fit the operations."""


def heading(op: Operation) -> str:
    return f"### `{op.method} {op.path}` — {op.summary}"


def status_line(status: int, when: str) -> str:
    """One line of a Responses list: a success or a redirect without a code, an error
    with its one code."""
    if status < 400:
        return f"- {status} — {when}"
    tail = RETRY_AFTER if status == 503 else ""
    return f"- {status} `{ERRORS[status][0]}` — {when}{tail}"


def route_section(op: Operation) -> str:
    """The section of one operation. Its Responses list leaves out the statuses listed
    once for every route (see :func:`shared_errors`)."""
    lines = [heading(op), ""]
    if op.description:
        lines += [op.description, ""]
    lines += ["Responses:", "", status_line(op.success.status, op.success.when)]
    if op.success.unset is not None:
        lines.append(status_line(204, op.success.unset))
    if op.redirect is not None:
        lines.append(status_line(307, op.redirect))
    shared = set(COMMON_ERRORS) | set(CHANGING_ERRORS)
    for status, when in op.error_statuses().items():
        if status not in shared:
            lines.append(status_line(status, when))
    return "\n".join(lines)


def shared_errors(kind: str) -> str:
    """The statuses every route (``any``), or every route that changes state
    (``changing``), can return."""
    errors: Mapping[int, str] = {"any": COMMON_ERRORS, "changing": CHANGING_ERRORS}[kind]
    return "\n".join(status_line(status, when) for status, when in errors.items())


def render(text: str, operations: Sequence[Operation]) -> str:
    """``text`` (docs/api.md) with every generated region filled from ``operations``.
    DocError when a region names an unknown operation or has no content kind, or when
    an operation is in no region or in several."""
    by_id = {op.operation_id: op for op in operations}
    placed: list[str] = []

    def fill(match: re.Match[str]) -> str:
        kind, names = match["kind"], match["names"].split()
        if kind == "errors":
            if names not in (["any"], ["changing"]):
                raise DocError(f"generated:errors takes 'any' or 'changing', not {names}")
            content = shared_errors(names[0])
        else:
            unknown = [name for name in names if name not in by_id]
            if unknown or not names:
                raise DocError(f"generated:routes names no operation or unknown ones: {unknown}")
            placed.extend(names)
            content = "\n\n".join(route_section(by_id[name]) for name in names)
        opening = match[0][: match[0].index("-->") + 3]
        return f"{opening}\n\n{content}\n\n<!-- /generated -->"

    rendered = REGION.sub(fill, text)
    twice = sorted({name for name in placed if placed.count(name) > 1})
    missing = sorted(set(by_id) - set(placed))
    if twice or missing:
        raise DocError(
            f"every operation goes in exactly one generated:routes region of docs/api.md; "
            f"in none: {missing}; in several: {twice}"
        )
    return rendered


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.http.apidoc",
        description="Render the route reference of docs/api.md from the declared operations.",
    )
    parser.add_argument("--write", action="store_true", help="rewrite the file")
    parser.add_argument("--path", type=pathlib.Path, default=API_MD, help="default: docs/api.md")
    args = parser.parse_args(argv)
    from broker.http.app import contract

    text = args.path.read_text(encoding="utf-8")
    rendered = render(text, contract())
    if rendered == text:
        print(f"{args.path}: up to date")
        return 0
    if args.write:
        args.path.write_text(rendered, encoding="utf-8")
        print(f"{args.path}: rewritten")
        return 0
    print(f"{args.path}: stale; run python -m broker.http.apidoc --write", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
