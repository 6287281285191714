"""Property: a type → a random valid instance → its JSON → fed in random fragments gives the
same value and the same deltas, whatever the split, and the value converts back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamaclient._arguments.output import OutputDecoder
from llamaclient._types.typed import output_type
from tests.output.test_decoder import normal

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Address(msgspec.Struct):
    city: str
    lines: list[str]
    zip: int | None = None


class Person(msgspec.Struct):
    name: str
    age: int
    score: float
    active: bool
    address: Address
    friends: list[Address]
    tags: dict[str, list[int]]


_interesting = st.sampled_from(
    ['"', "\\", "/", "\n", "\t", "\x00", "\x1f", "é", "中", "\U0001f600", "{", "}", "[", "]",
     ",", ":", " ", '", "k": ', "\\u", "a"]
)  # fmt: skip
texts = st.lists(
    st.one_of(_interesting, st.text(st.characters(exclude_categories=["Cs"]), max_size=5)),
    max_size=8,
).map("".join)
addresses = st.builds(
    Address, texts, st.lists(texts, max_size=3), st.none() | st.integers(-(10**12), 10**12)
)
people = st.builds(
    Person,
    texts,
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    addresses,
    st.lists(addresses, max_size=3),
    st.dictionaries(texts, st.lists(st.integers(-1000, 1000), max_size=3), max_size=3),
)


def render(person: Person, style: int) -> str:
    plain = msgspec.to_builtins(person)
    if style == 0:
        return msgspec.json.encode(person).decode()
    if style == 1:
        return json.dumps(plain)
    return json.dumps(plain, indent=style - 1, ensure_ascii=style % 2 == 0)


def chop(raw: str, cuts: Sequence[int]) -> list[str]:
    points = sorted({c % (len(raw) + 1) for c in cuts})
    return [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]


def feed(fragments: Sequence[str]) -> tuple[list[Any], Any, bool]:
    decoder = OutputDecoder()
    deltas: list[Any] = []
    for fragment in fragments:
        deltas += decoder.feed(fragment)
    return deltas, decoder.partial(), decoder.finish()


def leaves(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[Any, Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in leaves(v, (*path, k))]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in leaves(v, (*path, i))]
    return [(path, value)]


@SETTINGS
@given(person=people, style=st.integers(0, 4), cuts=st.lists(st.integers(0, 10**6), max_size=12))
def test_any_split_gives_the_same_value_and_deltas(
    person: Person, style: int, cuts: list[int]
) -> None:
    raw = render(person, style)
    whole = feed([raw])
    split = feed(chop(raw, cuts))
    assert whole[2]
    assert split[2]
    assert split[1] == whole[1] == json.loads(raw)
    assert normal(split[0]) == normal(whole[0])
    assert output_type(Person).from_value(split[1]) == person
    # one done delta per leaf, in document order; a string's text is the string itself
    done = [(path, text) for path, text, _ in normal(split[0])]
    expected = leaves(json.loads(raw))
    assert [p for p, _ in done] == [p for p, _ in expected]
    for (_, text), (_, value) in zip(done, expected, strict=True):
        assert (text if isinstance(value, str) else json.loads(text)) == value


@SETTINGS
@given(person=people)
def test_char_by_char_equals_whole(person: Person) -> None:
    raw = render(person, 0)
    whole = feed([raw])
    by_char = feed(list(raw))
    assert normal(by_char[0]) == normal(whole[0])
    assert by_char[1] == whole[1]


jsonish = st.text(
    st.sampled_from([*'{}[]",: \n\\ut0123456789abcdefnlrsDE.-+', "\x01"]), max_size=60
)
garbage = st.one_of(
    st.text(max_size=80),
    jsonish,
    jsonish.map(lambda s: '{"a": ' + s),
    jsonish.map(lambda s: '{"a": [{"b": "' + s),
)


@settings(max_examples=500, deadline=None)
@given(raw=garbage, cuts=st.lists(st.integers(0, 10**6), max_size=8))
def test_any_input_never_raises_and_ignores_chunking(raw: str, cuts: list[int]) -> None:
    whole = feed([raw])
    split = feed(chop(raw, cuts))
    assert split[2] == whole[2]
    if whole[2]:  # accepted: exactly what json reads
        assert whole[1] == json.loads(raw)
        assert split[1] == whole[1]
        assert normal(split[0]) == normal(whole[0])
