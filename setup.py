"""The compiled part of brokerlab; everything else is in pyproject.toml.

``broker.ledger._entries`` builds produce entries and ``storage_stub.bookie._frames``
entry log frame headers and their copy into the direct I/O buffer (see their C files).
Both are optional: a machine without a C compiler or Python's headers (or, for the
first, an x86-64 CPU) installs without them, and ``broker.ledger.entry`` and
``storage_stub.bookie.entry_log`` then do the same in Python, to the same bytes
(slower: see the README's bench section).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "broker.ledger._entries",
            ["broker/ledger/_entries.c"],
            extra_compile_args=["-Wall", "-Wextra"],
            libraries=["dl"],
            optional=True,
        ),
        Extension(
            "storage_stub.bookie._frames",
            ["storage_stub/bookie/_frames.c"],
            extra_compile_args=["-Wall", "-Wextra"],
            optional=True,
        ),
        Extension(
            "storage_stub.bookie._writer",
            ["storage_stub/bookie/_writer.c"],
            extra_compile_args=["-Wall", "-Wextra"],
            libraries=["z", "dl"],
            optional=True,
        ),
    ]
)
