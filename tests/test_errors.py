"""One exception tree: every exception class in the package derives from MCPFaultError and is drawn in
errors.py's docstring (private control-flow signals, ``_Like`` this, excepted)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import mcpfault
from mcpfault import errors
from mcpfault.control.client import ApiError


def exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in pkgutil.walk_packages(mcpfault.__path__, "mcpfault."):
        if module.name.endswith("__main__"):
            continue
        loaded = importlib.import_module(module.name)
        for name, value in vars(loaded).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.name:
                found[f"{module.name}.{name}"] = value
    return found


def test_every_exception_derives_from_the_base_and_is_drawn() -> None:
    drawn = set(re.findall(r"\b[A-Z][A-Za-z]+\b", errors.__doc__ or ""))
    public = {path: cls for path, cls in exception_classes().items() if not cls.__name__.startswith("_")}
    assert len(public) > 40
    assert [p for p, cls in public.items() if not issubclass(cls, errors.MCPFaultError)] == []
    assert [p for p, cls in public.items() if cls.__name__ not in drawn] == []


def test_api_error_is_an_mcpfault_error_as_documented() -> None:
    assert issubclass(ApiError, errors.MCPFaultError)
