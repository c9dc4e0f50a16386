"""Fault injectors, plans, planted regressions, properties, scenarios and the CLI."""
