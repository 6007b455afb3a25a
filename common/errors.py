"""Errors of use: a bad flag, data spec, file or missing package, found before any work is lost.

`common.run.cli` prints such an error as one line naming what was wrong and exits 1, without a traceback;
anything else is a bug and keeps its traceback. Each class is also the standard exception it stands for."""


class UsageError(Exception):
    """Base of the errors `cli` reports in one line."""


class BadSpec(UsageError, ValueError):
    """A flag value, data-set spec or data row that cannot be used."""


class MissingPath(UsageError, FileNotFoundError):
    """A file or folder named by a flag that does not exist."""


class Unavailable(UsageError, RuntimeError):
    """Something the run needs that this machine cannot provide (a hub data set offline, a package not installed)."""
