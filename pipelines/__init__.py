"""Spark data source and migration tools (not yet built)."""
