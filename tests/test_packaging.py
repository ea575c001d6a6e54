"""Packaging: the license, the classifiers, PEP 561 markers, and one version shown by
`baton --version`, the package metadata and `baton_build_info`."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

from metrics import baton_version

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "processor", "store", "metrics")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_has_one_place_and_baton_shows_it() -> None:
    declared = PYPROJECT["project"]["version"]
    assert importlib.metadata.version("baton") == declared == baton_version()
    shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--version"],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["baton,", "version", declared]
    sources = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    assert not [p for p in sources if f'"{declared}"' in p.read_text()]


def test_license_is_apache_2_in_the_file_and_the_metadata() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    meta = importlib.metadata.metadata("baton")
    assert meta["License"] == "Apache-2.0"
    classifiers = meta.get_all("Classifier") or []
    assert "License :: OSI Approved :: Apache Software License" in classifiers
    assert "Typing :: Typed" in classifiers
    assert any(c.startswith("Programming Language :: Python :: 3.11") for c in classifiers)
    assert "Apache-2.0" in (ROOT / "README.md").read_text()


def test_every_package_is_marked_typed_and_ships_the_marker() -> None:
    for package in PACKAGES:
        assert (ROOT / package / "py.typed").is_file(), package
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["*"]
    assert all("py.typed" in files for files in data.values())
