"""CpuSet: cpulist and sysfs hex-mask parsing/formatting, set algebra, and what it refuses."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo.cpuset import EMPTY, MAX_ID, CpuSet, union_all
from topo.errors import ParseError

ids = st.integers(min_value=0, max_value=600)
id_sets = st.frozensets(ids, max_size=80)
# Dense sets exercise long runs and word boundaries of the hex format.
dense_sets = st.builds(lambda lo, n, holes: frozenset(range(lo, lo + n)) - holes,
                       st.integers(0, 200), st.integers(0, 200), st.frozensets(st.integers(0, 400), max_size=10))
any_sets = st.one_of(id_sets, dense_sets)


def parse_msrun(text):
    return CpuSet.parse(text, msrun=True)


def reference_cpulist(items: frozenset[int]) -> str:
    """The Linux cpulist of a set, computed the obvious way (sorted, maximal runs compacted)."""
    out, run = [], []
    for i in sorted(items):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def kernel_mask(items: frozenset[int], words: int) -> str:
    """A sysfs cpumap: `words` 32-bit words, zero-padded, most significant first."""
    m = sum(1 << i for i in items)
    return ",".join(f"{(m >> (32 * w)) & 0xFFFFFFFF:08x}" for w in reversed(range(words)))


# ---- cpulists ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, members",
    [
        ("", []),
        ("0", [0]),
        ("0-3", [0, 1, 2, 3]),
        ("0-3,8", [0, 1, 2, 3, 8]),
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
        ("5-5", [5]),
        ("8,0-3", [0, 1, 2, 3, 8]),  # unsorted input is accepted
        ("0-2,1-4", [0, 1, 2, 3, 4]),  # overlapping ranges too
        ("0-3\n", [0, 1, 2, 3]),  # sysfs files end in a newline
        ("\n", []),  # an empty sysfs cpulist (memory-only node) is one newline
        ("1, 3", [1, 3]),
        ("1023", [1023]),
    ],
)
def test_parse_cpulist(text, members):
    assert list(CpuSet.parse(text)) == members


@pytest.mark.parametrize(
    "members, text",
    [([], ""), ([0], "0"), ([0, 1], "0-1"), ([0, 2], "0,2"), ([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
     ([31, 32, 33], "31-33"), ([63, 64], "63-64")],
)
def test_format_cpulist(members, text):
    s = CpuSet(members)
    assert s.to_list() == text
    assert str(s) == text
    assert repr(s) == f"CpuSet({text!r})"


@given(any_sets)
def test_cpulist_matches_reference_formatter(items):
    assert CpuSet(items).to_list() == reference_cpulist(items)


@given(any_sets)
def test_cpulist_round_trip(items):
    s = CpuSet(items)
    assert set(s) == set(items)
    assert CpuSet.parse(s.to_list()) == s
    assert CpuSet.parse(s.to_list()).to_list() == s.to_list()


@given(st.lists(st.tuples(ids, st.integers(0, 40)), max_size=12), st.randoms())
def test_cpulist_parse_of_any_valid_spelling(ranges, rnd):
    """Any list of ranges/singletons, in any order and with overlaps, means their union."""
    parts = [str(lo) if n == 0 else f"{lo}-{lo + n}" for lo, n in ranges]
    rnd.shuffle(parts)
    expected = {i for lo, n in ranges for i in range(lo, lo + n + 1)}
    assert set(CpuSet.parse(",".join(parts))) == expected


@pytest.mark.parametrize(
    "bad, named",
    [
        ("3-1", "3-1"),
        ("1,,2", "1,,2"),
        ("x", "x"),
        ("-1", "-1"),
        ("1-", "1-"),
        ("1 2", "1 2"),
        ("1,", "1,"),
        (",1", ",1"),
        ("0-3,a", "a"),
        ("1-2-3", "1-2-3"),
        ("0x3", "0x3"),
        ("+1", "+1"),
        ("1.5", "1.5"),
        ("\u0661", "\u0661"),  # ARABIC-INDIC DIGIT ONE: int() accepts it, a cpulist must not
        ("0-99999999999", "0-99999999999"),  # would need a 12 GB mask
    ],
)
def test_parse_cpulist_rejects_malformed(bad, named):
    with pytest.raises(ParseError) as err:
        CpuSet.parse(bad)
    assert named in str(err.value)
    assert isinstance(err.value, ValueError)  # ParseError is also a ValueError for callers


def test_whitespace_only_cpulist_is_empty():
    # What the kernel writes for an empty list is "\n"; blank text is the empty set, not an error.
    assert CpuSet.parse(" ") == EMPTY
    assert CpuSet.parse("\t\n") == EMPTY


def test_parse_accepts_the_largest_id():
    assert CpuSet.parse(str(MAX_ID)).first() == MAX_ID
    with pytest.raises(ParseError):
        CpuSet.parse(str(MAX_ID + 1))


# ---- sysfs hex masks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, members",
    [
        ("00000000", []),
        ("", []),
        ("1", [0]),
        ("f", [0, 1, 2, 3]),  # short first word, as for nr_cpu_ids < 32
        ("00000003", [0, 1]),
        ("ffffffff,00000000", list(range(32, 64))),
        ("00000000,ffffffff", list(range(32))),
        ("80000000,00000001", [0, 63]),
        ("1,00000000,00000000", [64]),
        ("00000000,00000000,00000000,00000100\n", [8]),
        ("0x0000000f", [0, 1, 2, 3]),
        ("FF", list(range(8))),
        # Old 2.6 kernels (hwloc's 8em64t-2s2ca2c capture) wrote one long word without commas.
        ("0" * 120 + "ff", list(range(8))),
    ],
)
def test_parse_mask(text, members):
    assert list(CpuSet.parse_mask(text)) == members


@pytest.mark.parametrize(
    "members, text",
    [([], "00000000"), ([0], "00000001"), (range(32), "ffffffff"), (range(32, 64), "ffffffff,00000000"),
     ([0, 63], "80000000,00000001"), ([64], "00000001,00000000,00000000")],
)
def test_format_mask(members, text):
    assert CpuSet(members).to_mask() == text


@given(any_sets, st.integers(0, 30))
def test_mask_round_trip_any_word_count(items, extra_words):
    """A kernel mask with any number of leading zero words parses to the set it encodes, and
    formatting gives the shortest form, which parses back to the same set."""
    s = CpuSet(items)
    needed = max(1, (s.last() + 32) // 32)
    text = kernel_mask(items, needed + extra_words)
    assert CpuSet.parse_mask(text) == s
    short = s.to_mask()
    assert short == kernel_mask(items, needed)
    assert all(len(w) == 8 for w in short.split(","))
    assert CpuSet.parse_mask(short) == s
    assert CpuSet.parse(s.to_list()) == CpuSet.parse_mask(short)


@pytest.mark.parametrize("bad", ["zz", "ff,,00000000", "ff,", ",ff", "0xg", "ff 00", "-1", "0x", "ff;00"])
def test_parse_mask_rejects_malformed(bad):
    with pytest.raises(ParseError) as err:
        CpuSet.parse_mask(bad)
    assert bad.strip() in str(err.value)


# ---- set algebra against Python sets -----------------------------------------------------


@settings(max_examples=200)
@given(any_sets, any_sets)
def test_algebra_matches_python_sets(a, b):
    x, y = CpuSet(a), CpuSet(b)
    assert set(x | y) == a | b
    assert set(x & y) == a & b
    assert set(x - y) == a - b
    assert set(x ^ y) == a ^ b
    assert x.issubset(y) == (a <= b) == (x <= y)
    assert x.issuperset(y) == (a >= b) == (x >= y)
    assert (x < y) == (a < b)
    assert (x > y) == (a > b)
    assert x.intersects(y) == bool(a & b)
    assert (x == y) == (a == b)
    # results are sorted iterations
    assert list(x | y) == sorted(a | b)


@given(any_sets)
def test_weight_first_last_contains(items):
    s = CpuSet(items)
    assert s.weight() == len(s) == len(items)
    assert bool(s) == bool(items)
    assert s.first() == (min(items) if items else -1)
    assert s.last() == (max(items) if items else -1)
    for i in list(items)[:10]:
        assert i in s
    assert -1 not in s
    assert (max(items, default=0) + 1) not in s
    assert "0" not in s


@given(st.lists(any_sets, max_size=6))
def test_union_all(sets):
    assert set(union_all(CpuSet(s) for s in sets)) == set().union(*sets)


# Sets reaching past 1024, where ranges() reads the mask as bytes from the start or after a few runs,
# or, for a few runs high in the mask (one process's CPUs on a big machine), after skipping the zeros.
wide_sets = st.one_of(
    st.builds(frozenset.union, id_sets, st.frozensets(st.integers(1000, 5000), max_size=20)),
    dense_sets.map(lambda s: frozenset(i + 1020 for i in s)),
    dense_sets.map(lambda s: frozenset(i + 16000 for i in s)),
    st.builds(frozenset.union, dense_sets.map(lambda s: frozenset(i + 3000 for i in s)),
              st.frozensets(st.integers(3000, 9000), max_size=6)))


@given(wide_sets)
def test_ranges_of_wide_sets(items):
    assert CpuSet(items).to_list() == reference_cpulist(items)
    assert [x for lo, hi in CpuSet(items).ranges() for x in range(lo, hi + 1)] == sorted(items)


def test_range_and_ranges():
    assert CpuSet.range(2, 5) == CpuSet.parse("2-5")
    assert CpuSet.range(5, 2) == EMPTY
    assert list(CpuSet.parse("0-3,8,10-11").ranges()) == [(0, 3), (8, 8), (10, 11)]
    assert list(CpuSet.parse("16352-16383").ranges()) == [(16352, 16383)]
    assert list(CpuSet.parse("9000-9031,16352-16383").ranges()) == [(9000, 9031), (16352, 16383)]


def test_negative_ids_are_refused():
    with pytest.raises(ParseError, match="-3"):
        CpuSet([1, -3])
    with pytest.raises(ParseError):
        CpuSet.from_mask(-1)


# ---- value semantics ---------------------------------------------------------------------


def test_immutable():
    s = CpuSet([1, 2])
    with pytest.raises(AttributeError):
        s._mask = 0
    with pytest.raises(AttributeError):
        s.extra = 1
    with pytest.raises(AttributeError):
        del s._mask
    t = s | CpuSet([3])
    assert s == CpuSet([1, 2]) and t == CpuSet([1, 2, 3])  # operators return new sets


@given(any_sets)
def test_hash_and_equality(items):
    a, b = CpuSet(items), CpuSet.parse(reference_cpulist(items))
    assert a == b and hash(a) == hash(b)
    assert len({a, b, CpuSet(sorted(items, reverse=True))}) == 1
    assert {a: 1}[b] == 1
    assert a != set(items)  # a CpuSet is not equal to a plain set, however alike


def test_distinct_sets_are_distinct_keys():
    keys = {CpuSet.parse(t) for t in ["", "0", "1", "0-1", "0,2", "64"]}
    assert len(keys) == 6


@given(any_sets)
def test_pickle_round_trip(items):
    s = CpuSet(items)
    assert pickle.loads(pickle.dumps(s)) == s


# ---- bounds and msrun's spelling -----------------------------------------------------------


@pytest.mark.parametrize("text, members", [("0-2, 5", [0, 1, 2, 5]), (" 5-6,\t4 ", [4, 5, 6]), ("1 2", [12]),
                                           ("", []), ("  ", []), ("007", [7])])
def test_parse_msrun_removes_whitespace_first(text, members):
    # msrun's _expand_ranges removes every whitespace character before splitting ("1 2" is 12)
    assert list(CpuSet.parse(text, msrun=True)) == members


@pytest.mark.parametrize("bad, message", [
    ("3-1", "CPU range '3-1' start should not exceed end."),
    ("1,,2", "CPU range '1,,2' is invalid due to empty segment."),
    ("1,", "CPU range '1,' is invalid due to empty segment."),
    ("0,a-2", "CPU range 'a-2' is invalid."),
    ("-1", "CPU range '-1' is invalid."),
    ("1-2-3", "CPU range '1-2-3' is invalid."),
    ("\u00b2", "CPU range '\u00b2' is invalid."),  # SUPERSCRIPT TWO: str.isdigit() is True, int() fails
    ("\u0661", "CPU range '\u0661' is invalid."),  # ARABIC-INDIC DIGIT ONE: int() reads 1
    ("\uff10", "CPU range '\uff10' is invalid."),  # FULLWIDTH DIGIT ZERO
    ("0-99999999", f"CPU range '0-99999999' is invalid: ids above {MAX_ID} are not supported."),
    ("1-9223372036854775808", f"CPU range '1-9223372036854775808' is invalid: ids above {MAX_ID} are not supported."),
])
def test_parse_msrun_messages(bad, message):
    with pytest.raises(ParseError) as err:
        CpuSet.parse(bad, msrun=True)
    assert str(err.value) == message


def test_ids_are_bounded_everywhere():
    assert CpuSet([MAX_ID]).last() == MAX_ID
    for make in (lambda: CpuSet([MAX_ID + 1]), lambda: CpuSet([10 ** 30]), lambda: CpuSet.from_mask(1 << (MAX_ID + 1)),
                 lambda: CpuSet.parse_mask("1" + "0" * ((MAX_ID + 1) // 4)),
                 lambda: CpuSet.parse_mask("1," + ",".join(["00000000"] * ((MAX_ID + 1) // 32)))):
        with pytest.raises(ParseError):
            make()
    assert CpuSet.parse_mask("0" * 100_000 + "1") == CpuSet([0])  # leading zero words cost nothing


def test_long_messages_are_cut():
    with pytest.raises(ParseError) as err:
        CpuSet.parse("x" * 1_000_000)
    assert len(str(err.value)) < 300 and "1000000 characters" in str(err.value)


@pytest.mark.parametrize("text", [
    "0-1048575," * 50_000 + "0",  # every range as wide as allowed: merged, each byte written once
    ",".join(str(MAX_ID - i) for i in range(0, 200_000, 2)),  # many runs near the top, descending
    ",".join(["1048575"] * 200_000),
    "9" * 1_000_000,  # one long number: refused before int() converts it
])
def test_time_is_linear_in_the_text(text):
    """Hang protection only (a generous bound); benchmarks/ measures the speed."""
    import time

    for parse in (CpuSet.parse, parse_msrun):
        start = time.monotonic()
        try:
            parse(text)
        except ParseError:
            pass
        assert time.monotonic() - start < 5.0


@given(st.lists(st.tuples(st.integers(0, MAX_ID), st.integers(0, 5000)), min_size=33, max_size=80))
def test_many_runs_build_the_same_mask_as_few(ranges):
    """Many runs, sorted and merged: the same mask as ORing each run."""
    runs = [(lo, min(lo + n, MAX_ID)) for lo, n in ranges]
    text = ",".join(f"{lo}-{hi}" for lo, hi in runs)
    expected = 0
    for lo, hi in runs:
        expected |= ((1 << (hi - lo + 1)) - 1) << lo
    assert CpuSet.parse(text).mask == expected


def test_ascii_seconds_reads_plain_decimals_only():
    from topo.numbers import MAX_SECONDS, ascii_seconds

    assert [ascii_seconds(t) for t in ("0", "5", "0.25", "30.000000001", str(MAX_SECONDS))] == [
        0.0, 5.0, 0.25, 30.000000001, float(MAX_SECONDS)]
    # float() reads every one of these
    for odd in ("\u0661", "\uff11", "1_0", "1e3", "inf", "nan", "-1", "+1", " 1", "1\n", "1.", ".5",
                "0.0000000001", str(MAX_SECONDS + 1), "9" * 5000):
        assert ascii_seconds(odd) is None, odd
    assert ascii_seconds("2.5", most=2) is None
