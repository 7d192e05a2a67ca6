"""`@record`: a dataclass at a fraction of its import cost, for the launcher's config and result records.

`@dataclass` compiles four or five methods per class (`__init__`, `__repr__`, `__eq__`, and for a
frozen class `__hash__`, `__setattr__`, `__delattr__`), about 0.5 ms a class, paid by every
`topo launch` and `topo run` before its first worker starts. Here the class is a dataclass with
no generated method (its fields stay, so `dataclasses.replace` and `dataclasses.fields` work as
usual), `__init__` is compiled once (calling `__post_init__` if the class has one), and equality,
hashing, repr and immutability are shared functions that behave as the dataclass ones do.

Each class needs a docstring: without one, dataclass() builds one from the signature with
`inspect`, which costs more than all the rest.
"""

from __future__ import annotations

from dataclasses import MISSING, FrozenInstanceError, dataclass, fields


def _values(obj) -> tuple:
    return tuple(obj.__dict__[name] for name in obj._record_fields)


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self):
    return hash(_values(self))


def _repr(self):
    shown = ", ".join(f"{name}={self.__dict__[name]!r}" for name in self._record_fields)
    return f"{type(self).__qualname__}({shown})"


def _frozen_setattr(self, name, value):
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self, name):
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def record(cls=None, *, frozen: bool = True):
    """`@dataclass(frozen=True)` (or `@record(frozen=False)`: `@dataclass`) with the same
    `__init__`, `__eq__`, `__hash__` (frozen: by the fields; mutable: none), `__repr__` and
    immutability."""

    def wrap(cls):
        cls = dataclass(init=False, repr=False, eq=False)(cls)
        cls._record_fields = tuple(f.name for f in fields(cls))
        cls.__init__ = _init_for(cls)
        cls.__eq__ = _eq
        cls.__repr__ = _repr
        if frozen:
            cls.__hash__ = _hash
            cls.__setattr__ = _frozen_setattr
            cls.__delattr__ = _frozen_delattr
        else:
            cls.__hash__ = None
        return cls

    return wrap if cls is None else wrap(cls)


def _init_for(cls):
    """`__init__(self, <fields>)` storing each argument, with defaults and factories as declared,
    then calling `__post_init__()` when the class defines it."""
    params, body, env = [], [], {"_MISSING": MISSING}
    for f in fields(cls):
        param = f.name
        if f.default is not MISSING:
            env[f"_default_{f.name}"] = f.default
            param = f"{f.name}=_default_{f.name}"
        elif f.default_factory is not MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            param = f"{f.name}=_MISSING"
            body.append(f" if {f.name} is _MISSING: {f.name} = _factory_{f.name}()")
        params.append(param)
        body.append(f" d[{f.name!r}] = {f.name}")
    if hasattr(cls, "__post_init__"):
        body.append(" self.__post_init__()")
    exec(f"def __init__({', '.join(['self', *params])}):\n d = self.__dict__\n" + "\n".join(body) + "\n", env)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init
