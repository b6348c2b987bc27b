"""User-facing errors and the process exit codes.

Every problem caused by the user's input (a missing file, a corrupt model, a bad spec, a tampered artifact)
is raised as :class:`GptTritonError` with a one-line message that names the problem and, where possible, how
to fix it. A problem that may pass if the same command is run again (an unreachable server, a held lock)
is a :class:`TransientError`. The CLI prints ``error: <message>`` and exits with the error's code.

Exit codes are a contract with scripts and with the Kubernetes Job's ``podFailurePolicy``
(``k8s/`` and the chart match on them): only :data:`EXIT_TRANSIENT` is worth a retry.
"""

from __future__ import annotations

EXIT_OK = 0  # tuned; the winner was promoted (or promotion was not asked for)
EXIT_NO_WINNER = 1  # the run finished but no candidate passed held-out acceptance; nothing promoted
EXIT_BAD_INPUT = 2  # bad model, spec, shapes, reference, repository or artifact: fix the input, do not retry
EXIT_TRANSIENT = 3  # server unreachable, lock held, node trouble: the same command may pass when retried
EXIT_INTERRUPTED = 130  # SIGINT / SIGTERM: unwound and cleaned up

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "tuned and promoted (or --no-promote)",
    EXIT_NO_WINNER: "no candidate passed held-out acceptance; nothing promoted",
    EXIT_BAD_INPUT: "bad input (model, spec, shapes, reference, repository, tampered artifact)",
    EXIT_TRANSIENT: "transient failure (Triton unreachable or died mid-measurement, promotion lock held); retry",
    EXIT_INTERRUPTED: "interrupted",
}


def exit_codes_help() -> str:
    """The exit-code table as one paragraph for ``--help`` epilogues."""
    return "exit codes: " + "; ".join(f"{code} {text}" for code, text in EXIT_CODES.items())


class GptTritonError(Exception):
    """A problem with the user's input or environment, reported as one line with exit code 2."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str) -> None:
        # Messages are single lines by contract: fold any newline a library put in.
        super().__init__(" ".join(message.split()))


class TransientError(GptTritonError):
    """A failure that may pass on retry (server unreachable, lock held): exit code 3."""

    exit_code = EXIT_TRANSIENT


class ServerDiedError(TransientError):
    """The Triton this run started died while a stage measured on it (exit code 3).

    Its requests then fail with "Socket closed", which used to fail the candidate being measured (and every
    one after it) or, in the re-measure, end the run as bad input (exit 2, "do not retry"). Neither is
    what happened: on 2026-12-06 a virtual-machine snapshot of the tuning machine took the python
    backend down mid re-measure (a boost::interprocess lock_exception after the pause). A Job retries exit
    3; the message names the model that was being measured, so a model that kills the server each time
    shows as the same name again."""
