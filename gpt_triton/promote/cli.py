"""``gpt-triton verify REPO``: signatures of every version, and whether each is valid on this machine.

Exit codes: 0 all signed and valid here; 1 signatures fine but some version must be rebuilt or re-tuned
(unless --allow-drift); 2 a tampered, missing or unsigned file, a TensorRT plan that drifted (built by another
TensorRT, on another GPU model or compute capability, or under another driver: --allow-drift does not cover
plans), or a usage error (named on stderr).

A plan is checked against the TensorRT of the serving Triton: ``--serving-image`` (looked up in
gpt_triton/data/tensorrt_support.json) or ``--tensorrt-version``; without either, this machine's ``tensorrt``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpt_triton.core.errors import GptTritonError

_VERDICT_TEXT = {"valid": "valid here", "rebuild": "must be rebuilt", "retune": "should be re-tuned",
                 "incompatible": "cannot run here"}
_VERDICT_STYLE = {"valid": "green", "rebuild": "red", "retune": "yellow", "incompatible": "red"}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "verify",
        help="verify signatures and environment drift of a production model repository",
        description="Exit 0 only when every version's files match their signatures and each is valid here.",
    )
    parser.add_argument("repository", type=Path, help="the production Triton model repository")
    parser.add_argument("--model", help="only this model (default: every model in the repository)")
    parser.add_argument("--signing-key-file", help="HMAC secret (hex or raw) or Ed25519 public key (PEM); default: $GPT_TRITON_SIGNING_KEY or the file in $GPT_TRITON_SIGNING_KEY_FILE")
    parser.add_argument("--allow-drift", action="store_true",
                        help="exit 0 even when a version must be rebuilt or re-tuned here (never for a plan that cannot run)")
    serving = parser.add_mutually_exclusive_group()
    serving.add_argument("--serving-image", help="the Triton image that serves the repository: its TensorRT (from the "
                         "support table) is what TensorRT plans are checked against")
    serving.add_argument("--tensorrt-version", help="the TensorRT version of the serving Triton (major.minor.patch[.build])")
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON on stdout (keys in README: versions, verdicts, exit_code)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Heavy imports (rich, pydantic, protobuf) only when the command runs.
    from rich.console import Console
    from rich.table import Table

    from gpt_triton.promote.signing import load_signing_key
    from gpt_triton.promote.verify import unsigned_versions, verify_repository
    from gpt_triton.tensorrt_support import tensorrt_for_image

    key = load_signing_key(args.signing_key_file)
    if not key:
        unsigned, total = unsigned_versions(args.repository, args.model)
        if unsigned and len(unsigned) == total:
            raise GptTritonError(
                f"all {total} version(s) in {args.repository} are unsigned (promoted without a signing key; first "
                f"{unsigned[0]}): nothing proves they are untampered; promote with GPT_TRITON_SIGNING_KEY set"
            )
        which = f" ({len(unsigned)} of {total} unsigned, first {unsigned[0]})" if unsigned else ""
        raise GptTritonError(f"no signing key: set GPT_TRITON_SIGNING_KEY or pass --signing-key-file to verify "
                             f"{args.repository}{which}")
    serving_tensorrt = args.tensorrt_version
    if args.serving_image:
        serving_tensorrt = tensorrt_for_image(args.serving_image)
        if serving_tensorrt is None:
            raise GptTritonError(f"the TensorRT of {args.serving_image} is unknown (not in the support table): pass "
                                 "--tensorrt-version instead (read it in the image: dpkg -l | grep libnvinfer)")
    checks = verify_repository(args.repository, args.model, key, serving_tensorrt)
    if args.json:
        return _print_json(args, checks)

    table = Table(title=f"gpt-triton verify {args.repository}")
    for column in ("model", "version", "runtime", "signatures", "environment", "reasons"):
        table.add_column(column, overflow="fold")
    for check in checks:
        status = check.verdict.status
        table.add_row(
            check.model,
            str(check.version),
            check.runtime,
            ("[green]ok[/green]" + "".join(f" [yellow]{note}[/yellow]" for note in check.notes))
            if check.signed_ok else f"[red]FAILED[/red] {check.signature_error}",
            f"[{_VERDICT_STYLE[status]}]{_VERDICT_TEXT[status]}[/{_VERDICT_STYLE[status]}]",
            "; ".join(check.verdict.reasons) or "-",
        )
    Console(width=160).print(table)
    return _judge(checks, args.allow_drift)


def _print_json(args: argparse.Namespace, checks: list[Any]) -> int:
    """The same verdict as the table's, as one JSON object; the error line still goes to stderr."""
    from gpt_triton.core.errors import EXIT_CODES

    try:
        code, error = _judge(checks, args.allow_drift), None
    except GptTritonError as exc:
        code, error = exc.exit_code, str(exc)
    print(json.dumps({
        "schema": "gpt-triton.verify/1", "repository": str(args.repository), "exit_code": code,
        "exit_meaning": EXIT_CODES.get(code, ""), "error": error,
        "versions": [{
            "model": c.model, "version": c.version, "path": str(c.path), "runtime": c.runtime,
            "signatures_ok": c.signed_ok, "signature_error": c.signature_error, "notes": list(c.notes),
            "verdict": c.verdict.status, "reasons": list(c.verdict.reasons),
        } for c in checks],
    }, indent=1), flush=True)
    if error is not None:
        raise GptTritonError(error)
    return code


def _judge(checks: list[Any], allow_drift: bool) -> int:
    """0 all valid; 1 drift --allow-drift would accept (said on stderr); GptTritonError for the rest."""
    failed = [c for c in checks if not c.signed_ok]
    if failed:
        raise GptTritonError(str(failed[0].signature_error))
    # A TensorRT plan that drifted at all (TensorRT, GPU, compute capability or driver) is refused: it loads
    # only where it was built, so --allow-drift (meant for CPU engines that still run) never covers it.
    refused = [c for c in checks
               if c.verdict.status == "incompatible" or (c.runtime == "tensorrt" and c.verdict.status != "valid")]
    if refused:
        first = refused[0]
        raise GptTritonError(
            f"{len(refused)} version(s) cannot run here; first {first.model}/{first.version} ({first.runtime}): "
            f"{first.verdict.reasons[0]} (--allow-drift does not cover this)")
    drifted = [c for c in checks if c.verdict.status != "valid"]
    if drifted and not allow_drift:
        first = drifted[0]
        print(
            f"error: {len(drifted)} version(s) not valid here; first {first.model}/{first.version} "
            f"{_VERDICT_TEXT[first.verdict.status]}: {first.verdict.reasons[0]} (pass --allow-drift to accept)",
            file=sys.stderr,
        )
        return 1
    return 0
