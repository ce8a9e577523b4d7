"""The store suite is a contract over both APIs: every module's ``store`` tests run on the
sync and the async API unless the module says why not (``SYNC_ONLY_BECAUSE`` for the whole
module, ``SYNC_ONLY = {test name: reason}`` for single tests; see tests/store/conftest.py)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from .conftest import sync_only_reason

MODULES = sorted(p.stem for p in Path(__file__).parent.glob("test_*.py"))


def opt_out_problems(module: Any) -> list[str]:
    """What is wrong with how ``module`` opts out of the async API (nothing: ``[]``)."""
    problems = []
    if hasattr(module, "BOTH_APIS"):
        problems.append("BOTH_APIS is gone: every module runs on both APIs by default")
    because = getattr(module, "SYNC_ONLY_BECAUSE", None)
    if because is not None and not (isinstance(because, str) and because.strip()):
        problems.append(f"SYNC_ONLY_BECAUSE must be a reason, not {because!r}")
    sync_only = getattr(module, "SYNC_ONLY", None)
    if sync_only is None:
        return problems
    if not isinstance(sync_only, dict):
        return [*problems, f"SYNC_ONLY must map each test to its reason, not {sync_only!r}"]
    for name, reason in sync_only.items():
        if not callable(getattr(module, name, None)):
            problems.append(f"SYNC_ONLY names {name!r}, which is no test of the module")
        if not (isinstance(reason, str) and reason.strip()):
            problems.append(f"SYNC_ONLY gives {name!r} no reason")
    return problems


@pytest.mark.parametrize("name", MODULES)
def test_a_store_module_runs_on_both_apis_or_says_why_not(name: str) -> None:
    module = importlib.import_module(f"tests.store.{name}")
    assert opt_out_problems(module) == []


def test_an_opt_out_without_a_reason_is_caught() -> None:
    def test_x() -> None: ...

    assert opt_out_problems(SimpleNamespace(SYNC_ONLY={"test_x"}, test_x=test_x))
    assert opt_out_problems(SimpleNamespace(SYNC_ONLY={"test_x": ""}, test_x=test_x))
    assert opt_out_problems(SimpleNamespace(SYNC_ONLY={"test_gone": "a reason"}))
    assert opt_out_problems(SimpleNamespace(SYNC_ONLY_BECAUSE=""))
    assert opt_out_problems(SimpleNamespace(BOTH_APIS=True))
    fine = SimpleNamespace(SYNC_ONLY={"test_x": "a reason"}, test_x=test_x)
    assert opt_out_problems(fine) == []
    assert sync_only_reason(fine, "test_x") == "a reason"
    assert sync_only_reason(fine, "test_y") is None
    whole = ModuleType("whole")
    whole.SYNC_ONLY_BECAUSE = "a reason"  # type: ignore[attr-defined]
    assert opt_out_problems(whole) == []
    assert sync_only_reason(whole, "test_y") == "a reason"
