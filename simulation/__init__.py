"""The broker on virtual time: an event loop whose clock jumps to the next timer,
clients in the broker's process, and scenario runs on them (README: Virtual time)."""
