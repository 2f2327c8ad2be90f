"""The wheel maps the repository's folders under the tmsgate namespace, and nothing else."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"storage", "protocol", "gateway", "pipelines", "client"}


def test_wheel_contains_every_subpackage_under_tmsgate(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("tmsgate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"tmsgate"}, f"wheel installs top-level names other than tmsgate: {tops}"
    # every folder holding Python code in the repository must be in the wheel
    for folder in FOLDERS:
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT)
            assert f"tmsgate/{rel.as_posix()}/__init__.py" in names, f"{rel} missing from wheel"
            for module in init.parent.glob("*.py"):
                assert f"tmsgate/{rel.as_posix()}/{module.name}" in names
    entry = [n for n in names if n.endswith("entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry[0]).decode()
    assert "tmsgate = tmsgate.gateway.cli:main" in text
