"""Reference traffic: every format round-trips, bad input gives its one-line message, split and guard."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpt_triton.accuracy import reference as refmod
from gpt_triton.accuracy.reference import (
    ReferenceSet,
    load_reference,
    save_calibration_npz,
    save_jsonl,
    save_npz,
    save_npz_dir,
    save_perf_analyzer_json,
    split_reference,
    synthesize_reference,
)
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo


def _mixed_batches(info: ModelInfo, with_outputs: bool, seed: int = 1) -> ReferenceSet:
    """Requests of batch 1, 3 and 2 (per-request formats must keep each request's own batch)."""
    rng = np.random.default_rng(seed)
    inputs = [{"images": rng.random((b, 3, 64, 64), dtype=np.float32)} for b in (1, 3, 2)]
    outputs = None
    if with_outputs:
        outputs = [
            {"logits": rng.standard_normal((b, 10)).astype(np.float32),
             "embedding": rng.standard_normal((b, 64)).astype(np.float32)}
            for b in (1, 3, 2)
        ]
    return ReferenceSet(inputs=inputs, outputs=outputs, source="test")


def _assert_same(a: ReferenceSet, b: ReferenceSet) -> None:
    assert len(a) == len(b)
    for x, y in zip(a.inputs, b.inputs, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k])
    assert (a.outputs is None) == (b.outputs is None)
    for x, y in zip(a.outputs or [], b.outputs or [], strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert np.array_equal(x[k], y[k])


def _save(fmt: str, ref: ReferenceSet, directory: Path) -> Path:
    path = {"npz": directory / "ref.npz", "dir": directory / "refdir", "json": directory / "ref.json",
            "jsonl": directory / "ref.jsonl"}[fmt]
    {"npz": save_npz, "dir": save_npz_dir, "json": save_perf_analyzer_json, "jsonl": save_jsonl}[fmt](ref, path)
    return path


@pytest.mark.parametrize("fmt", ["npz", "dir", "json", "jsonl"])
@pytest.mark.parametrize("with_outputs", [True, False])
def test_every_format_round_trips(fmt, with_outputs, tmp_path, conv_info, conv_shapes):
    original = _mixed_batches(conv_info, with_outputs)
    path = _save(fmt, original, tmp_path)
    loaded = load_reference(path, conv_info, conv_shapes)
    _assert_same(original, loaded)
    assert loaded.synthetic is False and str(path) in loaded.source
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]  # atomic writes leave no temp files


def test_stacked_npz_with_request_axis(tmp_path, conv_info, conv_shapes):
    rng = np.random.default_rng(0)
    images = rng.random((5, 2, 3, 64, 64), dtype=np.float32)  # 5 requests of batch 2
    logits = rng.random((5, 2, 10), dtype=np.float32)
    embedding = rng.random((5, 2, 64), dtype=np.float32)
    np.savez(tmp_path / "s.npz", images=images, logits=logits, embedding=embedding)
    ref = load_reference(tmp_path / "s.npz", conv_info, conv_shapes)
    assert len(ref) == 5 and ref.outputs is not None
    assert np.array_equal(ref.inputs[3]["images"], images[3])
    assert np.array_equal(ref.outputs[4]["logits"], logits[4])
    # [requests, *sample] without a batch axis: each request becomes batch 1
    np.savez(tmp_path / "b1.npz", images=images[:, 0])
    ref1 = load_reference(tmp_path / "b1.npz", conv_info, conv_shapes)
    assert [r["images"].shape for r in ref1.inputs] == [(1, 3, 64, 64)] * 5


def test_perf_analyzer_json_without_shape_and_with_b64(tmp_path, conv_info, conv_shapes):
    import base64

    rng = np.random.default_rng(0)
    a = rng.random((3, 64, 64), dtype=np.float32)
    b = rng.random((1, 3, 64, 64), dtype=np.float32)
    doc = {"data": [
        {"images": a.ravel().tolist()},  # flat content, no shape: reshaped to the model's sample
        {"images": {"b64": base64.b64encode(b.tobytes()).decode(), "shape": [1, 3, 64, 64]}},
    ]}
    (tmp_path / "pa.json").write_text(json.dumps(doc))
    ref = load_reference(tmp_path / "pa.json", conv_info, conv_shapes)
    assert np.array_equal(ref.inputs[0]["images"], a[None])
    assert np.array_equal(ref.inputs[1]["images"], b)


