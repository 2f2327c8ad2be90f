"""``tmsgate pipeline list`` and ``tmsgate pipeline run NAME [ARGS...]``: the example Spark
pipelines (pipelines/examples/README.md), run in this Python with Spark in local mode."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tmsgate.pipelines.examples import EXAMPLES


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


def run(args: argparse.Namespace) -> int:
    if args.pipeline_command == "list":
        for name, module in sorted(EXAMPLES.items()):
            doc = importlib.import_module(module).__doc__ or ""
            print(f"{name:16} {doc.strip().splitlines()[0]}")
        return 0
    # Spark's Python workers must run this interpreter (it has tmsgate and pyarrow), and
    # a laptop's hostname often resolves to an address Spark cannot bind.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    module = importlib.import_module(EXAMPLES[args.name])
    return int(module.main(args.args) or 0)
