"""The Spark pipeline: trace statistics, replays of every design at every size, the
optimal bound, and a report (``brokerlab analyze``)."""
