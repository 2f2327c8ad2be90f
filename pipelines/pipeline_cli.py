"""``tmsgate pipeline list`` and ``tmsgate pipeline run NAME [ARGS...]``: the example Spark
pipelines (pipelines/examples/README.md), run in this Python with Spark in local mode."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import shutil
import sys
import textwrap
from pathlib import Path

from tmsgate.pipelines.examples import EXAMPLES, summary

NAME_WIDTH = 16


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("pipeline", help="run an example Spark pipeline against a gateway")
    actions = p.add_subparsers(dest="pipeline_command", required=True)
    actions.add_parser("list", help="the example pipelines")
    run = actions.add_parser(
        "run",
        help="run one (its own options follow its name; NAME --help lists them)",
    )
    run.add_argument("name", choices=sorted(EXAMPLES))
    run.add_argument("args", nargs=argparse.REMAINDER, help="the pipeline's options")


def docstring(module: str) -> str | None:
    """A module's docstring read from its source, not by importing it: listing the examples
    must not need what running them needs (pyspark, confluent_kafka)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8")))


def list_examples() -> None:
    width = max(NAME_WIDTH + 30, shutil.get_terminal_size().columns)
    for name, module in sorted(EXAMPLES.items()):
        print(
            textwrap.fill(
                summary(docstring(module)),
                width,
                initial_indent=f"{name:{NAME_WIDTH}} ",
                subsequent_indent=" " * (NAME_WIDTH + 1),
            )
        )


def run(args: argparse.Namespace) -> int:
    if args.pipeline_command == "list":
        list_examples()
        return 0
    # Spark's Python workers must run this interpreter (it has tmsgate and pyarrow), and
    # a laptop's hostname often resolves to an address Spark cannot bind.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        module = importlib.import_module(EXAMPLES[args.name])
        return int(module.main(args.args) or 0)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if not missing or missing == "tmsgate":
            raise
        print(
            f"tmsgate pipeline run {args.name} needs the Python module {missing!r}, which is "
            "not installed: pip install 'tmsgate[spark]'",
            file=sys.stderr,
        )
        return 2
