import pytest

from pympi_gpu.cli.counts import MAX_COUNT, CountError, parse_count


@pytest.mark.parametrize("text, value", [
    ("1e7", 10**7), ("10000000", 10**7), ("10_000_000", 10**7), ("2.5e9", 2_500_000_000),
    ("1E3", 1000), ("+42", 42), ("1", 1), (" 12 ", 12), ("1.0", 1), ("1.50e1", 15),
    ("9007199254740992", MAX_COUNT), ("1e+2", 100), (7, 7),
])
def test_good(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("text, words", [
    ("-5", "'-5' is negative"), ("-1e6", "is negative"), ("-0", "at least 1"), ("0", "at least 1"),
    ("1.5", "not a whole number"),
    ("nan", "not a whole number"), ("inf", "not a whole number"), ("1e30", "out of range"),
    ("abc", "not a whole number"), ("", "empty"), ("   ", "empty"), ("1e-3", "not a whole number"),
    ("1__0", "not a whole number"), ("_10", "not a whole number"), ("10_", "not a whole number"),
    ("0x10", "not a whole number"), ("1e99999999", "out of range"), ("9007199254740993", "out of range"),
    ("1,000", "not a whole number"), (True, "not a count"), (0, "at least 1"),
])
def test_bad(text, words):
    with pytest.raises(CountError, match=words):
        parse_count(text)


def test_bounds_are_parameters():
    assert parse_count("3", minimum=3, maximum=3) == 3
    with pytest.raises(CountError, match="at least 4"):
        parse_count("3", minimum=4)
