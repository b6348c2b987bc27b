"""Which TensorRT each NGC Triton image ships, and whether an engine built by one TensorRT runs on another.

The table is package data (``gpt_triton/data/tensorrt_support.json``): only entries confirmed from a cited
source (every entry names one), so an image that is not listed is UNKNOWN, not unsupported.

The rule: a serialized engine runs only on the TensorRT version that built it. :func:`compatible` compares the
versions at the precision both sides give, at least major.minor.patch; when both give the build number
(``10.8.0.43``) it must match too, since real TensorRT refuses a 8.6.1.6 plan on 8.6.1.2
("expecting library version 8.6.1.2 got 8.6.1.6", triton-inference-server/server#5975). The GPU architecture
must match as well; that is not this module's business.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

_REGISTRY_PREFIXES = ("nvcr.io/nvidia/tritonserver:", "tritonserver:")


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    """The whole support table (description, rule, sources, images, excluded)."""
    text = resources.files("gpt_triton").joinpath("data/tensorrt_support.json").read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


def normalize_image(tag: str) -> str:
    """``nvcr.io/nvidia/tritonserver:24.10-trtllm-python-py3`` -> ``24.10-trtllm-python-py3``; ``24.10`` -> ``24.10-py3``."""
    tag = tag.strip()
    for prefix in _REGISTRY_PREFIXES:
        if tag.startswith(prefix):
            tag = tag[len(prefix):]
    if ":" in tag:
        tag = tag.rsplit(":", 1)[1]
    parts = tag.split(".")
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        tag += "-py3"
    return tag


def tensorrt_for_image(tag: str) -> str | None:
    """The TensorRT version image ``tag`` ships, or None when the table does not know it."""
    wanted = normalize_image(tag)
    for entry in load()["images"]:
        if entry["image"] == wanted:
            return str(entry["tensorrt"])
    return None


def source_for_image(tag: str) -> str | None:
    """The URL the table's entry for ``tag`` was confirmed from."""
    wanted = normalize_image(tag)
    for entry in load()["images"]:
        if entry["image"] == wanted:
            return str(load()["sources"][entry["source"]]["url"])
    return None


def _parts(version: str) -> list[str]:
    parts = version.strip().split(".")
    numeric = 0
    for part in parts:
        if not part.isdigit():
            break
        numeric += 1
    if numeric < 3:
        raise ValueError(f"{version!r}: a TensorRT version needs at least major.minor.patch")
    return parts


def compatible(builder_version: str, server_version: str) -> bool:
    """True when an engine built by TensorRT ``builder_version`` loads on TensorRT ``server_version``.

    Compared component by component over the components both give (at least major.minor.patch), so
    ``compatible("10.8.0.43", "10.8.0")`` is True and ``compatible("8.6.1.6", "8.6.1.2")`` is False.
    """
    built, served = _parts(builder_version), _parts(server_version)
    for a, b in zip(built, served, strict=False):
        if a.isdigit() and b.isdigit():
            if int(a) != int(b):
                return False
        elif a != b:
            return False
    return True


def images_for_tensorrt(version: str) -> list[str]:
    """Images (from the table) on which an engine built by TensorRT ``version`` runs, newest release first."""
    _parts(version)
    matches = [e for e in load()["images"] if compatible(version, str(e["tensorrt"]))]
    matches.sort(key=lambda e: (e["release"], e["image"]), reverse=True)
    return [str(e["image"]) for e in matches]


def serving_tensorrt(image: str, pinned: str | None = None) -> str | None:
    """The TensorRT ``image`` serves with: ``pinned`` (``server.tensorrt_version``) when given, else the
    table's entry; None when neither knows (never a guess from a neighbouring release)."""
    return pinned or tensorrt_for_image(image)


def builder_version() -> str | None:
    """``tensorrt.__version__`` of the builder in this process; None when TensorRT cannot be imported."""
    try:
        import tensorrt
    except Exception:  # any import failure: no builder here (the family says why)
        return None
    version = getattr(tensorrt, "__version__", None)
    return str(version) if version else None


def check_builder(builder: str | None, image: str, pinned: str | None = None) -> str | None:
    """Why plans built by TensorRT ``builder`` cannot be promoted to ``image``; None when they can (or when
    there is no builder, which the tensorrt family's own availability explains). One line, with the fix."""
    if builder is None:
        return None
    served = serving_tensorrt(image, pinned)
    if served is None:
        return (f"the TensorRT of serving image {image} is unknown (gpt_triton/data/tensorrt_support.json has no "
                f"sourced entry for {normalize_image(image)}): pin it with server.tensorrt_version (read it in the "
                "image: dpkg -l | grep libnvinfer) or set server.image to a listed image")
    if not compatible(builder, served):
        images = images_for_tensorrt(builder)
        where = f"server.image to one of {', '.join(images[:3])}" if images else f"server.image to an image with TensorRT {builder}"
        return (f"builder TensorRT {builder} cannot build plans for {image} (TensorRT {served}): install "
                f"tensorrt=={served} for the builder or set {where}")
    return None
