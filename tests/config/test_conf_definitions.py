"""Each conf key is defined once; conf/broker.conf and conf/storage.conf are written from
the definitions, and what they say of a key is what the loader does with it."""

from __future__ import annotations

import pathlib
import re
from decimal import Decimal
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from broker.cli import _parser, load_settings
from broker.config import BrokerConfig, load_broker_config
from broker.config_doc import CONF_FILES, conf_text, main, stale_files
from storage_stub.config import StorageConfig
from storage_stub.confkeys import Section, conf_keys, key, render_conf
from storage_stub.confparse import ConfigError, load_config, read_conf

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONF_DIR = ROOT / "conf"
MODELS = [
    pytest.param("broker.conf", BrokerConfig, id="broker.conf"),
    pytest.param("storage.conf", StorageConfig, id="storage.conf"),
]
ORIGINS = ("Pulsar", "BookKeeper", "AutoMQ", "brokerlab only")


def comments_by_key(path: pathlib.Path) -> dict[str, str]:
    """Each key's comment block in the file, its lines joined by spaces."""
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks = {}
    for name, setting in read_conf(path).items():
        assert setting.line is not None
        index, comment = setting.line - 2, []
        while index >= 0 and lines[index].startswith("#"):
            comment.insert(0, lines[index].removeprefix("#").strip())
            index -= 1
        blocks[name] = " ".join(comment)
    return blocks


def refusal(model: type[BaseModel], name: str, value: str) -> str | None:
    """Why ``name=value`` is refused on its own account, or None if it is accepted (a
    model-level check, such as two thresholds out of order, does not count)."""
    try:
        load_config(model, None, {name: value})
    except ConfigError as error:
        keyed = [issue.message for issue in error.issues if issue.key == name]
        return keyed[0] if keyed else None
    return None


# --- the shipped files are the definitions' ----------------------------------------


def test_shipped_conf_files_are_up_to_date() -> None:
    stale = [path.name for path in stale_files(CONF_DIR)]

    assert not stale, f"{stale} out of date: run python -m broker.config_doc --write"


@pytest.mark.parametrize(("name", "model"), MODELS)
def test_every_defined_key_is_in_the_file_once_and_nothing_else(
    name: str, model: type[BaseModel]
) -> None:
    defined = [conf_key.name for conf_key in conf_keys(model)]
    in_file = list(read_conf(CONF_DIR / name))

    assert defined == list(model.model_fields)
    assert sorted(in_file) == sorted(defined)


@pytest.mark.parametrize(("name", "model"), MODELS)
def test_generated_file_loads_to_the_defaults_through_the_loader(
    name: str, model: type[BaseModel], tmp_path: pathlib.Path
) -> None:
    path = tmp_path / name
    path.write_text(conf_text(name), encoding="utf-8")

    assert load_config(model, path) == model()


def test_serve_reads_the_shipped_files_to_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    # brokerlab serve, started in the repository without --config, reads conf/*.conf.
    monkeypatch.chdir(ROOT)

    settings = load_settings(_parser().parse_args(["serve"]))

    assert settings.broker == BrokerConfig()
    assert settings.storage == StorageConfig()


@pytest.mark.parametrize(("name", "model"), MODELS)
def test_each_key_says_where_it_comes_from(name: str, model: type[BaseModel]) -> None:
    blocks = comments_by_key(CONF_DIR / name)
    for conf_key in conf_keys(model):
        assert conf_key.doc.origin.startswith(ORIGINS), conf_key.name
        assert conf_key.doc.origin in blocks[conf_key.name], conf_key.name


