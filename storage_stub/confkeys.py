"""One definition per conf key, and the conf file written from the definitions.

A config model (``BrokerConfig``, ``StorageConfig``) declares each key once, with
:func:`key`: its name and type (the field), its default, its bounds or choices (which
pydantic validates) and its documentation (:class:`KeyDoc`: the section it belongs to,
what it does, its unit, where it comes from). :func:`render_conf` writes the model's
``.conf`` file from those definitions (every key set to its default, under the comment
that documents it, sections in field order), so the shipped files cannot drift from what
the loader (:mod:`storage_stub.confparse`) accepts.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast, get_args, get_origin

import annotated_types
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

__all__ = ["ConfKey", "KeyDoc", "Section", "conf_keys", "format_value", "key", "render_conf"]

T = TypeVar("T")

#: Width of the comment lines of a generated conf file.
CONF_WIDTH = 88

#: A choice must be a plain word: the pattern built from choices is not escaped, so that
#: its text (shown in validation errors) stays readable.
_CHOICE = re.compile(r"^[A-Za-z0-9_-]+$")
#: A line of a section's example that is a setting (written as ``#key=value``).
_SETTING_LINE = re.compile(r"^\w+=")


@dataclass(frozen=True, eq=False, slots=True)
class Section:
    """A group of keys in a conf file: a title, what the keys have in common, and an
    example of settings to uncomment (after the section's keys). Text is paragraphs
    separated by blank lines; a paragraph whose lines are indented is kept as written
    (a table), others are re-wrapped. Compared by identity."""

    title: str
    intro: str = ""
    #: Commented-out lines after the keys: ``key=value`` lines become ``#key=value``,
    #: others ``# text``; kept as written (not re-wrapped).
    example: str = ""


@dataclass(frozen=True, slots=True)
class KeyDoc:
    """What the conf file says of a key, besides its name, default and bounds."""

    section: Section
    #: What the key does (paragraphs, as Section.intro).
    doc: str
    #: Where the key and its default come from: "Pulsar: same key and default.",
    #: "BookKeeper: ...", "brokerlab only." and so on.
    origin: str
    #: What the value counts or names ("ms", "bytes (5 MiB)"); None for keys whose
    #: values are listed (booleans, choices).
    unit: str | None = None
    #: The accepted values of a string key, when they are a fixed list.
    choices: tuple[str, ...] = ()


def key(
    default: T,
    section: Section,
    doc: str,
    *,
    origin: str,
    unit: str | None = None,
    choices: Sequence[str] = (),
    pattern_from_choices: bool = True,
    **constraints: Any,
) -> T:
    """A conf key's definition, as a model field: ``name: type = key(default, ...)``.

    ``constraints`` are pydantic's (``ge``, ``gt``, ``le``, ``lt``, ``min_length``,
    ``pattern``): they validate values and the conf file states them. ``choices`` of a
    string key are listed in the conf file and become the pattern ``^(a|b)$``, unless
    ``pattern_from_choices`` is false (a validator of the model checks them); a Literal
    type lists its own.
    """
    if choices and pattern_from_choices:
        bad = [choice for choice in choices if not _CHOICE.match(choice)]
        if bad or "pattern" in constraints:
            raise ValueError(f"choices must be plain words, without a pattern: {bad}")
        constraints["pattern"] = f"^({'|'.join(choices)})$"
    info = cast(FieldInfo, Field(default, description=doc, **constraints))
    info.metadata.append(KeyDoc(section, doc, origin, unit, tuple(choices)))
    return cast(T, info)


@dataclass(frozen=True, slots=True)
class ConfKey:
    """A key as the conf file documents it, read back from its model field."""

    name: str
    default: object
    doc: KeyDoc
    #: Accepted values when they are a fixed list (bool, Literal, choices), else ().
    values: tuple[str, ...]
    #: The numeric bounds in words ("0 to 65535", "at least 1"), or "".
    bounds: str

    def facts(self) -> str:
        """The line of the comment after the doc: default, unit, values, bounds."""
        parts = [f"Default: {format_value(self.default)}."]
        if self.doc.unit:
            parts.append(f"Unit: {self.doc.unit}.")
        if self.values:
            parts.append(f"Values: {_either(self.values)}.")
        if self.bounds:
            parts.append(f"Range: {self.bounds}.")
        return " ".join(parts)


def conf_keys(model: type[BaseModel]) -> list[ConfKey]:
    """The model's keys in field order. Raises TypeError for a field not defined with
    :func:`key`, or whose unit and values are both missing (or both given)."""
    keys = []
    for name, field in model.model_fields.items():
        docs = [item for item in field.metadata if isinstance(item, KeyDoc)]
        if len(docs) != 1:
            raise TypeError(f"{model.__name__}.{name} is not defined with key()")
        values = _values(field, docs[0])
        if (docs[0].unit is None) == (not values):
            raise TypeError(f"{model.__name__}.{name}: give a unit, or values to list")
        keys.append(ConfKey(name, field.default, docs[0], values, _bounds(field)))
    return keys


def render_conf(model: type[BaseModel], header: str) -> str:
    """The conf file of ``model``: ``header`` (a title line, then paragraphs), then each
    section's title, intro, keys (comment, then ``key=default``) and example.

    Raises TypeError when a section's keys are not together in field order.
    """
    lines = _comment(header)
    done: set[int] = set()
    current: Section | None = None
    for conf_key in conf_keys(model):
        section = conf_key.doc.section
        if section is not current:
            if id(section) in done:
                raise TypeError(f"{model.__name__}: keys of {section.title!r} are not together")
            if current is not None:
                lines += _example(current)
            done.add(id(section))
            current = section
            lines += ["", f"### --- {section.title} --- ###"]
            lines += _comment(section.intro)
        lines += ["", *_comment(conf_key.doc.doc)]
        lines += [*_comment(conf_key.facts()), *_comment(conf_key.doc.origin)]
        lines.append(f"{conf_key.name}={format_value(conf_key.default)}")
    if current is not None:
        lines += _example(current)
    return "\n".join(lines) + "\n"


def format_value(value: object) -> str:
    """A value as a conf file spells it: true/false, 2 rather than 2.0."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _values(field: FieldInfo, doc: KeyDoc) -> tuple[str, ...]:
    if field.annotation is bool:
        return ("true", "false")
    if get_origin(field.annotation) is Literal:
        return tuple(str(arg) for arg in get_args(field.annotation))
    return doc.choices


