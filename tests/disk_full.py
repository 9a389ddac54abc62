"""A full disk, for the tests of what the plugin does when a write is refused."""

from __future__ import annotations

import errno
from typing import NoReturn


def no_space() -> OSError:
    """The error a write to a full disk raises (``ENOSPC``)."""
    return OSError(errno.ENOSPC, "No space left on device")


def refuse_write(*_args: object, **_kwargs: object) -> NoReturn:
    """A stand-in for a write function on a full disk: every call raises :func:`no_space`'s error."""
    raise no_space()
