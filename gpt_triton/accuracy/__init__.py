"""Accuracy on held-out reference traffic: reference data and split, pure comparisons, Clopper-Pearson
bounds, validation through Triton, and the ``capture`` command."""

from gpt_triton.accuracy.bounds import clopper_pearson_upper
from gpt_triton.accuracy.compare import compare_requests, eligible, load_task_metric, pareto_front
from gpt_triton.accuracy.reference import (
    HeldOut,
    ReferenceSet,
    describe_split,
    load_reference,
    save_calibration_npz,
    save_jsonl,
    save_npz,
    save_npz_dir,
    save_perf_analyzer_json,
    split_reference,
    synthesize_reference,
)
from gpt_triton.accuracy.validate import infer_requests
from gpt_triton.core.accuracy import AccuracyResult, OutputResult

__all__ = [
    "AccuracyResult", "HeldOut", "OutputResult", "ReferenceSet", "clopper_pearson_upper", "compare_requests",
    "describe_split",
    "eligible", "infer_requests", "load_reference", "load_task_metric", "pareto_front", "save_calibration_npz",
    "save_jsonl", "save_npz", "save_npz_dir", "save_perf_analyzer_json", "split_reference", "synthesize_reference",
]