def range_probes(stated: str, step: Decimal) -> tuple[list[Decimal], list[Decimal]]:
    """Values a stated range ("0 to 65535", "more than 0 and at most 1") must accept, and
    values just beyond it that it must refuse."""
    inside: list[Decimal] = []
    outside: list[Decimal] = []
    for part in stated.split(" and "):
        if match := re.fullmatch(r"(-?[\d.]+) to (-?[\d.]+)", part):
            low, high = Decimal(match[1]), Decimal(match[2])
            inside += [low, high]
            outside += [low - step, high + step]
            continue
        match = re.fullmatch(r"(at least|at most|more than|less than) (-?[\d.]+)", part)
        assert match, f"cannot read the range {part!r}"
        bound = Decimal(match[2])
        below, above = bound - step, bound + step
        inclusive = match[1].startswith("at")
        upper = match[1] in ("at most", "less than")
        beyond = above if upper else below
        within = below if upper else above
        inside.append(bound if inclusive else within)
        outside.append(beyond if inclusive else bound)
    return inside, outside


@pytest.mark.parametrize(("name", "model"), MODELS)
def test_stated_ranges_are_what_the_loader_accepts(name: str, model: type[BaseModel]) -> None:
    checked = 0
    for key_name, block in comments_by_key(CONF_DIR / name).items():
        found = re.search(r"Range: (.*?)\.(?:\s|$)", block)
        if not found:
            continue
        integer = model.model_fields[key_name].annotation is int
        inside, outside = range_probes(found[1], Decimal(1) if integer else Decimal("1e-9"))
        for value in inside:
            assert refusal(model, key_name, str(value)) is None, f"{key_name}={value} refused"
        for value in outside:
            assert refusal(model, key_name, str(value)), f"{key_name}={value} accepted"
        checked += 1
    assert checked > 10


@pytest.mark.parametrize(("name", "model"), MODELS)
def test_listed_values_are_what_the_loader_accepts(name: str, model: type[BaseModel]) -> None:
    checked = 0
    for key_name, block in comments_by_key(CONF_DIR / name).items():
        found = re.search(r"Values: (.*?)\.(?:\s|$)", block)
        if not found:
            continue
        for value in re.split(r", | or ", found[1]):
            assert refusal(model, key_name, value) is None, f"{key_name}={value} refused"
        assert refusal(model, key_name, "not-one-of-them"), key_name
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize(("name", "model"), MODELS)
def test_commented_out_examples_are_settings_the_loader_accepts(
    name: str, model: type[BaseModel]
) -> None:
    text = (CONF_DIR / name).read_text(encoding="utf-8")
    examples = re.findall(r"^#(\w+)=(.*)$", text, flags=re.MULTILINE)
    for key_name, value in examples:
        assert key_name in model.model_fields, key_name
        assert refusal(model, key_name, value) is None, f"{key_name}={value}"
    if name == "storage.conf":
        assert len(examples) == 6


def test_choices_give_the_same_error_message_as_a_pattern() -> None:
    with pytest.raises(ConfigError) as caught:
        load_broker_config(None, {"tokenPublicAlg": "HS256"})

    assert str(caught.value) == (
        "override: bad value for tokenPublicAlg: 'HS256' (String should match pattern "
        "'^(RS256|RS384|RS512|PS256|PS384|PS512|ES256|ES384|ES512)$')"
    )


def test_a_registry_checked_key_keeps_its_validator_message() -> None:
    with pytest.raises(ConfigError) as caught:
        load_broker_config(None, {"managedLedgerCacheImplementation": "lru"})

    assert str(caught.value) == (
        "override: bad value for managedLedgerCacheImplementation: 'lru' "
        "(Value error, one of pip430, legacy, segmented)"
    )


# --- the command ---------------------------------------------------------------------