def _write_one(tmp_path: Path, arrays: dict) -> Path:
    d = tmp_path / "bad"
    d.mkdir()
    for i in range(4):
        good = {"images": np.zeros((1, 3, 64, 64), np.float32)}
        np.savez(d / f"{i:03d}.npz", **(arrays if i == 3 else good))
    return d


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"images": np.zeros((1, 3, 32, 32), np.float32)},
         "reference request 3: input images has shape [1,3,32,32] but the model needs [N,3,64,64]"),
        ({"images": np.zeros((64, 64), np.float32)},
         "reference request 3: input images has shape [64,64] but the model needs [N,3,64,64]"),
        ({"images": np.zeros((1, 3, 64, 64), np.float64)},
         "reference request 3: input images has dtype float64 but the model needs float32"),
        ({"pixels": np.zeros((1, 3, 64, 64), np.float32)},
         "reference request 3: unknown input 'pixels'; the model's inputs are: images"),
        ({}, "reference request 3: input 'images' is missing"),
        ({"images": np.zeros((1, 3, 64, 64), np.float32), "logits": np.zeros((1, 10), np.float32)},
         "reference request 0 has no outputs but request 3 does"),
    ],
)
def test_bad_requests_give_one_line_errors(tmp_path, conv_info, conv_shapes, arrays, message):
    with pytest.raises(GptTritonError) as err:
        load_reference(_write_one(tmp_path, arrays), conv_info, conv_shapes)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_files(tmp_path, conv_info, conv_shapes):
    cases = {
        tmp_path / "missing.npz": "reference data not found",
        tmp_path / "corrupt.npz": "cannot read reference data",
        tmp_path / "broken.json": "cannot read reference data",
        tmp_path / "nodata.json": 'needs a top-level {"data": [...]}',
        tmp_path / "empty.jsonl": "holds no requests",
        tmp_path / "emptydir": "has no .npz files",
        tmp_path / "data.csv": "unknown format '.csv'",
    }
    (tmp_path / "corrupt.npz").write_bytes(b"PK\x03\x04 not a zip")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "nodata.json").write_text('{"inputs": []}')
    (tmp_path / "empty.jsonl").write_text("\n")
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "data.csv").write_text("1,2")
    for path, message in cases.items():
        with pytest.raises(GptTritonError) as err:
            load_reference(path, conv_info, conv_shapes)
        assert message in str(err.value), path
        assert "\n" not in str(err.value)


