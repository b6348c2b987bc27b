"""Make the example models (no download): python examples/make_models.py [OUT_DIR]."""

from __future__ import annotations

import sys
from pathlib import Path

from gpt_triton.testing.models import build_conv_attention, build_resnet_cnn, build_tiny_mlp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from precision_model import main as make_precision_example  # noqa: E402 - a sibling script, not a package


def main(out_dir: str = "examples/models") -> None:
    out = Path(out_dir)
    for path in (
        build_conv_attention(out / "conv_attention.onnx"),
        build_resnet_cnn(out / "resnet_cnn.onnx"),
        build_tiny_mlp(out / "tiny_mlp.onnx"),
    ):
        print(f"{path} ({path.stat().st_size / 1e6:.1f} MB)")
    make_precision_example(str(out))


if __name__ == "__main__":
    main(*sys.argv[1:2])
