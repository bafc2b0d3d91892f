"""Evaluation: controllers compared head to head on paired seeds, with the statistics that make the verdicts."""
