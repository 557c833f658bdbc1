"""Connection counts of a listener, in total and per client address (Pulsar's
``brokerMaxConnections`` and ``brokerMaxConnectionsPerIp``; ``maxHttpServerConnections``
for HTTP), checked once per connection at accept and never per request."""

from __future__ import annotations


class ConnectionLimiter:
    """Open connections of one listener. ``admit`` when a connection is accepted,
    ``release`` once for each admitted one when it closes. Both O(1)."""

    __slots__ = ("by_ip", "max_per_ip", "max_total", "refused", "total")

    def __init__(self, max_total: int, max_per_ip: int) -> None:
        #: 0: no limit
        self.max_total = max_total
        self.max_per_ip = max_per_ip
        self.total = 0
        #: open connections per client address (addresses with none are removed)
        self.by_ip: dict[str, int] = {}
        #: connections refused since start
        self.refused = 0

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; or, over a limit, count nothing and say
        which limit it is over."""
        if self.max_total and self.total >= self.max_total:
            self.refused += 1
            return f"the listener has its maximum of {self.max_total} connections"
        open_here = self.by_ip.get(ip, 0)
        if self.max_per_ip and open_here >= self.max_per_ip:
            self.refused += 1
            return f"{ip} has its maximum of {self.max_per_ip} connections"
        self.total += 1
        self.by_ip[ip] = open_here + 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        left = self.by_ip[ip] - 1
        if left:
            self.by_ip[ip] = left
        else:
            del self.by_ip[ip]


def peer_ip(peername: object) -> str:
    """The address part of a transport's ``peername`` ("?" when unknown: a Unix socket)."""
    if isinstance(peername, tuple) and peername:
        return str(peername[0])
    return "?"
