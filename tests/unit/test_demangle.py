"""Rust demangling: real symbols from a binary we built, checked against binutils' c++filt."""

from __future__ import annotations

import pytest
from profiler.analyzers.stacks.demangle import demangle, demangle_legacy, demangle_v0

from tests.conftest import TESTS

DIR = TESTS / "data"
PAIRS = [
    ln.split("\t") for ln in (DIR / "rust-symbols.tsv").read_text().splitlines() if ln and not ln.startswith("#")
]


@pytest.mark.parametrize("mangled,expected", PAIRS, ids=range(len(PAIRS)))
def test_real_symbols(mangled: str, expected: str) -> None:
    assert demangle(mangled) == expected


def test_not_rust_is_left_alone() -> None:
    assert demangle("_ZN3foo3barEv") == "_ZN3foo3barEv"  # C++ with parameters
    assert demangle("_RNvCs_garbage") == "_RNvCs_garbage"
    assert demangle("main") == "main"
    assert demangle_v0("_R") is None
    assert demangle_legacy("_ZN3foo") is None


def test_v0_punycode_consts_and_suffix() -> None:
    assert demangle_v0("_RNvCs15kBYyAo9fc_7mycrate4main.llvm.123") == "mycrate::main"
    # from RFC 2603: punycode identifier "gödel"
    assert demangle_v0("_RNvCs15kBYyAo9fc_7mycrateu8gdel_5qa") == "mycrate::gödel"
    assert demangle_v0("_RINvCs15kBYyAo9fc_7mycrate1fKj9_E") == "mycrate::f::<9: usize>"
