"""``tmsgate pipeline list`` and ``tmsgate pipeline run NAME --help`` as a new user meets
them: after ``pip install -e '.[spark]'``, and before it (no pyspark, no confluent_kafka:
listing and help must work, and running says which extra to install). No Spark starts here;
tests/test_spark_examples.py runs the pipelines themselves."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from tmsgate.pipelines.examples import EXAMPLES

ROOT = Path(__file__).resolve().parents[1]

# Run in a child Python: the listed modules cannot be imported there, as if not installed
# (sys.modules[name] = None makes ``import name`` raise ModuleNotFoundError).
RUNNER = """
import contextlib, io, json, sys
for name in filter(None, sys.argv[1].split(",")):
    sys.modules[name] = None
from tmsgate.gateway.cli import main
results = []
for command in json.loads(sys.argv[2]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(command)
        except SystemExit as exc:
            code = exc.code
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
"""


def cli(commands: list[list[str]], missing: tuple[str, ...]) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, ",".join(missing), json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def first_paragraph(module: str) -> str:
    path = ROOT / "pipelines" / "examples" / f"{module.rsplit('.', 1)[1]}.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("``", "`")


@pytest.mark.parametrize(
    "missing", [(), ("pyspark", "confluent_kafka", "pyarrow")], ids=["installed", "not-installed"]
)
def test_list_and_help_show_whole_descriptions_and_the_command(missing) -> None:
    names = sorted(EXAMPLES)
    commands = [["pipeline", "list"]] + [["pipeline", "run", n, "--help"] for n in names]
    listed, *helps = cli(commands, missing)
    assert listed["code"] == 0, listed["err"]
    entries = re.split(r"\n(?=\S)", str(listed["out"]).strip())  # an entry per unindented line
    assert [e.split()[0] for e in entries] == names
    for name, entry, help_ in zip(names, entries, helps, strict=True):
        described = " ".join(entry.split()[1:])
        assert described == first_paragraph(EXAMPLES[name])
        assert described.endswith("."), described  # a whole sentence, not cut at a line end
        assert help_["code"] == 0, help_["err"]
        usage = str(help_["out"])
        assert usage.startswith(f"usage: tmsgate pipeline run {name} [-h]"), usage
        assert " ".join(first_paragraph(EXAMPLES[name]).split()) in " ".join(usage.split())


def test_running_without_the_spark_extra_says_what_to_install() -> None:
    gen, totals = cli(
        [
            ["pipeline", "run", "generate-orders", "--count", "1"],
            ["pipeline", "run", "order-totals"],
        ],
        missing=("pyspark", "confluent_kafka"),
    )
    assert gen["code"] == totals["code"] == 2
    assert "needs the Python module 'confluent_kafka'" in str(gen["err"])
    assert "needs the Python module 'pyspark'" in str(totals["err"])
    assert "pip install 'tmsgate[spark]'" in str(gen["err"])


def _distribution(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group()).lower()


def test_the_spark_extra_installs_every_module_the_pipelines_import() -> None:
    """Every third-party module imported anywhere in pipelines/ comes from a base dependency
    or from the ``spark`` extra (the examples imported confluent_kafka, which neither had)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spark_extra = project["optional-dependencies"]["spark"]
    declared = {_distribution(r) for r in project["dependencies"] + spark_extra}
    by_module = importlib.metadata.packages_distributions()
    undeclared = {}
    for path in (ROOT / "pipelines").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top == "tmsgate":
                    continue
                dists = {_distribution(d) for d in by_module.get(top, [top])}
                if not dists & declared:
                    undeclared[f"{path.relative_to(ROOT)}: {top}"] = sorted(dists)
    assert not undeclared, undeclared
