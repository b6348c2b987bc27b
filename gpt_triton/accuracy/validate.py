"""Validation through Triton: send reference requests to a served model and compare what comes back.

Accuracy is checked on the served path (the same config, backend and batching the latency was measured
on), not on an in-process session, because the serving path can change numerics (dynamic batching pads
and concatenates, adapters cast dtypes).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from gpt_triton.accuracy.compare import compare_requests
from gpt_triton.accuracy.reference import ReferenceSet
from gpt_triton.core.accuracy import AccuracyResult
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.spec import AccuracySpec

Request = dict[str, np.ndarray]


def _client(grpc_url: str) -> Any:
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url=grpc_url)


def infer_requests(
    grpc_url: str,
    model_name: str,
    requests: Sequence[dict[str, np.ndarray]],
    output_names: Sequence[str],
    *,
    model_version: str = "",
    max_in_flight: int = 4,
    timeout_s: float = 120.0,
) -> list[dict[str, np.ndarray]]:
    """Answers in request order. A few requests are kept in flight (gRPC async) so a dynamic batcher
    sees realistic concurrency; any failed request raises a one-line :class:`GptTritonError`."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    client = _client(grpc_url)
    results: list[dict[str, np.ndarray] | None] = [None] * len(requests)
    errors: list[str] = []
    slots = threading.Semaphore(max_in_flight)
    done = threading.Condition()
    finished = [0]
    sent = 0

    def make_callback(index: int) -> Any:
        def callback(result: Any, error: Any) -> None:
            try:
                if error is not None:
                    errors.append(f"request {index}: {error}")
                else:
                    results[index] = {name: result.as_numpy(name) for name in output_names}
            except Exception as exc:  # as_numpy on an output the model does not have, etc.
                errors.append(f"request {index}: {exc}")
            finally:
                slots.release()
                with done:
                    finished[0] += 1
                    done.notify_all()

        return callback

    try:
        for index, request in enumerate(requests):
            if errors:
                break
            slots.acquire()
            sent += 1
            tensors = []
            for name, array in request.items():
                tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            outputs = [grpcclient.InferRequestedOutput(name) for name in output_names]
            try:
                client.async_infer(
                    model_name, tensors, make_callback(index), model_version=model_version, outputs=outputs,
                    client_timeout=timeout_s,
                )
            except InferenceServerException as exc:
                slots.release()
                errors.append(f"request {index}: {exc}")
                with done:
                    finished[0] += 1
        with done:
            if not done.wait_for(lambda: finished[0] >= sent, timeout=timeout_s):
                raise GptTritonError(f"Triton at {grpc_url} did not answer {model_name} within {timeout_s:.0f} s")
    finally:
        client.close()
    if errors:
        raise GptTritonError(f"inference on {model_name} via {grpc_url} failed: {errors[0]}")
    return [r if r is not None else {} for r in results]


def validate_through_triton(
    grpc_url: str,
    model_name: str,
    reference: ReferenceSet,
    spec: AccuracySpec,
    split: Literal["tuning", "heldout"],
    *,
    model_version: str = "",
) -> AccuracyResult:
    """Infer every reference request through Triton and compare with the reference outputs.

    A server-side failure (the candidate crashed, refused a shape, timed out) is a failed result with
    the reason, not an exception: it disqualifies this candidate, not the run.
    """
    if reference.outputs is None:
        raise GptTritonError(
            "the reference has no outputs; take them from the default route first (ReferenceSet.with_outputs)"
        )
    output_names = list(reference.outputs[0])
    try:
        answers = infer_requests(grpc_url, model_name, reference.inputs, output_names, model_version=model_version)
    except GptTritonError as exc:
        n = len(reference)
        return AccuracyResult(
            split=split, requests=n, passed=False, exceedances=n, exceedance_upper_bound=1.0,
            confidence=spec.confidence, min_margin=-1.0, reason=str(exc),
        )
    return compare_requests(reference.outputs, answers, spec, split, inputs=reference.inputs)
