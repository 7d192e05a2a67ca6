"""`@record`: a dataclass at a fraction of its import cost, for the model's objects and the
launcher's config and result records.

`@dataclass` compiles four to six methods per class (`__init__`, `__repr__`, `__eq__`, and for a
frozen class `__hash__`, `__setattr__`, `__delattr__`), about 0.5 ms a class, paid by every `topo`
command that imports the class. Here the class is a dataclass with no generated method (its fields
stay, so `dataclasses.replace` and `dataclasses.fields` work as usual), `__init__` is compiled once
(calling `__post_init__` when the class has one), and equality, hashing, repr and immutability are
shared functions that behave as the dataclass ones do.

Each class needs a docstring: without one, dataclass() builds one from the signature with
`inspect`, which costs more than all the rest.
"""

from __future__ import annotations

from dataclasses import MISSING, FrozenInstanceError, dataclass, fields
from operator import attrgetter


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    return self._record_values(self) == other._record_values(other)


def _hash(self):
    return hash(self._record_values(self))


def _repr(self):
    shown = ", ".join(f"{name}={self.__dict__[name]!r}" for name in self._record_fields)
    return f"{type(self).__qualname__}({shown})"


def _frozen_setattr(self, name, value):
    # as dataclass's: the class itself refuses every attribute, a plain subclass only the fields
    if type(self).__dict__.get("__setattr__") is _frozen_setattr or name in self._record_fields:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _frozen_delattr(self, name):
    if type(self).__dict__.get("__delattr__") is _frozen_delattr or name in self._record_fields:
        raise FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)


def record(cls=None, *, frozen: bool = True, kw_only: bool = False):
    """`@dataclass(frozen=True)` (`frozen=False`: `@dataclass`; `kw_only` as dataclass's) with the
    same `__init__`, `__eq__`, `__hash__` (frozen: by the fields; mutable: none), `__repr__` and
    immutability."""

    def wrap(cls):
        cls = dataclass(init=False, repr=False, eq=False, kw_only=kw_only)(cls)
        for f in fields(cls):
            if not (f.init and f.repr and f.compare) or f.hash is not None:
                raise TypeError(f"@record does not implement field({f.name}, init/repr/compare/hash=...): "
                                f"use @dataclass for {cls.__qualname__}")
        names = tuple(f.name for f in fields(cls))
        cls._record_fields = names
        cls._record_values = attrgetter(*names) if names else (lambda obj: ())
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
    positional, keyword, body, env = [], [], [], {"_MISSING": MISSING}
    for f in fields(cls):
        param = f.name
        if f.default is not MISSING:
            env[f"_default_{f.name}"] = f.default
            param = f"{f.name}=_default_{f.name}"
        elif f.default_factory is not MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            param = f"{f.name}=_MISSING"
            body.append(f" if {f.name} is _MISSING: {f.name} = _factory_{f.name}()")
        (keyword if f.kw_only else positional).append(param)
        body.append(f" d[{f.name!r}] = {f.name}")
    if hasattr(cls, "__post_init__"):
        body.append(" self.__post_init__()")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    exec(f"def __init__({params}):\n d = self.__dict__\n" + "\n".join(body) + "\n", env)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init
