"""Access trace recording (brokerlabTraceDir); see docs/trace-format.md."""
