"""brokerlab: a Pulsar broker emulator for people who tune and design broker entry caches."""

__version__ = "0.1.0"
