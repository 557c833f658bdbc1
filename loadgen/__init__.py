"""brokerlab's load generator: a black-box HTTP client of the broker (it never imports
``broker``), driven by named scenarios."""
