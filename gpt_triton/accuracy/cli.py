"""``gpt-triton capture``: record reference traffic (inputs + outputs) from the model served now."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from gpt_triton.core.errors import GptTritonError, TransientError
from gpt_triton.core.model_info import ModelInfo, TensorInfo


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "capture",
        help="send inputs to a served model and save inputs + outputs as reference traffic",
        description="Send reference inputs to the model Triton serves now and write inputs and outputs "
        "to one .npz (written atomically), for use as --reference in `gpt-triton tune`.",
    )
    parser.add_argument("--triton-url", required=True, help="HOST:PORT of Triton's gRPC endpoint")
    parser.add_argument("--model", required=True, help="the served model's name")
    parser.add_argument("--model-version", default="", help="version to query (default: the server's policy)")
    parser.add_argument("--inputs", required=True, help="inputs: .npz, a directory of .npz, perf_analyzer .json or .jsonl")
    parser.add_argument("--out", required=True, help="the reference file to write (.npz)")
    parser.set_defaults(func=run)


def served_model_info(grpc_url: str, model: str, version: str = "") -> ModelInfo:
    """The served model's interface as a :class:`ModelInfo`, from Triton's metadata and config."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException, triton_to_np_dtype

    client = grpcclient.InferenceServerClient(url=grpc_url)
    try:
        try:
            client.is_server_live(client_timeout=10)
        except InferenceServerException as exc:
            raise TransientError(f"cannot reach Triton at {grpc_url} ({_first_line(exc)}); check --triton-url") from exc
        try:
            meta = client.get_model_metadata(model, version, as_json=True, client_timeout=10)
        except InferenceServerException as exc:
            names = _served_names(client)
            raise GptTritonError(
                f"model {model!r} (version {version or 'default'}) is not served by Triton at {grpc_url}; "
                f"ready models: {', '.join(names) or 'none'}"
            ) from exc
    finally:
        client.close()

    def tensors(entries: list[dict[str, Any]]) -> list[TensorInfo]:
        out = []
        for entry in entries:
            dtype = np.dtype(triton_to_np_dtype(entry["datatype"])).name
            out.append(TensorInfo(name=entry["name"], dtype=dtype, dims=[int(d) for d in entry.get("shape", [])]))
        return out

    return ModelInfo(
        path=f"triton://{grpc_url}/{model}", name=model, sha256="", size_bytes=0, opset=0,
        inputs=tensors(meta.get("inputs", [])), outputs=tensors(meta.get("outputs", [])),
    )


def _served_names(client: Any) -> list[str]:
    try:
        index = client.get_model_repository_index(as_json=True).get("models", [])
    except Exception:  # the listing is only for the message; never mask the real error
        return []
    return sorted({m["name"] for m in index if m.get("state") == "READY"})


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def capture(grpc_url: str, model: str, inputs_path: str | Path, out: str | Path, version: str = "") -> int:
    """Capture and write the reference; returns the number of requests written."""
    from gpt_triton.accuracy.reference import ReferenceSet, load_reference, save_npz
    from gpt_triton.accuracy.validate import infer_requests

    out = Path(out)
    if out.suffix != ".npz":
        raise GptTritonError(f"--out {out} must end in .npz")
    if not Path(inputs_path).exists():
        raise GptTritonError(f"--inputs {inputs_path} not found")
    info = served_model_info(grpc_url, model, version)
    ref = load_reference(inputs_path, info, {})
    answers = infer_requests(grpc_url, model, ref.inputs, [t.name for t in info.outputs], model_version=version)
    captured = ReferenceSet(inputs=ref.inputs, outputs=answers, source=f"captured from {info.path}")
    save_npz(captured, out)
    return len(captured)


def run(args: argparse.Namespace) -> int:
    count = capture(args.triton_url, args.model, args.inputs, args.out, args.model_version)
    print(f"captured {count} requests from {args.model} at {args.triton_url} -> {args.out}")
    return 0
