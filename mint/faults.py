"""Named crash points, for tests that kill a process at an exact step.

`crash_point("commit.after-blobs")` kills the process with SIGKILL when MINT_CRASH_AT names
that point; otherwise it does nothing. The variable is read when the point is reached, so a
test selects the step by starting a process with it set: no sleeping and hoping.
"""

from __future__ import annotations

import os
import signal


def crash_point(name: str) -> None:
    if os.environ.get("MINT_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
