"""`tmsgate serve`'s command line: every option in a group, with its default and a
TMSGATE_* variable that really sets it; plain `--help` text; a port in use names its
listener (the real console script, a real occupied port)."""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmsgate.gateway.cli import build_parser

TMSGATE = str(Path(sys.executable).with_name("tmsgate"))
ENV_NAME = re.compile(r"\benv (TMSGATE_[A-Z0-9_]+)\)")
GROUPS = {
    "listeners",
    "store",
    "Kafka topics and transactions",
    "security",
    "cluster",
    "compaction",
    "limits and tuning",
    "observability",
}


def serve_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


def serve_options() -> Iterator[argparse.Action]:
    for action in serve_parser()._actions:
        if not isinstance(action, argparse._HelpAction):
            yield action


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def test_options_are_grouped_with_defaults_and_variables() -> None:
    parser = serve_parser()
    titles = {g.title for g in parser._action_groups if g._group_actions}
    assert titles - {"options"} == GROUPS
    ungrouped = next(g for g in parser._action_groups if g.title == "options")
    assert [a.dest for a in ungrouped._group_actions] == ["help"]
    names = []
    for action in serve_options():
        assert action.help is not None and "(default: " in action.help, action.option_strings
        found = ENV_NAME.findall(action.help)
        flag = action.option_strings[0]
        assert found == ["TMSGATE_" + flag[2:].replace("-", "_").upper()], (flag, action.help)
        names += found
    assert len(names) == len(set(names)) > 40
    text = parser.format_help()
    assert all(f"\n{title}:\n" in text for title in GROUPS)


def _other_value(action: argparse.Action) -> tuple[str, list[str]]:
    """A value differing from the default: (as the variable, as command-line arguments)."""
    flag = action.option_strings[0]
    if isinstance(action, argparse.BooleanOptionalAction):
        return "0", [action.option_strings[1]]  # on by default: --no-...
    if action.nargs == 0:  # store_true
        return "1", [flag]
    if action.choices:
        value = next(c for c in action.choices if c != action.default)
    elif isinstance(action.default, str) and re.fullmatch(r"[\d.]+", action.default):
        value = "7" if action.default.isdigit() else "0.25"  # a number given as text
    elif isinstance(action.default, (int, float)):
        value = "7" if isinstance(action.default, int) else "0.25"
    else:
        value = "other.example:1234"
    return value, [flag, value]


def test_every_variable_sets_its_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each TMSGATE_* variable named in the help gives its option the value the flag
    would, and one that differs from the default."""
    defaults = parse()
    for action in serve_options():
        env = ENV_NAME.findall(action.help or "")[0]
        as_env, as_args = _other_value(action)
        with monkeypatch.context() as m:
            m.setenv(env, as_env)
            from_env = getattr(parse(), action.dest)
        from_flag = getattr(parse(*as_args), action.dest)
        assert from_env == from_flag != getattr(defaults, action.dest), (env, as_env)


def test_a_bad_variable_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMSGATE_NODE_ID", "one")
    monkeypatch.setenv("TMSGATE_KAFKA_SECURITY", "tls")
    for argv in (["--kafka-security", "ssl"], ["--node-id", "1"]):
        with pytest.raises(SystemExit) as exc:
            parse(*argv)  # the other bad variable is still read
        assert exc.value.code == 2


def test_top_level_help_is_plain_text() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for text in (parser.format_help(), sub.choices["migrate"].format_help()):
        assert "tmsgate" in text and "``" not in text and ":class:" not in text


@pytest.mark.parametrize(
    ("listener", "option"),
    [("Kafka", "--kafka-listen"), ("HTTP", "--http-listen"), ("metrics", "--metrics-listen")],
)
def test_a_port_in_use_names_the_listener(tmp_path: Path, listener: str, option: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        argv = {"--kafka-listen": "127.0.0.1:0", "--http-listen": "127.0.0.1:0"}
        argv[option] = address
        out = subprocess.run(
            [TMSGATE, "serve", "--store", f"leveldb://{tmp_path / 'store'}"]
            + [x for pair in argv.items() for x in pair],
            capture_output=True,
            text=True,
            timeout=60,
        )
    env = "TMSGATE_" + option[2:].replace("-", "_").upper()
    expected = (
        f"the {listener} listener cannot bind {address}: address already in use ({option} / {env})"
    )
    assert out.returncode == 1 and expected in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
