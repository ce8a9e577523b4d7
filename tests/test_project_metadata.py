"""The project's packaging metadata is in the forms its build backend keeps supporting."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_license_is_an_spdx_expression_and_the_backend_reads_it():
    """``project.license`` as a string (PEP 639), not the table setuptools stops building
    with; setuptools reads that form from version 77 on, so the build requires it."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    assert project["project"]["license"] == "MIT"
    [setuptools] = [
        Requirement(r)
        for r in project["build-system"]["requires"]
        if Requirement(r).name == "setuptools"
    ]
    assert not setuptools.specifier.contains(Version("76.1"))
    assert setuptools.specifier.contains(Version("77.0.0"))