def test_jsonl_dtype_is_checked(tmp_path, conv_info, conv_shapes):
    record = {"inputs": {"images": {"shape": [1, 3, 64, 64], "dtype": "int32", "data": [0] * (3 * 64 * 64)}}}
    (tmp_path / "r.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(GptTritonError, match="input images has dtype int32 but the model needs float32"):
        load_reference(tmp_path / "r.jsonl", conv_info, conv_shapes)


def test_synthetic_is_seeded_and_realistic(conv_info, conv_shapes, tiny_mlp):
    a = synthesize_reference(conv_info, conv_shapes, 6, seed=3)
    b = synthesize_reference(conv_info, conv_shapes, 6, seed=3)
    c = synthesize_reference(conv_info, conv_shapes, 6, seed=4)
    _assert_same(a, b)
    assert not np.array_equal(a.inputs[0]["images"], c.inputs[0]["images"])
    assert a.synthetic and "synthetic" in a.source and a.describe()["synthetic"] is True
    x = np.concatenate([r["images"] for r in a.inputs])
    assert x.dtype == np.float32 and x.shape == (6, 3, 64, 64)
    assert x.min() >= 0.0 and x.max() < 1.0 and 0.45 < x.mean() < 0.55
    ints = refmod._random_array(np.random.default_rng(0), "int64", [1000])
    assert ints.dtype == np.int64 and ints.min() >= 0 and ints.max() < 16 and len(np.unique(ints)) > 1


def test_split_is_deterministic_disjoint_and_sized(conv_info, conv_shapes):
    ref = synthesize_reference(conv_info, conv_shapes, 20, seed=0)
    tune1, held1 = split_reference(ref, 0.3, seed=7)
    tune2, held2 = split_reference(ref, 0.3, seed=7)
    _, held3 = split_reference(ref, 0.3, seed=8)
    assert tune1.indices == tune2.indices and held1.indices == held2.indices
    assert held1.indices != held3.indices
    assert len(tune1) == 14 and held1.size == 6
    assert set(tune1.indices or []).isdisjoint(held1.indices)
    assert sorted((tune1.indices or []) + held1.indices) == list(range(20))
    for pos, i in enumerate(tune1.indices or []):
        assert np.array_equal(tune1.inputs[pos]["images"], ref.inputs[i]["images"])
    opened = held1.open_for_acceptance("test")
    for pos, i in enumerate(held1.indices):
        assert np.array_equal(opened.inputs[pos]["images"], ref.inputs[i]["images"])
    # both parts keep at least one request
    tiny = ReferenceSet(inputs=ref.inputs[:2], source="two")
    t, h = split_reference(tiny, 0.05, seed=0)
    assert len(t) == 1 and h.size == 1


@pytest.mark.parametrize(("fraction", "count", "message"), [
    (1.0, 10, "use a value in [0, 1)"), (-0.1, 10, "use a value in [0, 1)"), (0.3, 1, "needs at least 2"),
])
def test_split_rejects_bad_fraction(conv_info, conv_shapes, fraction, count, message):
    ref = synthesize_reference(conv_info, conv_shapes, count, seed=0)
    with pytest.raises(GptTritonError, match=message.replace("[", r"\[").replace(")", r"\)")):
        split_reference(ref, fraction, seed=0)


def test_heldout_guard_opens_once_and_logs(conv_info, conv_shapes):
    ref = synthesize_reference(conv_info, conv_shapes, 10, seed=0)
    _, held = split_reference(ref, 0.3, seed=0)
    assert not held.opened and held.log == []
    # The data is not reachable through the public surface before opening.
    assert not any(isinstance(v, ReferenceSet) for k, v in vars(held).items() if not k.startswith("_HeldOut"))
    assert "array" not in repr(held)
    data = held.open_for_acceptance("final acceptance of the winner")
    assert len(data) == held.size == 3
    assert held.opened and len(held.log) == 1
    assert held.log[0].reason == "final acceptance of the winner"
    assert held.log[0].caller.endswith(":test_heldout_guard_opens_once_and_logs")
    with pytest.raises(GptTritonError, match="already opened by .*test_heldout_guard"):
        held.open_for_acceptance("again")
    assert len(held.log) == 1
    assert held.describe()["opened"][0]["reason"] == "final acceptance of the winner"


def test_with_outputs_and_calibration(tmp_path, conv_info, conv_shapes):
    ref = _mixed_batches(conv_info, with_outputs=False)
    outs = _mixed_batches(conv_info, with_outputs=True).outputs
    assert outs is not None
    full = ref.with_outputs(outs)
    assert full.outputs is not None and ref.outputs is None
    with pytest.raises(GptTritonError, match="pair one to one"):
        ref.with_outputs(outs[:2])
    save_calibration_npz(ref, tmp_path / "calib.npz")
    with np.load(tmp_path / "calib.npz") as data:
        stacked = data["images"]
    assert stacked.shape == (6, 3, 64, 64)
    assert np.array_equal(stacked[1:4], ref.inputs[1]["images"])


def test_outputs_and_resolved_dynamic_dims_are_checked(tmp_path, conv_info):
    np.savez(tmp_path / "o.npz", images=np.zeros((2, 1, 3, 64, 64), np.float32),
             logits=np.zeros((2, 1, 12), np.float32), embedding=np.zeros((2, 1, 64), np.float32))
    with pytest.raises(GptTritonError, match=r"reference request 0: output logits has shape \[1,12\] but the model needs \[N,10\]"):
        load_reference(tmp_path / "o.npz", conv_info, {})
    np.savez(tmp_path / "b.npz", images=np.zeros((2, 2, 3, 64, 64), np.float32),
             logits=np.zeros((2, 1, 10), np.float32), embedding=np.zeros((2, 1, 64), np.float32))
    with pytest.raises(GptTritonError, match="reference request 0: outputs have batch 1 but inputs have batch 2"):
        load_reference(tmp_path / "b.npz", conv_info, {})
    # A model with dynamic spatial dims: the resolved shape decides, the batch stays free.
    spatial = conv_info.model_copy(update={"inputs": [
        conv_info.inputs[0].model_copy(update={"dims": ["batch", 3, "h", "w"]})]})
    np.savez(tmp_path / "s.npz", images=np.zeros((1, 4, 3, 32, 32), np.float32))
    assert len(load_reference(tmp_path / "s.npz", spatial, {"images": [1, 3, 32, 32]})) == 1
    with pytest.raises(GptTritonError, match=r"has shape \[4,3,32,32\] but the model needs \[N,3,48,48\]"):
        load_reference(tmp_path / "s.npz", spatial, {"images": [1, 3, 48, 48]})


def test_describe_split_records_sizes_and_access(conv_info, conv_shapes):
    from gpt_triton.accuracy import describe_split

    ref = synthesize_reference(conv_info, conv_shapes, 10, seed=0)
    tuning, held = split_reference(ref, 0.3, seed=2)
    summary = describe_split(tuning, held)
    assert summary["tuning_requests"] == 7 and summary["heldout_requests"] == 3
    assert summary["split_seed"] == 2 and summary["synthetic"] is True and summary["opened"] == []
    held.open_for_acceptance("acceptance")
    assert describe_split(tuning, held)["opened"][0]["reason"] == "acceptance"
