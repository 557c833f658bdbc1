"""What conf/ ships for Prometheus works: ``serve --brokers N`` lists every broker for
file-based discovery, Prometheus (where installed) scrapes them all through
conf/prometheus.yml's discovery, and the recording rules and alerts pass ``promtool check
rules`` and do what tests/monitoring/prometheus-rules.test.yml says. Debian's
``prometheus`` package has both; without it the promtool tests skip, and the served
brokers are not scraped."""

from __future__ import annotations

import json
import pathlib
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from typing import Any

import pytest
import yaml

from broker.scrape_targets import TARGETS_FILE
from tests.harness import ServedBroker, Spawn, eventually

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_the_shipped_rules_pass_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(CONF / "prometheus-rules.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_the_rules_record_and_alert_as_their_unit_tests_say() -> None:
    result = promtool("test", "rules", str(ROOT / "tests/monitoring/prometheus-rules.test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_the_shipped_prometheus_yml_is_valid_and_loads_the_rules() -> None:
    result = promtool("check", "config", str(CONF / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout


def test_the_shipped_config_discovers_the_file_serve_writes() -> None:
    config = yaml.safe_load((CONF / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    (discovery,) = job["file_sd_configs"]
    # relative to the config's directory: the default --data-dir, run from the root
    assert [(CONF / path).resolve() for path in discovery["files"]] == [
        ROOT / "data" / TARGETS_FILE
    ]


def served_targets(data_dir: pathlib.Path) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = json.loads((data_dir / TARGETS_FILE).read_text())
    return groups


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@pytest.mark.slow
def test_serve_lists_its_brokers_prometheus_scrapes_them_and_a_stop_empties_the_list(
    tmp_path: pathlib.Path, broker_spawn: Spawn | None
) -> None:
    """One ``serve --brokers 2`` (a start of its own per test cost seconds): it lists
    each of its brokers for file-based discovery; Prometheus (where installed) scrapes
    them through the shipped prometheus.yml, its targets file pointed at this test's
    data directory (as its comment tells users with another --data-dir), and its rules
    loaded; a stop empties the list."""
    # forked from the test process's warm interpreter, as the harness's brokers are
    served = ServedBroker(tmp_path / "data", brokers=2, spawn=broker_spawn)
    served.start()
    try:
        urls = [url.removeprefix("http://") for url in served.http_urls]
        assert served_targets(served.data_dir) == [
            {"targets": urls, "labels": {"cluster": "standalone"}}
        ]
        if PROMETHEUS is not None:
            scraped_by_prometheus(tmp_path, served)
    finally:
        served.stop()
    assert served_targets(served.data_dir) == []


def scraped_by_prometheus(tmp_path: pathlib.Path, served: ServedBroker) -> None:
    assert PROMETHEUS is not None
    config = yaml.safe_load((CONF / "prometheus.yml").read_text())
    config["scrape_configs"][0]["file_sd_configs"][0]["files"] = [
        str(tmp_path / "data" / TARGETS_FILE)
    ]
    # scraped every half second rather than every 5 s: the first scrape of a target
    # comes at a random offset within the interval, which the test would otherwise wait
    # out (what stays is Prometheus's own: its discovery hands new targets to the
    # scrapers at most every 5 s)
    config["global"]["scrape_interval"] = config["global"]["evaluation_interval"] = "500ms"
    config["scrape_configs"][0]["file_sd_configs"][0]["refresh_interval"] = "500ms"
    config["rule_files"] = [str(CONF / name) for name in config["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        up: list[dict[str, Any]] = []

        def both_up() -> bool:
            assert prometheus.poll() is None, prometheus.stderr.read().decode()[-3000:]
            try:
                up[:] = query(base, 'up{job="brokerlab"} == 1')
            except OSError:
                up.clear()  # not listening yet
            return len(up) == 2

        eventually(
            both_up, lambda: f"Prometheus to scrape both brokers (up: {up})", 90, every_s=0.2
        )
        instances = sorted(series["metric"]["instance"] for series in up)
        assert instances == sorted(url.removeprefix("http://") for url in served.http_urls)
        assert {series["metric"]["cluster"] for series in up} == {"standalone"}
        brokers = query(base, "brokerlab_bookie_read_only")
        assert sorted(series["metric"]["broker"] for series in brokers) == ["0", "1"]
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