def test_command_reports_stale_files_and_write_makes_them_current(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broker.conf").write_text(conf_text("broker.conf") + "# edited by hand\n")

    assert main(["--conf-dir", str(tmp_path)]) == 1
    assert "broker.conf is out of date" in capsys.readouterr().err
    assert main(["--conf-dir", str(tmp_path), "--write"]) == 0
    assert main(["--conf-dir", str(tmp_path)]) == 0
    for name in CONF_FILES:
        assert (tmp_path / name).read_text(encoding="utf-8") == conf_text(name)


# --- rendering -----------------------------------------------------------------------

FIRST = Section("First", intro="What the first keys share.\n\n  kept   as\n  written")
SECOND = Section("Second", example="A faster profile:\nlevel=3")


class Sample(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = key("x", FIRST, "A name.", unit="word", origin="brokerlab only.")
    mode: Literal["fast", "safe"] = key(
        "safe", FIRST, "How to go.", origin="Pulsar: same key and default."
    )
    level: int = key(
        1,
        SECOND,
        "A long description that goes on " * 4 + "until it is wrapped.",
        unit="levels",
        origin="brokerlab only.",
        gt=0,
        le=9,
    )
    ratio: float = key(0.5, SECOND, "A share.", unit="fraction", origin="AutoMQ.", gt=0, lt=1)
    speed: str = key("low", SECOND, "Speed.", choices=("low", "high"), origin="brokerlab only.")
    enabled: bool = key(True, SECOND, "On or off.", origin="brokerlab only.")


def test_render_writes_sections_keys_facts_and_examples() -> None:
    assert render_conf(Sample, "Sample configuration.\n\nA paragraph.") == (
        "# Sample configuration.\n"
        "#\n"
        "# A paragraph.\n"
        "\n"
        "### --- First --- ###\n"
        "# What the first keys share.\n"
        "#\n"
        "#   kept   as\n"
        "#   written\n"
        "\n"
        "# A name.\n"
        "# Default: x. Unit: word.\n"
        "# brokerlab only.\n"
        "name=x\n"
        "\n"
        "# How to go.\n"
        "# Default: safe. Values: fast or safe.\n"
        "# Pulsar: same key and default.\n"
        "mode=safe\n"
        "\n"
        "### --- Second --- ###\n"
        "\n"
        "# A long description that goes on A long description that goes on A long description\n"
        "# that goes on A long description that goes on until it is wrapped.\n"
        "# Default: 1. Unit: levels. Range: 1 to 9.\n"
        "# brokerlab only.\n"
        "level=1\n"
        "\n"
        "# A share.\n"
        "# Default: 0.5. Unit: fraction. Range: more than 0 and less than 1.\n"
        "# AutoMQ.\n"
        "ratio=0.5\n"
        "\n"
        "# Speed.\n"
        "# Default: low. Values: low or high.\n"
        "# brokerlab only.\n"
        "speed=low\n"
        "\n"
        "# On or off.\n"
        "# Default: true. Values: true or false.\n"
        "# brokerlab only.\n"
        "enabled=true\n"
        "\n"
        "# A faster profile:\n"
        "#level=3\n"
    )


def test_render_refuses_a_section_split_by_another() -> None:
    class Split(BaseModel):
        a: int = key(1, FIRST, "A.", unit="u", origin="brokerlab only.")
        b: int = key(1, SECOND, "B.", unit="u", origin="brokerlab only.")
        c: int = key(1, FIRST, "C.", unit="u", origin="brokerlab only.")

    with pytest.raises(TypeError, match="not together"):
        render_conf(Split, "Split.")


def test_a_key_not_defined_with_key_is_refused() -> None:
    class Bare(BaseModel):
        a: int = Field(default=1, ge=0)

    with pytest.raises(TypeError, match=r"Bare\.a is not defined with key\(\)"):
        conf_keys(Bare)


def test_a_key_needs_a_unit_or_listed_values() -> None:
    class Unitless(BaseModel):
        a: int = key(1, FIRST, "A.", origin="brokerlab only.")

    with pytest.raises(TypeError, match="give a unit"):
        conf_keys(Unitless)


@pytest.mark.parametrize("name", list(CONF_FILES))
def test_generated_comment_lines_fit_the_width(name: str) -> None:
    too_long = [line for line in conf_text(name).split("\n") if len(line) > 88]
    # a line may only overflow when one word (a URL, a class name) is longer than the rest
    assert all(len(line.split()) <= 2 for line in too_long), too_long
