"""User-facing errors.

Every problem caused by the user's input (a missing file, a corrupt model, a bad spec, an unreachable
server, a tampered artifact) is raised as :class:`GptTritonError` with a one-line message that names the
problem and, where possible, how to fix it. The CLI prints ``error: <message>`` and exits with code 2.
"""

from __future__ import annotations


class GptTritonError(Exception):
    """A problem with the user's input or environment, reported as one line with exit code 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # Messages are single lines by contract: fold any newline a library put in.
        super().__init__(" ".join(message.split()))
