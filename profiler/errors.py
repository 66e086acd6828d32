"""The error hierarchy (core layer, shared by every layer above); the CLI catches it once and prints one line.

Each class carries a distinct exit code so scripts can tell failures apart.
"""

from __future__ import annotations


class ProfilerError(Exception):
    """Base of every error the tool reports as a one-line message."""

    exit_code = 1


class UsageError(ProfilerError):
    """The command line asks for something that cannot be done as asked."""

    exit_code = 2


class NotYetAvailable(ProfilerError):
    """A verb whose engine lands later."""

    exit_code = 2


class TargetError(ProfilerError):
    """No such process, it is gone, or it cannot be inspected."""

    exit_code = 3


class BundleError(ProfilerError):
    """A capture bundle is missing, truncated, foreign, unsafe or too new."""

    exit_code = 4


class CapabilityError(ProfilerError):
    """The host cannot capture what was asked (perf missing, no permission, no tracefs)."""

    exit_code = 5


class CaptureIncomplete(ProfilerError):
    """The capture finished but is partial; the bundle was kept and says why."""

    exit_code = 6


class InputError(ProfilerError):
    """An input file is not in a format we read, or is corrupted."""

    exit_code = 7


class OutputExists(ProfilerError):
    """Refusing to overwrite an existing output without --force."""

    exit_code = 8


class OutputError(ProfilerError):
    """The output cannot be written: a missing directory, a directory, read-only, disk full."""

    exit_code = 9


class Interrupted(ProfilerError):
    """Ctrl-C, SIGTERM or SIGHUP; whatever was captured is kept and marked partial. The exit code
    is the shell's for that signal: 128 + its number (130, 143, 129)."""

    exit_code = 130

    def __init__(self, message: str = "interrupted", signum: int = 2) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum

