"""The HTTP edge: parses and validates requests, calls the broker, maps errors."""
