"""The `esper` command line: one module per command; the only place that builds the telemetry hub."""
