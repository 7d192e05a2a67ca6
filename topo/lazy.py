"""Public names of a package imported on first use (PEP 562 module `__getattr__` and `__dir__`)."""

import importlib
import sys


def lazy_exports(package: str, table: dict[str, str]):
    """`__getattr__` and `__dir__` for `package`; `table` maps each public name to the module defining
    it, imported when the name is first read, the value then kept in the package's namespace."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str):
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(module), name)
        return value

    def __dir__():
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
