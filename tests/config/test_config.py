"""Configuration: the shipped conf files, the Pulsar-format loader and its error messages."""

from __future__ import annotations

import pathlib
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from broker.config import BrokerConfig, load_broker_config, load_storage_config
from storage_stub.config import StorageConfig
from storage_stub.confparse import ConfigError, load_config, read_conf

CONF_DIR = pathlib.Path(__file__).resolve().parents[2] / "conf"
SHIPPED = [
    pytest.param(CONF_DIR / "broker.conf", BrokerConfig, id="broker.conf"),
    pytest.param(CONF_DIR / "storage.conf", StorageConfig, id="storage.conf"),
]


def write_conf(tmp_path: pathlib.Path, text: str, name: str = "broker.conf") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(path: pathlib.Path | None, overrides: dict[str, object] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_broker_config(path, overrides)
    return str(caught.value)


class Sample(BaseModel):
    """A small model to exercise the loader on types BrokerConfig does not have."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "sample"
    ratio: float = Field(default=0.5, ge=0, le=1)
    mode: Literal["fast", "safe"] = "safe"
    low: int = 1
    high: int = 10

    @model_validator(mode="after")
    def low_not_above_high(self) -> Sample:
        if self.low > self.high:
            raise ValueError("low must not exceed high")
        return self


# --- the shipped files -------------------------------------------------------------


@pytest.mark.parametrize(("path", "model"), SHIPPED)
def test_shipped_conf_sets_every_key_to_the_model_default(
    path: pathlib.Path, model: type[BaseModel]
) -> None:
    settings = read_conf(path)

    assert set(settings) == set(model.model_fields), "file keys and model fields differ"
    empty = [key for key, setting in settings.items() if setting.value == ""]
    assert not empty, f"keys left empty instead of spelling out the default: {empty}"
    assert load_config(model, path) == model()


@pytest.mark.parametrize(("path", "model"), SHIPPED)
def test_shipped_conf_documents_each_key_with_its_default(
    path: pathlib.Path, model: type[BaseModel]
) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    for key, setting in read_conf(path).items():
        assert setting.line is not None
        comment: list[str] = []
        index = setting.line - 2
        while index >= 0 and lines[index].startswith("#"):
            comment.insert(0, lines[index])
            index -= 1
        block = "\n".join(comment)
        assert comment, f"{key} has no comment above it"
        assert f"Default: {setting.value}." in block, f"{key}: comment does not state the default"
        assert "Unit:" in block or "Values:" in block, f"{key}: comment states no unit or values"


def test_no_file_means_all_defaults() -> None:
    assert load_broker_config(None) == BrokerConfig()
    assert load_storage_config(None) == StorageConfig()


def test_broker_defaults_match_pulsar_and_brokerlab_choices() -> None:
    config = BrokerConfig()
    assert (config.bindAddress, config.webServicePort) == ("127.0.0.1", 8080)
    assert config.maxMessageSize == 5 * 1024 * 1024
    assert config.managedLedgerCacheSizeMB == 64
    assert config.maxUnackedMessagesPerSubscription == 4 * config.maxUnackedMessagesPerConsumer
    # Pulsar's default: the rules before PIP-430 re-check backlogged cursors at this period
    assert config.statsUpdateFrequencyInSecs == 60


def test_config_objects_are_immutable() -> None:
    config = BrokerConfig()
    with pytest.raises(ValidationError):
        config.webServicePort = 9090


# --- parsing -----------------------------------------------------------------------


def test_comments_blank_lines_and_whitespace_are_ignored(tmp_path: pathlib.Path) -> None:
    path = write_conf(
        tmp_path,
        "# a comment\n\n   # an indented comment\n  webServicePort  =  9090  \r\n\t\n"
        "bindAddress=0.0.0.0",
    )

    config = load_broker_config(path)

    assert (config.webServicePort, config.bindAddress) == (9090, "0.0.0.0")


def test_value_may_contain_equals_sign(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "name=a=b\n")

    assert load_config(Sample, path).name == "a=b"


def test_empty_value_means_default(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "webServicePort=\nbindAddress=\nallowAutoTopicCreation=\n")

    assert load_broker_config(path) == BrokerConfig()


def test_values_are_coerced_from_strings(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "ratio=0.25\nmode=fast\nlow=3\n")

    assert load_config(Sample, path) == Sample(ratio=0.25, mode="fast", low=3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("false", False), ("True", True), ("FALSE", False), ("1", True), ("0", False)],
)
def test_bool_values(tmp_path: pathlib.Path, text: str, expected: bool) -> None:
    path = write_conf(tmp_path, f"allowAutoTopicCreation={text}\n")

    assert load_broker_config(path).allowAutoTopicCreation is expected


def test_bool_value_that_is_not_a_bool_is_refused(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "allowAutoTopicCreation=maybe\n")

    message = config_error(path)

    assert message.startswith(f"{path}:1: bad value for allowAutoTopicCreation: 'maybe' (")
    assert "valid boolean" in message


# --- errors name the key, the file and the line ------------------------------------


def test_unknown_key_names_key_file_and_line(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "# cache\nwebServicePort=8080\n\nmanagedLedgerCacheSizeMb=128\n")

    message = config_error(path)

    assert message == (
        f"{path}:4: unknown key 'managedLedgerCacheSizeMb'"
        " (did you mean 'managedLedgerCacheSizeMB'?)"
    )


def test_unknown_key_far_from_any_field_gets_no_suggestion(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "zookeeperServers=localhost:2181\n")

    assert config_error(path) == f"{path}:1: unknown key 'zookeeperServers'"


def test_bad_value_names_key_file_line_and_value(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "bindAddress=127.0.0.1\n\n\n\n\n\nwebServicePort=abc\n")

    message = config_error(path)

    assert message.startswith(f"{path}:7: bad value for webServicePort: 'abc' (")
    assert "valid integer" in message


def test_out_of_range_value_is_refused(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "webServicePort=70000\nmanagedLedgerCacheSizeMB=-1\n")

    lines = config_error(path).split("\n")

    assert lines[0].startswith(f"{path}:1: bad value for webServicePort: '70000' (")
    assert "less than or equal to 65535" in lines[0]
    assert lines[1].startswith(f"{path}:2: bad value for managedLedgerCacheSizeMB: '-1' (")


def test_trailing_comment_is_part_of_the_value(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "webServicePort=8080 # the usual port\n")

    assert config_error(path).startswith(
        f"{path}:1: bad value for webServicePort: '8080 # the usual port' ("
    )


def test_bad_literal_in_storage_conf(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "syncMode=sometimes\n", name="storage.conf")

    with pytest.raises(ConfigError) as caught:
        load_storage_config(path)

    assert str(caught.value).startswith(f"{path}:1: bad value for syncMode: 'sometimes' (")
    assert "'always', 'batch' or 'none'" in str(caught.value)


def test_duplicate_key_names_both_lines(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "webServicePort=8080\nbindAddress=::1\nwebServicePort=9090\n")

    assert config_error(path) == (f"{path}:3: duplicate key 'webServicePort' (first set on line 1)")


def test_line_without_equals_sign_is_refused(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "webServicePort=8080\nallowAutoTopicCreation true\n")

    assert config_error(path) == (
        f"{path}:2: expected key=value, got 'allowAutoTopicCreation true'"
    )


def test_empty_key_is_refused(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "=8080\n")

    assert config_error(path) == f"{path}:1: empty key in '=8080'"


def test_every_problem_is_reported_in_line_order(tmp_path: pathlib.Path) -> None:
    path = write_conf(
        tmp_path,
        "maxMessageSize=0\nnoSuchKey=1\nwebServicePort\nmaxMessageSize=1\nwebServicePort=x\n",
    )

    with pytest.raises(ConfigError) as caught:
        load_broker_config(path)

    assert [(issue.line, issue.key) for issue in caught.value.issues] == [
        (1, "maxMessageSize"),
        (2, "noSuchKey"),
        (3, None),
        (4, "maxMessageSize"),
        (5, "webServicePort"),
    ]


def test_missing_file_is_a_config_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "absent.conf"

    assert config_error(path).startswith(f"{path}: cannot read: ")


def test_model_level_check_is_reported_against_the_file(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "low=5\nhigh=2\n", name="sample.conf")

    with pytest.raises(ConfigError) as caught:
        load_config(Sample, path)

    assert str(caught.value) == f"{path}: Value error, low must not exceed high"


# --- overrides ---------------------------------------------------------------------


def test_overrides_win_over_the_file(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "webServicePort=9090\nmaxMessageSize=1024\n")

    config = load_broker_config(path, {"webServicePort": "0", "allowAutoTopicCreation": False})

    assert config.webServicePort == 0
    assert config.allowAutoTopicCreation is False
    assert config.maxMessageSize == 1024


def test_override_replaces_a_bad_file_value(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "webServicePort=abc\n")

    assert load_broker_config(path, {"webServicePort": 1234}).webServicePort == 1234


def test_empty_override_resets_key_to_default(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "webServicePort=9090\n")

    assert load_broker_config(path, {"webServicePort": ""}).webServicePort == 8080


def test_overrides_without_file(tmp_path: pathlib.Path) -> None:
    config = load_storage_config(None, {"storageMode": "memory", "journalMaxGroupWaitMSec": "0.5"})

    assert (config.storageMode, config.journalMaxGroupWaitMSec) == ("memory", 0.5)


def test_bad_override_says_override(tmp_path: pathlib.Path) -> None:
    path = write_conf(tmp_path, "webServicePort=9090\n")

    message = config_error(path, {"webServicePort": "abc"})

    assert message.startswith("override: bad value for webServicePort: 'abc' (")


def test_unknown_override_key_says_override() -> None:
    assert config_error(None, {"webservicePort": 1}) == (
        "override: unknown key 'webservicePort' (did you mean 'webServicePort'?)"
    )


def test_config_error_can_carry_a_plain_message() -> None:
    error = ConfigError("conf/broker.conf: not a file")

    assert (str(error), error.issues) == ("conf/broker.conf: not a file", ())


def test_write_water_marks_must_be_in_order() -> None:
    # Netty refuses a low water mark above the high one; so does the broker, at start
    message = config_error(
        None,
        {
            "pulsarChannelWriteBufferHighWaterMark": "1000",
            "pulsarChannelWriteBufferLowWaterMark": "2000",
        },
    )
    assert "pulsarChannelWriteBufferLowWaterMark" in message
    equal = load_broker_config(None, {"pulsarChannelWriteBufferLowWaterMark": "65536"})
    assert equal.pulsarChannelWriteBufferLowWaterMark == 65536  # equal marks are allowed
