"""The Triton image -> TensorRT table (gpt_triton/data/tensorrt_support.json) and its loader."""

from __future__ import annotations

import pytest

from gpt_triton import tensorrt_support as support
from gpt_triton.testing import fake_tensorrt


def test_table_loads_and_every_entry_is_sourced() -> None:
    table = support.load()
    assert table["images"] and table["rule"]
    images = [e["image"] for e in table["images"]]
    assert len(images) == len(set(images))
    for entry in table["images"]:
        source = table["sources"][entry["source"]]
        assert source["url"].startswith("https://")
        support._parts(entry["tensorrt"])  # every version has at least major.minor.patch


def test_lookups() -> None:
    assert support.tensorrt_for_image("24.10-trtllm-python-py3") == "10.4.0"
    assert support.tensorrt_for_image("nvcr.io/nvidia/tritonserver:25.01-trtllm-python-py3") == "10.8.0.43"
    assert support.tensorrt_for_image("24.02") == "8.6.3"  # a bare release means the -py3 image
    assert support.tensorrt_for_image("24.10-py3") is None  # not confirmed, so unknown
    assert (support.source_for_image("25.11-trtllm-python-py3") or "").startswith("https://docs.nvidia.com/")
    matches = support.images_for_tensorrt("10.13.3.9")
    assert matches == ["26.02-trtllm-python-py3", "26.01-trtllm-python-py3", "25.12-trtllm-python-py3",
                       "25.11-trtllm-python-py3"]
    assert support.images_for_tensorrt("10.4.0") == ["24.10-trtllm-python-py3", "24.09-trtllm-python-py3"]
    assert support.images_for_tensorrt("10.5.0.18") == []


def test_compatible_rule() -> None:
    assert support.compatible("10.8.0.43", "10.8.0.43")
    assert support.compatible("10.8.0.43", "10.8.0")  # the table gives three components: compare three
    assert not support.compatible("8.6.1.6", "8.6.1.2")  # triton-inference-server/server#5975
    assert not support.compatible("10.13.3.9", "10.13.2")
    assert not support.compatible("11.1.0.106", "10.16.0.72")
    with pytest.raises(ValueError):
        support.compatible("10.13", "10.13.3.9")


def test_fake_versions_line_up_with_the_table() -> None:
    """A plan from the fake 10.13 (10.13.3.9) is what the 25.11-26.02 TensorRT-LLM images would load."""
    for image in support.images_for_tensorrt(fake_tensorrt.module("10.13").__version__):
        found = support.tensorrt_for_image(image)
        assert found is not None and support.compatible(fake_tensorrt.module("10.13").__version__, found)
