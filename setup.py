"""The compiled part of brokerlab; everything else is in pyproject.toml.

``broker.ledger._entries`` builds produce entries (see its C file). It is optional: a
machine without a C compiler, Python's headers or an x86-64 CPU installs without it, and
``broker.ledger.entry`` then encodes in Python, to the same bytes (slower: see the
README's bench section).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "broker.ledger._entries",
            ["broker/ledger/_entries.c"],
            extra_compile_args=["-Wall", "-Wextra"],
            optional=True,
        )
    ]
)
