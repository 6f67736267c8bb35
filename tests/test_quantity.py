from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.api.quantity import (
    QuantityError,
    format_quantity,
    int_value,
    is_integer,
    milli_value,
    parse_bytes,
    parse_cpu_milli,
    parse_quantity,
)

VALID = [
    ("500m", Fraction(1, 2)),
    ("1", Fraction(1)),
    ("0", Fraction(0)),
    ("007", Fraction(7)),
    ("1e3", Fraction(1000)),
    ("1E3", Fraction(1000)),
    ("1.5E-2", Fraction(3, 200)),
    ("2e+2", Fraction(200)),
    ("1E", Fraction(10**18)),  # a bare E is the exa suffix, not an exponent
    ("10Gi", Fraction(10 * 2**30)),
    ("1.5Gi", Fraction(3 * 2**29)),
    ("1Ki", Fraction(1024)),
    ("2Ei", Fraction(2 * 2**60)),
    ("100M", Fraction(10**8)),
    ("1k", Fraction(1000)),
    ("3P", Fraction(3 * 10**15)),
    ("0.1", Fraction(1, 10)),
    ("-1", Fraction(-1)),
    ("+2", Fraction(2)),
    ("-500m", Fraction(-1, 2)),
    ("5n", Fraction(5, 10**9)),
    ("7u", Fraction(7, 10**6)),
    ("1.0", Fraction(1)),
    (".5", Fraction(1, 2)),
    ("5.", Fraction(5)),
    ("-.5Gi", Fraction(-(2**29))),
    (" 2Gi ", Fraction(2 * 2**30)),  # the API server trims JSON values too
]

