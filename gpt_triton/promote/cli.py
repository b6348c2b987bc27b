"""``gpt-triton verify REPO``: signatures of every version, and whether each is valid on this machine.

Exit codes: 0 all signed and valid here; 1 signatures fine but some version must be rebuilt or re-tuned
(unless --allow-drift); 2 a tampered, missing or unsigned file, or a usage error (named on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpt_triton.core.errors import GptTritonError

_VERDICT_TEXT = {"valid": "valid here", "rebuild": "must be rebuilt", "retune": "should be re-tuned"}
_VERDICT_STYLE = {"valid": "green", "rebuild": "red", "retune": "yellow"}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "verify",
        help="verify signatures and environment drift of a production model repository",
        description="Exit 0 only when every version's files match their signatures and each is valid here.",
    )
    parser.add_argument("repository", type=Path, help="the production Triton model repository")
    parser.add_argument("--model", help="only this model (default: every model in the repository)")
    parser.add_argument("--signing-key-file", help="HMAC secret (hex or raw) or Ed25519 public key (PEM); default: $GPT_TRITON_SIGNING_KEY or the file in $GPT_TRITON_SIGNING_KEY_FILE")
    parser.add_argument("--allow-drift", action="store_true", help="exit 0 even when a version must be rebuilt or re-tuned here")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Heavy imports (rich, pydantic, protobuf) only when the command runs.
    from rich.console import Console
    from rich.table import Table

    from gpt_triton.promote.signing import load_signing_key
    from gpt_triton.promote.verify import verify_repository

    key = load_signing_key(args.signing_key_file)
    if not key:
        raise GptTritonError("no signing key: set GPT_TRITON_SIGNING_KEY or pass --signing-key-file")
    checks = verify_repository(args.repository, args.model, key)

    table = Table(title=f"gpt-triton verify {args.repository}")
    for column in ("model", "version", "runtime", "signatures", "environment", "reasons"):
        table.add_column(column, overflow="fold")
    for check in checks:
        status = check.verdict.status
        table.add_row(
            check.model,
            str(check.version),
            check.runtime,
            "[green]ok[/green]" if check.signed_ok else f"[red]FAILED[/red] {check.signature_error}",
            f"[{_VERDICT_STYLE[status]}]{_VERDICT_TEXT[status]}[/{_VERDICT_STYLE[status]}]",
            "; ".join(check.verdict.reasons) or "-",
        )
    Console(width=160).print(table)

    failed = [c for c in checks if not c.signed_ok]
    if failed:
        raise GptTritonError(str(failed[0].signature_error))
    drifted = [c for c in checks if c.verdict.status != "valid"]
    if drifted and not args.allow_drift:
        first = drifted[0]
        print(
            f"error: {len(drifted)} version(s) not valid here; first {first.model}/{first.version} "
            f"{_VERDICT_TEXT[first.verdict.status]}: {first.verdict.reasons[0]} (pass --allow-drift to accept)",
            file=sys.stderr,
        )
        return 1
    return 0
