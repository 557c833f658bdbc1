"""Authentication and authorization shared by the front ends (HTTP, WebSocket, the binary
protocol): Pulsar's token provider (``AuthenticationProviderToken``), its keys and the
``brokerlab token`` command's key and token making. No aiohttp, no broker state."""
