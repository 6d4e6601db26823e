"""The tooz driver's names (volcano.tooz): every tooz id keeps a Volcano name of its own."""

from __future__ import annotations

import pytest
import tooz

from volcano.tooz import decode, encode


class TestNames:
    @pytest.mark.parametrize("raw", [b"workers", b"c1e0f0b2-8d4e-4e0a-9f1e-2b3c4d5e6f70", "str-id"])
    def test_valid_names_are_kept(self, raw: bytes | str) -> None:
        """An id that is a valid Volcano name is used as it is (text as its UTF-8 bytes)."""
        name = encode(raw, 240)
        assert name == (raw.decode() if isinstance(raw, bytes) else raw)
        assert decode(name) == (raw if isinstance(raw, bytes) else raw.encode())

    @pytest.mark.parametrize(
        "raw", [b"a b", b"-x", b"\x00\xff", "é".encode(), b"0x.41", b"groups:w", b""]
    )
    def test_other_ids_are_written_in_hex_and_come_back(self, raw: bytes) -> None:
        """An id that is no valid name, or starts with a reserved prefix, is hex after `0x.`,
        so no two ids share a name and each comes back exactly."""
        name = encode(raw, 240)
        assert name.startswith("0x.")
        assert decode(name) == raw

    def test_ids_too_long_are_refused(self) -> None:
        """An id whose name would not fit is ToozError, naming the bound."""
        assert encode(b"m" * 200, 200) == "m" * 200
        with pytest.raises(tooz.ToozError, match="at most 200 characters"):
            encode(b"m" * 201, 200)
        with pytest.raises(tooz.ToozError, match="at most 200 characters"):
            encode(b"\x00" * 99, 200)  # 3 + 198 characters of hex
