"""Command line: ``gpt-triton <command>``. Each command lives in its stage's module and registers here.

Convention: a command module exposes ``register(subparsers)`` that adds its parser and sets
``func=<callable(args) -> int>``. User errors are :class:`GptTritonError`: one line, exit codes in core.errors.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from gpt_triton import __version__
from gpt_triton.core.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, GptTritonError, exit_codes_help

# Modules that register commands, in help order. Imported lazily so `gpt-triton --help` is fast.
COMMAND_MODULES = [
    "gpt_triton.pipeline_cli",  # tune
    "gpt_triton.routes.cli",  # routes
    "gpt_triton.report.cli",  # report
    "gpt_triton.recheck_cli",  # recheck
    "gpt_triton.accuracy.cli",  # capture
    "gpt_triton.promote.cli",  # verify
    "gpt_triton.canary.cli",  # canary
    "gpt_triton.k8s.cli",  # k8s render|submit|watch|collect
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpt-triton", description="Global Performance Tuner for Triton Inference Server")
    parser.add_argument("--version", action="version", version=f"gpt-triton {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a command not written yet; the others still work
                continue
            raise
        module.register(sub)
    _add_exit_codes(parser)
    return parser


def _add_exit_codes(parser: argparse.ArgumentParser) -> None:
    """Every command's --help ends with the exit-code table (scripts and the Job's podFailurePolicy use it)."""
    parser.epilog = exit_codes_help() if not parser.epilog else f"{parser.epilog}\n\n{exit_codes_help()}"
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_exit_codes(child)


def _terminate_on_sigterm() -> None:
    """Kubernetes stops a pod with SIGTERM: unwind like Ctrl-C so embedded servers and temp files are cleaned."""
    import signal
    import threading

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None:  # the console entry point, not a test calling main([...])
        _terminate_on_sigterm()
    try:
        return int(args.func(args) or 0)
    except GptTritonError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:
        # A file this run writes (--out, a report, a repository) that the OS refused: the user's path, so
        # one line and bad input; our own code raising OSError past its own checks is still reported this way.
        print(f"error: {_os_error_text(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _os_error_text(exc: OSError) -> str:
    where = exc.filename if exc.filename is not None else ""
    other = f" -> {exc.filename2}" if exc.filename2 is not None else ""
    text = exc.strerror or str(exc) or type(exc).__name__
    return " ".join(f"cannot write or read {where}{other}: {text}; check the path and its permissions".split()) \
        if where else " ".join(f"{type(exc).__name__}: {text}".split())


if __name__ == "__main__":
    sys.exit(main())
