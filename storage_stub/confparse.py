"""Load Pulsar-format ``.conf`` files into typed, validated pydantic models.

File format (the subset of Java properties that Pulsar's and BookKeeper's conf files use):

- one ``key=value`` per line, split at the first ``=`` (a value may contain ``=``);
  whitespace around the key and around the value is stripped;
- blank lines and lines whose first non-blank character is ``#`` are ignored; there are
  no trailing comments (as in Java properties, ``a=1 # x`` sets ``a`` to ``"1 # x"``);
- no ``key value`` or ``key:value`` forms and no ``\\`` line continuations: a non-blank,
  non-comment line without ``=`` is an error;
- UTF-8 (a leading byte-order mark is tolerated).

Semantics:

- The model's field names ARE the keys. An unknown key, a key given twice, a line
  without ``=`` and an empty key are errors.
- **An empty value means "use the default".** ``advertisedAddress=`` style lines are
  common in Pulsar conf files, and Pulsar's ``FieldParser`` keeps the default for blank
  values of primitive and String fields; we do the same for every field. The same goes
  for a blank string given as an override, so ``--set key=`` resets a key to its default.
- Values are handed to pydantic as strings and coerced in lax mode: ``true``/``false``
  (pydantic also accepts ``1``/``0``, ``yes``/``no``, ``on``/``off``; anything else is an
  error, where Pulsar would silently read ``false``), integers, floats, literals.
- Overrides (e.g. from the command line) replace the file's value for their key before
  validation, so a file value that is overridden is not validated.
- Every problem found is reported at once: :class:`ConfigError` carries one
  :class:`ConfigIssue` per problem and its message has one line per issue, each naming
  the file and line (or ``override``), e.g.
  ``conf/broker.conf:7: bad value for webServicePort: 'abc' (Input should be ...)``.
"""

from __future__ import annotations

import difflib
import pathlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["ConfigError", "ConfigIssue", "Setting", "load_config", "read_conf"]

M = TypeVar("M", bound=BaseModel)

#: ``Setting.source`` of a value that came from ``overrides`` rather than a file.
OVERRIDE = "override"


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem in a configuration: where it is and what is wrong."""

    #: The file as given to the loader (``conf/broker.conf``) or ``"override"``.
    source: str
    #: 1-based line number, or None for overrides and for problems of the whole file.
    line: int | None
    #: The key concerned, when there is one.
    key: str | None
    message: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.message}"


class ConfigError(Exception):
    """A configuration that must stop start-up. ``str(e)`` has one line per issue.

    Built from the issues found, or from a plain message (then ``issues`` is empty).
    """

    def __init__(self, issues: str | Iterable[ConfigIssue]) -> None:
        if isinstance(issues, str):
            self.issues: tuple[ConfigIssue, ...] = ()
            super().__init__(issues)
        else:
            self.issues = tuple(issues)
            super().__init__("\n".join(str(issue) for issue in self.issues))


@dataclass(frozen=True, slots=True)
class Setting:
    """One ``key=value`` as read, with where it came from."""

    key: str
    #: From a file: the stripped text, "" meaning "use the default". From an override:
    #: the object given (a string is stripped, and "" also means the default).
    value: object
    source: str
    line: int | None = None

    def issue(self, message: str) -> ConfigIssue:
        return ConfigIssue(self.source, self.line, self.key, message)


def read_conf(path: pathlib.Path) -> dict[str, Setting]:
    """Parse a conf file into its settings by key, without checking keys or values.

    Raises :class:`ConfigError` if the file cannot be read, a line has no ``=`` or an
    empty key, or a key is given twice. Runtime complexity: O(size of the file).
    """
    settings, issues = _parse_file(path)
    if issues:
        raise ConfigError(issues)
    return settings


def load_config(
    model: type[M],
    path: pathlib.Path | None,
    overrides: Mapping[str, object] | None = None,
) -> M:
    """Build ``model`` from the conf file at ``path`` (None: defaults only) and
    ``overrides`` (which win over the file).

    Raises :class:`ConfigError` listing every unreadable line, unknown or repeated key
    and bad value, each with its file and line (``override`` for an override).
    """
    settings: dict[str, Setting] = {}
    issues: list[ConfigIssue] = []
    if path is not None:
        settings, issues = _parse_file(path)
    fields = set(model.model_fields)

    for setting in list(settings.values()):
        if setting.key not in fields:
            issues.append(setting.issue(_unknown_key_message(setting.key, fields)))
            del settings[setting.key]

    for key, value in (overrides or {}).items():
        override = Setting(key, value.strip() if isinstance(value, str) else value, OVERRIDE)
        if key in fields:
            settings[key] = override
        else:
            issues.append(override.issue(_unknown_key_message(key, fields)))

    data = {key: s.value for key, s in settings.items() if s.value != ""}
    config: M | None = None
    try:
        config = model.model_validate(data, strict=False)
    except ValidationError as error:
        whole = str(path) if path is not None else "defaults"
        if overrides:
            whole += " with overrides"
        issues.extend(_issues_from_validation(error, settings, whole))
    if issues or config is None:
        raise ConfigError(sorted(issues, key=_issue_order))
    return config


def _parse_file(path: pathlib.Path) -> tuple[dict[str, Setting], list[ConfigIssue]]:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        return {}, [ConfigIssue(source, None, None, f"cannot read: {error}")]

    settings: dict[str, Setting] = {}
    issues: list[ConfigIssue] = []
    # split("\n") rather than splitlines(): line numbers must match what editors show.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep:
            issues.append(ConfigIssue(source, number, None, f"expected key=value, got {line!r}"))
        elif not key:
            issues.append(ConfigIssue(source, number, None, f"empty key in {line!r}"))
        elif key in settings:
            first = settings[key].line
            message = f"duplicate key {key!r} (first set on line {first})"
            issues.append(ConfigIssue(source, number, key, message))
        else:
            settings[key] = Setting(key, value.strip(), source, number)
    return settings, issues


def _unknown_key_message(key: str, fields: set[str]) -> str:
    message = f"unknown key {key!r}"
    by_case = [field for field in fields if field.lower() == key.lower()]
    close = by_case or difflib.get_close_matches(key, sorted(fields), n=1, cutoff=0.8)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message


def _issues_from_validation(
    error: ValidationError, settings: Mapping[str, Setting], whole: str
) -> list[ConfigIssue]:
    issues = []
    for detail in error.errors(include_url=False):
        loc = detail["loc"]
        key = str(loc[0]) if loc else None
        setting = settings.get(key) if key is not None else None
        if setting is not None:
            message = f"bad value for {key}: {setting.value!r} ({detail['msg']})"
            issues.append(setting.issue(message))
        elif key is not None and detail["type"] == "missing":
            issues.append(ConfigIssue(whole, None, key, f"missing required key {key!r}"))
        elif key is not None:
            # The model rejected its own default (or a value a validator derived).
            issues.append(ConfigIssue(whole, None, key, f"bad value for {key}: {detail['msg']}"))
        else:
            # A model-level validator: no single key to blame.
            issues.append(ConfigIssue(whole, None, None, detail["msg"]))
    return issues


def _issue_order(issue: ConfigIssue) -> tuple[bool, str, int]:
    # File lines first in line order, then overrides and whole-file issues.
    return (issue.line is None, issue.source, issue.line or 0)
