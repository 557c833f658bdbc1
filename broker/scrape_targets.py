"""``prometheus-targets.json``: the brokers ``brokerlab serve`` runs, for Prometheus.

Written in the data directory once every broker listens, in Prometheus's file-based
service discovery format (``file_sd_configs``): one target per broker, the address it
advertises, labelled with Pulsar's ``cluster`` (``clusterName``). conf/prometheus.yml
reads it, so ``serve --brokers N`` (ports the given one plus the index, or any free
ones) is scraped whole with no edit. On a clean stop the list is emptied, so Prometheus
drops the targets instead of reporting them down.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence

#: the file's name in the data directory
TARGETS_FILE = "prometheus-targets.json"


def write_scrape_targets(data_dir: pathlib.Path, cluster: str, http_urls: Sequence[str]) -> None:
    """Replace the data directory's targets file with ``http_urls`` (``http://host:port``;
    none: an empty list). Atomic (a rename), so Prometheus never reads half a file."""
    targets = [url.removeprefix("http://").removeprefix("https://") for url in http_urls]
    groups = [{"targets": targets, "labels": {"cluster": cluster}}] if targets else []
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / TARGETS_FILE
    partial = path.with_name(f".{TARGETS_FILE}.{os.getpid()}")
    try:
        partial.write_text(json.dumps(groups, indent=2) + "\n")
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)  # a full disk: leave no half-written file
        raise
