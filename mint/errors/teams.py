"""The errors of contracts kept per team and of proposals (issue 37): part of `mint.errors`,
which re-exports them."""

from __future__ import annotations

from mint.errors import MintError, NotFastForward


class ContractConflict(MintError):
    """A contract's name and version arrived with other content than the receiver records
    under them: a version, once recorded, never changes (an admin adds a new one)."""

    def __init__(self, name: str, version: int, here: str, sent: str, lines: list | None = None):
        scope = f"lines {', '.join(lines)}" if lines else "every line"  # the scope both share
        super().__init__(
            f"contract {name} v{version} (for {scope}) differs: the receiving repository has "
            f"{here[:12]}, the one sent is {sent[:12]}"
        )
        self.name, self.version, self.here, self.sent = name, version, here, sent
        self.lines = lines


class ContractAmbiguous(MintError, LookupError):
    """Contracts of one name are kept for several scopes (two teams' `production`), and what
    asked for one did not say which: the line it is for picks it."""

    def __init__(self, name: str, scopes: list[list[str]], line: str | None = None):
        shown = "; ".join(", ".join(g) if g else "every line" for g in scopes)
        where = f" that covers {line}" if line else ""
        super().__init__(
            f"there are {len(scopes)} contracts named {name}{where and ', none alone'}"
            f"{where} (for {shown})"
        )
        self.name, self.scopes, self.line = name, scopes, line


class ProposalStale(NotFastForward):
    """A proposal is merged by a fast-forward only: the line moved since it was proposed."""

    def __init__(self, line: str, number: int, head: str, new: str):
        MintError.__init__(
            self,
            f"proposal {number} of {line} was made on another head: the line is at "
            f"{head[:12]}, and {new[:12]} does not descend from it",
        )
        self.line, self.number, self.head, self.new = line, number, head, new


class ProposalClosed(MintError):
    """A proposal that is merged or closed is merged or closed again."""

    def __init__(self, line: str, number: int, status: str):
        super().__init__(f"proposal {number} of {line} is {status}")
        self.line, self.number, self.status = line, number, status


class NothingToPropose(MintError):
    """A proposal whose content is the line's head: it would change nothing."""

    def __init__(self, line: str):
        super().__init__(f"nothing to propose: the content is {line}'s head already")
        self.line = line
