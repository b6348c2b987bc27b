"""Validation through Triton: send reference requests to a served model and compare what comes back.

Accuracy is checked on the served path (the same config, backend and batching the latency was measured
on), not on an in-process session, because the serving path can change numerics (dynamic batching pads
and concatenates, adapters cast dtypes).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpt_triton.core.errors import GptTritonError

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
