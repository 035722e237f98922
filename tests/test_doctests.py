"""Every example in the gateway's docstrings runs and gives what it shows."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import gateway

MODULES = sorted(info.name for info in pkgutil.walk_packages(gateway.__path__, prefix="gateway."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_pass(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, name


def test_the_examples_are_found() -> None:
    attempted = sum(doctest.testmod(importlib.import_module(n)).attempted for n in MODULES)
    assert len(MODULES) > 60
    assert attempted > 100
