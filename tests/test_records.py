"""topo.records.record behaves as @dataclass(frozen=True) / @dataclass for what it implements."""

from __future__ import annotations

import dataclasses

import pytest

from topo.records import record


@record
class Point:
    """A point."""

    x: int
    y: int = 0
    tags: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class DataPoint:
    x: int
    y: int = 0
    tags: list = dataclasses.field(default_factory=list)


def test_init_eq_hash_repr_and_replace_as_a_frozen_dataclass():
    p = Point(1, y=2)
    assert (p.x, p.y, p.tags) == (1, 2, [])
    assert p == Point(1, 2) and p != Point(1, 3) and p != DataPoint(1, 2)
    assert hash(Point(1, 2, ())) == hash(Point(1, 2, ()))
    assert repr(p) == "Point(x=1, y=2, tags=[])" == repr(DataPoint(1, 2)).replace("DataPoint", "Point")
    assert dataclasses.replace(p, y=5) == Point(1, 5) and [f.name for f in dataclasses.fields(p)] == ["x", "y", "tags"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.y


def test_a_plain_subclass_may_add_attributes_but_not_assign_fields():
    class Sub(Point):
        pass

    class DataSub(DataPoint):
        pass

    for cls in (Sub, DataSub):
        s = cls(1)
        s.extra = 2
        assert s.extra == 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            s.x = 3


def test_post_init_kw_only_and_mutable_records():
    @record(frozen=False, kw_only=True)
    class Counter:
        """A counter."""

        n: int = 0

        def __post_init__(self):
            self.n += 1

    c = Counter(n=1)
    assert c.n == 2 and Counter.__hash__ is None
    c.n = 7
    assert c == Counter(n=6)
    with pytest.raises(TypeError):
        Counter(1)


@pytest.mark.parametrize("option", [{"init": False, "default": 0}, {"repr": False}, {"compare": False}, {"hash": True}])
def test_field_options_it_does_not_implement_are_refused(option):
    with pytest.raises(TypeError, match="@record does not implement"):
        @record
        class Bad:
            """Bad."""

            x: int = dataclasses.field(**option)
