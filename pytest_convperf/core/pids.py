"""Whether a process of this host is still running: the one check behind the crash records
(``inflight``) and the A/B worktrees' owners (``revisions``). No plugin imports."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host; another user's process (``EPERM``) counts as alive."""
    try:
        os.kill(pid, 0)  # signal 0: existence and permission checked, nothing sent
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
