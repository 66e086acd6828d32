"""Untrusted names made safe to print (core layer: imports nothing of ours).

Thread names, function names, paths, host names and every other string that comes from a
capture (or from another machine's bundle) may hold anything but NUL: a thread can name itself
``"\\x1b]52;c;...\\x07"`` (an OSC sequence that writes the terminal's clipboard) or
``"<img src=x onerror=...>"``. Before such text reaches a terminal or a Markdown page:

- :func:`sanitize` (terminal text, error and warning lines): escape sequences (CSI, OSC, DCS,
  SOS, PM, APC, in their 7-bit and 8-bit forms) and every other C0/C1 control character and
  DEL become ``?``; with ``newlines=False`` (one line of a report), so do line breaks, so a
  name cannot forge a line of its own.
- :func:`markdown` (one Markdown cell or phrase): sanitized, then HTML's ``& < >`` become
  entities and Markdown's active characters are backslash-escaped, so a name renders as the
  text it is, never as markup, a link or an image.

The HTML report and the SVGs escape through Jinja2's autoescaping (and their scripts read
data through ``tojson``); JSON escapes control characters itself.
"""

from __future__ import annotations

import re

__all__ = ["markdown", "sanitize"]

# ESC [ ... final byte (CSI); ESC ] ... BEL or ST (OSC); ESC P/X/^/_ ... ST (DCS, SOS, PM, APC);
# the same introduced by their 8-bit C1 forms (0x9b, 0x9d, 0x90, 0x98, 0x9e, 0x9f); other ESC + one byte.
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -~]?"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_LINE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_MD_ACTIVE = re.compile(r"([\\`*_\[\]|#!~])")


def sanitize(text: str, *, newlines: bool = True) -> str:
    """``text`` with terminal escape sequences and control characters replaced by ``?`` (tabs
    kept; line breaks kept unless ``newlines=False``)."""
    if text.isprintable() or (newlines and text.replace("\n", "").replace("\t", "").isprintable()):
        return text  # the common case: nothing to do (str.isprintable is false for every control)
    text = _SEQUENCE.sub("?", text)
    return (_CONTROL if newlines else _CONTROL_LINE).sub("?", text)


def markdown(text: object) -> str:
    """One Markdown phrase or table cell holding untrusted text: no control characters, no line
    breaks, no HTML, no Markdown markup (rendered as the literal characters)."""
    s = sanitize(str(text), newlines=False).replace("\t", " ")
    s = _MD_ACTIVE.sub(r"\\\1", s)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
