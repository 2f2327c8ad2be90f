"""Pipelines into and out of tmsgate: `tmsgate migrate` (migrate.py) copies a Kafka
cluster in, offsets kept."""