def _bounds(field: FieldInfo) -> str:
    """The field's numeric constraints in words; an int's exclusive bound as inclusive."""
    low: tuple[Any, bool] | None = None  # (bound, inclusive)
    high: tuple[Any, bool] | None = None
    for item in field.metadata:
        if isinstance(item, annotated_types.Ge):
            low = (item.ge, True)
        elif isinstance(item, annotated_types.Gt):
            low = (item.gt, False)
        elif isinstance(item, annotated_types.Le):
            high = (item.le, True)
        elif isinstance(item, annotated_types.Lt):
            high = (item.lt, False)
    if field.annotation is int:
        low = low if low is None or low[1] else (low[0] + 1, True)
        high = high if high is None or high[1] else (high[0] - 1, True)
    if low and high and low[1] and high[1]:
        return f"{low[0]} to {high[0]}"
    words = []
    if low:
        words.append(f"{'at least' if low[1] else 'more than'} {low[0]}")
    if high:
        words.append(f"{'at most' if high[1] else 'less than'} {high[0]}")
    return " and ".join(words)


def _either(values: Sequence[str]) -> str:
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def _comment(text: str) -> list[str]:
    """Text as comment lines: paragraphs re-wrapped, indented ones kept, ``#`` between."""
    lines: list[str] = []
    for paragraph in textwrap.dedent(text).strip("\n").split("\n\n"):
        if not paragraph.strip():
            continue
        if lines:
            lines.append("#")
        if paragraph.startswith(" "):
            lines += [f"# {line}".rstrip() for line in paragraph.split("\n")]
            continue
        wrapped = textwrap.wrap(
            " ".join(paragraph.split()),
            width=CONF_WIDTH - 2,
            break_long_words=False,
            break_on_hyphens=False,
        )
        lines += [f"# {line}" for line in wrapped]
    return lines


def _example(section: Section) -> list[str]:
    if not section.example.strip():
        return []
    lines = [""]
    for line in textwrap.dedent(section.example).strip("\n").split("\n"):
        if _SETTING_LINE.match(line):
            lines.append(f"#{line}")
        else:
            lines.append(f"# {line}".rstrip())
    return lines
