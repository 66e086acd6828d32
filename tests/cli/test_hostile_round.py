"""The hostile round of issue 27 (tests/hostile_round.py), one test per case.

Each case runs one verb as its own process on an input built for it (members cut, corrupt, of
the wrong type, FIFOs, devices, terabyte holes; cluster bundles with odd node directories;
names of HTML, escape sequences and forged lines; numbers no option holds) and fails on an
exit code the verb does not document, a traceback, more than one error line, an escape
sequence on stderr, a write outside the output, a peak over 500 MB or a hang.
`python -m tests.hostile_round` runs the same cases and prints them as a table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import hostile_round

CASES = {f"{c.kind}: {c.name}": c for c in hostile_round.cases()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_hostile_input_is_one_line_its_exit_code_and_nothing_else(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    try:
        res = hostile_round.run_case(case, tmp_path)
    except PermissionError as exc:  # mknod of a device needs root
        pytest.skip(f"cannot build the input here: {exc}")
    assert not res.problems, f"{name}: {'; '.join(res.problems)} (exit {res.code}, {res.rss_mb:.0f} MB): {res.err[-600:]}"
