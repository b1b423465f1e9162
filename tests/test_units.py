import pytest

from lltui.core.monitor.throttle import reasons_from_mask
from lltui.core.units import bar, fmt_bytes, fmt_energy_mj, fmt_mib, parse_size


def test_fmt_bytes_and_mib():
    assert fmt_bytes(None) == "-"
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(1536 * 1024 * 1024) == "1.5 GiB"
    assert fmt_mib(15360 * 1024 * 1024) == "15360 MiB"


def test_energy_units():
    assert fmt_energy_mj(5_000) == "5 J"
    assert fmt_energy_mj(50_000_000) == "50.0 kJ"
    assert fmt_energy_mj(3_600_000_000) == "1.00 kWh"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("24GiB", 24 * 2**30),
        ("24G", 24 * 2**30),
        ("16000MiB", 16000 * 2**20),
        ("1.5gb", 1_500_000_000),
        ("42", 42),
    ],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "GiB", "abc", "-3G", "1e400GiB", "inf", "nan"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_bar_width_and_ends():
    assert bar(0.0, 10) == "░" * 10
    assert bar(1.0, 10) == "█" * 10
    assert len(bar(0.33, 10)) == 10
    assert bar(None, 4) == "░░░░"


def test_throttle_words_round_trip_and_unknown_bits():
    assert reasons_from_mask(0x4 | 0x40) == ("power cap", "hw thermal")
    assert reasons_from_mask(0x1000) == ("other (0x1000)",)
    assert reasons_from_mask(0) == ()


@pytest.mark.parametrize("text", ["1e30GiB", "2EiB", "9" * 30, "1e19"])
def test_sizes_past_any_memory_are_refused(text):
    with pytest.raises(ValueError):
        parse_size(text)
    assert parse_size("1024TiB") == 1024**5
