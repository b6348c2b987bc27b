"""Serve candidates on one embedded Triton for a benchmark (a helper of the scripts here, not a benchmark).

Several benchmarks measure a tune's candidates again, with both load clients, on a server of their own:
they deploy each candidate's artifact as the tuner does (``gpt_triton.deploy.write_model``), load it, and
measure by model name. This is that part, once.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.records import Candidate
from gpt_triton.deploy import write_model
from gpt_triton.server import EmbeddedTriton


@contextmanager
def serving(candidates: Mapping[str, Candidate], info: ModelInfo, shapes: dict[str, list[int]],
            prefix: str) -> Iterator[tuple[EmbeddedTriton, dict[str, str]]]:
    """A started embedded Triton holding every candidate (keyed as given), and each one's model name
    (``prefix_key``); the server stops and its folders go when the block ends."""
    with tempfile.TemporaryDirectory(prefix=f"{prefix}-") as tmp:
        root = Path(tmp)
        with EmbeddedTriton(repository=root / "repo", workdir=root / "work") as server:
            names: dict[str, str] = {}
            for key, cand in candidates.items():
                if cand.artifact is None:
                    raise SystemExit(f"candidate {cand.id} has no built artifact to serve")
                backend = cand.deploy.backend if cand.deploy is not None else "python"
                deployed = write_model(root / "repo", f"{prefix}_{key}", info, shapes, cand.artifact, cand.serving,
                                       backend)
                server.load(root / "repo" / deployed.model_name)
                names[key] = deployed.model_name
            yield server, names


def random_requests(shapes: dict[str, list[int]], count: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` requests of standard-normal float32 inputs, the same for every client and candidate."""
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
            for _ in range(count)]
