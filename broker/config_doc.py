"""Write ``conf/broker.conf`` and ``conf/storage.conf`` from the key definitions.

    python -m broker.config_doc           # say which files are out of date (exit 1 if any)
    python -m broker.config_doc --write   # rewrite them

Each key is defined once, in ``BrokerConfig`` (broker/config.py) or ``StorageConfig``
(storage_stub/config.py): change a key's default or documentation there, then run this.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence

from pydantic import BaseModel

from broker.config import CONF_HEADER as BROKER_CONF_HEADER
from broker.config import BrokerConfig
from storage_stub.config import CONF_HEADER as STORAGE_CONF_HEADER
from storage_stub.config import StorageConfig
from storage_stub.confkeys import render_conf

#: The repository's conf directory.
CONF_DIR = pathlib.Path(__file__).resolve().parent.parent / "conf"

GENERATED = """
Every key below is set to its default. This file is written from the key definitions in
{source} by "python -m broker.config_doc --write": change a key's default or
documentation there, not here. To run with other values, pass a copy of this file with
--config (--storage-config for storage.conf), or override keys with --set KEY=VALUE
(--storage-set).
"""

#: file name -> (model, header, where its keys are defined)
CONF_FILES: dict[str, tuple[type[BaseModel], str, str]] = {
    "broker.conf": (BrokerConfig, BROKER_CONF_HEADER, "broker/config.py"),
    "storage.conf": (StorageConfig, STORAGE_CONF_HEADER, "storage_stub/config.py"),
}


def conf_text(name: str) -> str:
    """The text ``conf/<name>`` must have: its header, then every key documented."""
    model, header, source = CONF_FILES[name]
    return render_conf(model, header + GENERATED.format(source=source))


def stale_files(conf_dir: pathlib.Path = CONF_DIR) -> list[pathlib.Path]:
    """The conf files whose text differs from what the definitions give (or are missing)."""
    stale = []
    for name in CONF_FILES:
        path = conf_dir / name
        if not path.exists() or path.read_text(encoding="utf-8") != conf_text(name):
            stale.append(path)
    return stale


def write_files(conf_dir: pathlib.Path = CONF_DIR) -> list[pathlib.Path]:
    """Rewrite the stale conf files; returns them."""
    stale = stale_files(conf_dir)
    for path in stale:
        path.write_text(conf_text(path.name), encoding="utf-8")
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.config_doc",
        description="Write conf/broker.conf and conf/storage.conf from the key definitions.",
    )
    parser.add_argument("--write", action="store_true", help="rewrite the stale files")
    parser.add_argument(
        "--conf-dir", type=pathlib.Path, default=CONF_DIR, help=f"default: {CONF_DIR}"
    )
    args = parser.parse_args(argv)
    if args.write:
        for path in write_files(args.conf_dir):
            print(f"wrote {path}")
        return 0
    stale = stale_files(args.conf_dir)
    for path in stale:
        print(f"{path} is out of date: run python -m broker.config_doc --write", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
