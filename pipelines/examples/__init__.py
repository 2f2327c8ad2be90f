"""Example Spark pipelines on tmsgate (README.md beside this file): ``tmsgate pipeline run
NAME`` runs one against a local gateway. Each module has ``main(argv)``, imports its third-
party modules (pyspark, confluent_kafka) inside the functions that use them, so that
``tmsgate pipeline list`` and ``NAME --help`` work before the ``spark`` extra is installed,
and ends its job with one summary line."""

from __future__ import annotations

import argparse
import textwrap

EXAMPLES = {
    "generate-orders": "tmsgate.pipelines.examples.generate_orders",
    "order-totals": "tmsgate.pipelines.examples.order_totals",
    "export-parquet": "tmsgate.pipelines.examples.export_parquet",
}
WIDTH = 78  # as argparse wraps its own help text on an 80-column terminal


def summary(doc: str | None) -> str:
    """A module docstring's first paragraph on one line, reST quotes made plain: what
    ``pipeline list`` shows and what ``--help`` opens with."""
    first = (doc or "").strip().split("\n\n", 1)[0]
    return " ".join(first.split()).replace("``", "`")


def details(doc: str | None) -> str:
    """The docstring after its first paragraph (the ``--help`` epilog), as written."""
    rest = (doc or "").strip().split("\n\n", 1)[1:]
    return textwrap.dedent(rest[0]).replace("``", "`") if rest else ""


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The option parser of example ``name``, its usage line naming the command that runs
    it (also when run as ``python -m``: the command is what the README teaches)."""
    return argparse.ArgumentParser(
        prog=f"tmsgate pipeline run {name}",
        description=textwrap.fill(summary(doc), WIDTH),
        epilog=details(doc),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def rate(count: int, seconds: float, unit: str) -> str:
    """``count`` over ``seconds`` for a summary line: ``"1,234 orders/s"``."""
    return f"{count / seconds:,.0f} {unit}/s" if seconds > 0 else f"- {unit}/s"
