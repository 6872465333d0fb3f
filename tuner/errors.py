"""Errors a user can cause and fix. The CLI prints their message on one line and exits 2."""


class TunerError(Exception):
    """A user error: bad input, missing data, unreachable cluster. The message names the bad
    value and what is accepted; no traceback is shown for it."""


class DataError(TunerError):
    """The data directory or one of its files cannot be used (missing, empty, fails to decode).
    The message names the path."""


class SpaceError(TunerError):
    """A search-space YAML file is malformed or describes an impossible range."""
