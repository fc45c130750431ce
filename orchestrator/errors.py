"""The error a user's configuration raises: one line that names the key.

Its own module, below everything that validates a key (config, the search, the
providers' region checks), so that none of them imports another to raise it.
"""

from __future__ import annotations


class OrchestratorError(Exception):
    """What a user of the Python API (``orchestrator.api``) can be refused, in one line:
    every error below is one."""


class ConfigError(OrchestratorError):
    """A value a user gave is not allowed. Carries the key so the message names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class RunError(OrchestratorError):
    """A run cannot be done what was asked (there is no such run, it has ended, its
    controller died, its folder is damaged): the line says why and what to do instead."""

    def __init__(self, run_id: str | None, message: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunTimeout(RunError, TimeoutError):
    """A wait for a run ran out of time; the run goes on."""


# A run FAILED because the workload's own code raised (result.json's user_error): the
# same number the runtime driver exits with for it (recovery.detection.EXIT_USER_ERROR).
EXIT_USER_ERROR = 3

# A run stopped by Ctrl-C or SIGTERM (status INTERRUPTED): 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130


def printable(text: str) -> str:
    """Control characters escaped: text read from disk or a cluster must not drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def error(message: str) -> int:
    """A refused input: one line on stderr (control characters escaped), exit status 2."""
    import sys

    print(f"error: {printable(message)}", file=sys.stderr)
    return 2