INVALID = [
    "",
    "   ",
    ".",
    "-",
    "+",
    "m",
    "Gi",
    "1.2.3",
    "10GB",
    "1K",  # kilo is lower-case k
    "1KiB",
    "0x10",
    "++1",
    "+-1",
    "1 Gi",
    "1e",
    "1e1.5",
    "e3",
    "1Gi2",
    "١",  # a non-ASCII digit
    "1e99999",
    "nan",
    "inf",
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_parse_valid(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", INVALID)
def test_parse_invalid(text: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    message = str(info.value)
    assert repr(text) in message
    assert "e.g. 500m, 2, 10Gi, 1e3" in message


def test_a_text_parsed_again_gives_the_same_answer_and_an_invalid_one_raises_each_time() -> None:
    # texts are memoised (pods of one template repeat them): the memo must not change an answer
    assert parse_quantity(" 1536Mi") == parse_quantity(" 1536Mi") == Fraction(1536 * 2**20)
    for _ in range(2):
        with pytest.raises(QuantityError, match="unknown suffix"):
            parse_quantity("3GB")


def test_error_messages_say_what_is_wrong() -> None:
    with pytest.raises(QuantityError, match="spaces"):
        parse_quantity("1 Gi")
    with pytest.raises(QuantityError, match="unknown suffix 'GB'"):
        parse_quantity("10GB")
    with pytest.raises(QuantityError, match="hexadecimal"):
        parse_quantity("0x10")
    with pytest.raises(QuantityError, match="empty"):
        parse_quantity("")


def test_numbers() -> None:
    assert parse_quantity(3) == 3
    assert parse_quantity(-2) == -2
    assert parse_quantity(0.1) == Fraction(1, 10)  # via repr, not the binary float
    assert parse_quantity(1e-05) == Fraction(1, 100000)
    assert parse_quantity(2.5e20) == Fraction(25 * 10**19)
    for bad in (float("nan"), float("inf"), float("-inf"), True, False, None, [1], b"1"):
        with pytest.raises(QuantityError):
            parse_quantity(bad)  # type: ignore[arg-type]


def test_rounding_goes_up() -> None:
    assert milli_value(Fraction(1, 3)) == 334
    assert milli_value(Fraction(1, 2)) == 500
    assert milli_value(parse_quantity("1n")) == 1
    assert int_value(Fraction(1, 3)) == 1
    assert int_value(Fraction(2)) == 2
    assert int_value(Fraction(-3, 2)) == -1
    assert parse_cpu_milli("250m") == 250
    assert parse_cpu_milli("1.5") == 1500
    assert parse_cpu_milli(2) == 2000
    assert parse_cpu_milli("0.0001") == 1
    assert parse_bytes("1Gi") == 2**30
    assert parse_bytes("1.5k") == 1500
    assert parse_bytes("0.5") == 1
    assert parse_bytes("129e6") == 129_000_000


def test_is_integer() -> None:
    assert is_integer(parse_quantity("2"))
    assert is_integer(parse_quantity("2000m"))
    assert not is_integer(parse_quantity("500m"))


@pytest.mark.parametrize(
    ("q", "binary", "expected"),
    [
        (Fraction(4), None, "4"),
        (Fraction(0), None, "0"),
        (Fraction(1, 2), None, "500m"),
        (Fraction(3, 2), None, "1500m"),
        (Fraction(-1, 4), None, "-250m"),
        (Fraction(1, 10**6), None, "1u"),
        (Fraction(5, 10**9), None, "5n"),
        (Fraction(10 * 2**30), None, "10Gi"),
        (Fraction(10 * 2**30), True, "10Gi"),
        (Fraction(10 * 2**30), False, "10737418240"),
        (Fraction(3 * 2**29), None, "1536Mi"),
        (Fraction(2**60), None, "1Ei"),
        (Fraction(1024), None, "1024"),  # below 1Mi: plain, so 1024 CPUs is not "1Ki"
        (Fraction(1024), True, "1Ki"),
        (Fraction(1000), None, "1000"),
        (Fraction(1, 3), None, "333333334n"),  # finer than nano: rounded up, like Kubernetes
    ],
)
def test_format(q: Fraction, binary: bool | None, expected: str) -> None:
    assert format_quantity(q, binary=binary) == expected


@given(
    st.integers(min_value=-(10**24), max_value=10**24),
    st.sampled_from([1, 10, 100, 1000]),
    st.sampled_from([None, True, False]),
)
def test_format_round_trips(numerator: int, denominator: int, binary: bool | None) -> None:
    q = Fraction(numerator, denominator)
    assert parse_quantity(format_quantity(q, binary=binary)) == q


@given(
    st.integers(min_value=-(2**20), max_value=2**20),
    st.integers(min_value=0, max_value=70),
    st.sampled_from([None, True]),
)
def test_format_round_trips_binary_multiples(k: int, shift: int, binary: bool | None) -> None:
    q = Fraction(k * 2**shift)
    text = format_quantity(q, binary=binary)
    assert parse_quantity(text) == q
    assert len(text) <= len(str(q.numerator)) + 1  # a suffix never makes it longer than plain digits


@given(
    st.sampled_from(["", "-", "+"]),
    st.integers(min_value=0, max_value=10**12),
    st.integers(min_value=0, max_value=10**6 - 1),
    st.sampled_from(["", "m", "k", "Ki", "Mi", "Gi", "G", "e3", "e-2", "E6"]),
)
def test_parse_matches_decimal_arithmetic(sign: str, whole: int, frac: int, suffix: str) -> None:
    text = f"{sign}{whole}.{frac:06d}{suffix}"
    factor = {
        "": Fraction(1),
        "m": Fraction(1, 1000),
        "k": Fraction(1000),
        "Ki": Fraction(2**10),
        "Mi": Fraction(2**20),
        "Gi": Fraction(2**30),
        "G": Fraction(10**9),
        "e3": Fraction(1000),
        "e-2": Fraction(1, 100),
        "E6": Fraction(10**6),
    }[suffix]
    expected = (whole + Fraction(frac, 10**6)) * factor
    assert parse_quantity(text) == (-expected if sign == "-" else expected)
