"""perf.data through `perf script` run as a child: the fields-then-default ladder, the 1 MiB pipe,
perf's errors as one line; and block events read from perf.data directly (a real recording)."""

from __future__ import annotations

import fcntl
import gzip
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from profiler.cli import main
from profiler.errors import CapabilityError, InputError
from profiler.inputs import perfdata, perfdata_blocks
from profiler.inputs.blocktrace import CommTable
from tests.conftest import ROOT, have_perf, is_root, requires_perf, requires_root

SAMPLES = ROOT / "samples"
F_GETPIPE_SZ = 1032


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cpu-clock samples with call chains of a Python process we start ourselves."""
    if not (is_root() and have_perf()):
        pytest.skip("needs root and perf")
    data = tmp_path_factory.mktemp("perfdata") / "perf.data"
    busy = "import time\nt=time.time()+0.5\nwhile time.time()<t: sum(i*i for i in range(500))\n"
    rec = subprocess.run(["perf", "record", "-q", "-F", "499", "-g", "-o", str(data), "--", sys.executable, "-c", busy],
                         capture_output=True, timeout=60, check=False)
    if rec.returncode != 0:
        pytest.skip(f"perf record cannot run here: {rec.stderr.decode(errors='replace').strip()[-200:]}")
    return data


def _read(stream: IO[bytes]) -> tuple[bytes, int]:
    return stream.read(), fcntl.fcntl(stream.fileno(), F_GETPIPE_SZ)


@pytest.mark.privileged
@requires_root
@requires_perf
def test_fields_first_then_perfs_defaults(recording: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFILER_SYMBOLIZER", "perf")  # perf script itself (the direct path has no pipe)
    default = subprocess.run(["perf", "script", "-i", str(recording)], capture_output=True, timeout=60, check=True).stdout
    out, pipe = perfdata.read_perf_script(recording, _read, "comm,tid,time")
    assert out and out != default and pipe == perfdata.PIPE_SIZE
    # a field perf does not know: refused before any output, so perf's default fields are used
    out, _ = perfdata.read_perf_script(recording, _read, "comm,no_such_field")
    assert out == default


@pytest.mark.privileged
@requires_root
@requires_perf
def test_perf_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.data"
    bad.write_bytes(b"PERFILE2" + b"\x00" * 200)
    with pytest.raises(InputError, match="perf script failed on"):
        perfdata.read_perf_script(bad, _read, "comm")
    assert main(["flamegraph", str(bad)]) == 7
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "perf script failed" in err
    monkeypatch.setenv("PATH", str(tmp_path))  # no perf on it
    with pytest.raises(CapabilityError, match="perf is not installed"):
        perfdata.read_perf_script(bad, _read)
    assert main(["flamegraph", str(bad)]) == 5


def test_block_events_read_directly_come_in_time_order(tmp_path: Path) -> None:
    data = tmp_path / "loop.perf.data"
    data.write_bytes(gzip.decompress((SAMPLES / "block" / "loop-fio.perf.data.gz").read_bytes()))
    ev, lost = perfdata_blocks.read_block_events(data, CommTable())
    assert len(ev) > 0 and lost == 0 and (ev["t"][1:] >= ev["t"][:-1]).all()
    with pytest.raises(perfdata_blocks.PerfDataUnsupported):
        perfdata_blocks.read_block_events(SAMPLES / "block" / "merges.txt")
