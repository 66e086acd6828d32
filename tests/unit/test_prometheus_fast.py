"""The Prometheus parser's one-match path for usual sample lines against the careful reader it
stands in front of: on every line the fast path takes, both must give the same name, labels and
value; lines it leaves (escapes, blanks, exemplars, caps) must still be read or refused as before."""

from __future__ import annotations

import math
import random

from profiler.analyzers.server import prometheus as P


def _same(a: tuple[str, P.Labels, float], b: tuple[str, P.Labels, float]) -> bool:
    return a[:2] == b[:2] and (a[2] == b[2] or (math.isnan(a[2]) and math.isnan(b[2])))


def _careful(line: str) -> tuple[str, P.Labels, float] | str:
    try:
        return P.parse_sample(line)
    except P._Bad as exc:  # noqa: SLF001 - the careful reader's refusal is what the fast path must not hide
        return f"bad: {exc}"


PIECES = ["m", "tikv_x_bucket", "_:a", "9", "{", "}", '"', "\\", "=", ",", " ", "  ", "\t", "#", " # ", "le",
          '"0.5"', '"+Inf"', 'a="b"', 'le="1"', ",", "1", "-2.5e3", "NaN", "+Inf", "-Inf", "inf", "1_0", "0x1",
          "é", "\u00a0", "\u2003", "}", "{}", "x" * 201, '"' + "v" * (P.MAX_VALUE + 1) + '"', "1e400", "."]


def _random_line(rng: random.Random) -> str:
    if rng.random() < 0.5:  # a line shaped like a real one, then perhaps damaged
        labels = ",".join(f'{rng.choice(["a", "le", "type", "x" * rng.choice([1, 200, 201])])}="{rng.choice(["", "v", "0.5", "a b", "}", "#", "v" * rng.choice([1, 512, 513])])}"'
                          for _ in range(rng.choice([0, 1, 2, 32, 33])))
        line = f"{rng.choice(['m', 'n' * 200, 'n' * 201])}{{{labels}}} {rng.choice(['1', 'NaN', '-Inf', '2.5e-3', 'x'])}"
        if rng.random() < 0.3:
            line += rng.choice([" 1700000000000", " # {t=\"1\"} 2", " 1 2", "  3", "\t4", " ", ""])
        if rng.random() < 0.4:
            i = rng.randrange(len(line) + 1)
            line = line[:i] + rng.choice(PIECES) + line[i + rng.choice([0, 1]):]
        return line.strip()
    return "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 12))).strip()


def test_the_fast_path_agrees_with_the_careful_reader_on_random_lines() -> None:
    rng = random.Random(30)
    seen: P.Seen = {}  # kept across the lines, as across scrapes: a head seen before is not read again
    taken = refused = 0
    for _ in range(60_000):
        line = _random_line(rng)
        if not line or line[0] == "#":
            continue
        got = P._fast(line, seen)  # noqa: SLF001 - the path under test
        careful = _careful(line)
        if got is None:
            refused += 1
            continue
        taken += 1
        fast = (*got[0], got[1])
        assert not isinstance(careful, str), (line, careful)
        assert _same(fast, careful), (line, fast, careful)
    assert taken > 3_000 and refused > 3_000  # both paths were exercised (4,505 and 53,243 with this seed)


def test_a_whole_scrape_reads_the_same_through_either_path() -> None:
    rng = random.Random(8)
    lines = ["# TYPE m counter", 'm{a="b"} 1', 'm{a="b"} 2', "# EOF", 'x{a="1",a="2"} 3', 'y{le="0.1",a="z"} 4 5']
    lines += [_random_line(rng) for _ in range(5_000)]
    snap = P.parse_lines(lines)
    careful = P.Snapshot()  # the same lines through the careful reader alone
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        got = _careful(line)
        if isinstance(got, str):
            careful.bad(got[5:], lineno)
        else:
            careful.samples[got[:2]] = got[2]
    assert snap.errors == careful.errors and snap.examples == careful.examples
    assert snap.samples.keys() == careful.samples.keys()
    assert all(_same((*k, v), (*k, careful.samples[k])) for k, v in snap.samples.items())
    assert snap.samples[("x", (("a", "1"), ("a", "2")))] == 3  # a repeated label is kept, as before
    assert snap.samples[("y", (("a", "z"), ("le", "0.1")))] == 4  # labels sorted, the timestamp left


def test_usual_lines_take_the_fast_path_and_unusual_ones_do_not() -> None:
    seen: P.Seen = {}
    assert P._fast('tikv_x_bucket{type="get",le="0.005"} 12 1700000000000', seen) == (  # noqa: SLF001
        ("tikv_x_bucket", (("le", "0.005"), ("type", "get"))), 12.0)
    assert P._fast("go_goroutines 42", seen) == (("go_goroutines", ()), 42.0)  # noqa: SLF001
    assert list(seen) == ['tikv_x_bucket{type="get",le="0.005"}', "go_goroutines"]
    for line in ['m{a="q\\"q"} 1', 'm{a = "b"} 1', 'm{a="b"} 1 # {t="1"} 2', "m  1", "m\t1", 'm{a="b"}1',
                 "n" * (P.MAX_NAME + 1) + " 1", 'm{a="' + "v" * (P.MAX_VALUE + 1) + '"} 1', "m 1 2 3", "m x",
                 "m{" + ",".join(f'l{i}="v"' for i in range(P.MAX_LABELS + 1)) + "} 1"]:
        assert P._fast(line, seen) is None, line  # noqa: SLF001
    assert len(seen) == 2  # a line refused leaves nothing behind


def test_scrapes_read_with_one_seen_share_their_keys() -> None:
    seen: P.Seen = {}
    a = P.parse_lines(['m{a="b"} 1', "n 2"], seen)
    b = P.parse_lines(['m{a="b"} 3', "n 4", 'm{a="c"} 5'], seen)
    assert b.samples == {("m", (("a", "b"),)): 3, ("n", ()): 4, ("m", (("a", "c"),)): 5}
    ka, kb = list(a.samples), list(b.samples)
    assert ka[0] is kb[0] and ka[1] is kb[1]  # one tuple for both scrapes, not one each
    assert (a.lines, b.lines) == (2, 3) and P.parse_lines([]).lines == 0
