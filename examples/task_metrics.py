"""Example task metrics: application-level comparisons for ``accuracy.task_metric``.

gpt-triton loads a task metric by import path (``module:function``; the module must be importable, e.g.
on ``PYTHONPATH``) and calls it once per reference request::

    fn(inputs, reference_outputs, candidate_outputs) -> (score, passed)

Each argument is a dict ``name -> np.ndarray`` with the batch axis; ``inputs`` is ``{}`` when the caller
has no inputs. ``passed`` decides whether the request counts as an exceedance (it feeds the exceedance
count and the Clopper-Pearson bound); ``score`` is reported (the worst score over requests).

Element-wise tolerances say how far numbers moved; these metrics say whether the *decision* the
application takes from the numbers changed, which is what a reduced-precision engine must preserve:

* :func:`top1_agreement` - a classifier: the fraction of samples whose argmax class agrees; a request
  passes when every sample agrees.
* :func:`make_detection_metric` - a detector: threshold a score map (or per-class logits/probabilities)
  into detections, match reference and candidate detections one to one by IoU, score the F1 of the
  match; a request passes when every sample's detections match exactly (F1 = 1).

Use them in a spec::

    accuracy:
      task_metric: examples.task_metrics:top1_agreement
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Request = dict[str, np.ndarray]
TaskMetric = Callable[[Request, Request, Request], tuple[float, bool]]

# Output names a classifier usually gives its scores; the first one present is used.
CLASSIFIER_OUTPUTS = ("logits", "probabilities", "scores", "output")


def _pick_output(reference: Request, preferred: tuple[str, ...]) -> str:
    for name in preferred:
        if name in reference:
            return name
    floats = [name for name, a in reference.items() if np.asarray(a).dtype.kind == "f"]
    if not floats:
        raise ValueError(f"no float output to compare among {sorted(reference)}")
    return floats[0]


# ---------------------------------------------------------------------------------------------- classifier


def top1_agreement(inputs: Request, reference_outputs: Request, candidate_outputs: Request) -> tuple[float, bool]:
    """Fraction of samples (every axis but the last, the class axis) whose argmax agrees.

    Unlike ``topk: 1`` in a tolerance, which checks one named output, this picks the classifier output
    by name, and shows the shape of a user metric. Ties go to the lowest class index in both (numpy's
    argmax), so two identical outputs always agree.
    """
    name = _pick_output(reference_outputs, CLASSIFIER_OUTPUTS)
    ref = np.asarray(reference_outputs[name])
    cand = np.asarray(candidate_outputs[name])
    if ref.shape != cand.shape:
        raise ValueError(f"output {name} has shape {list(cand.shape)} but the reference has {list(ref.shape)}")
    classes = ref.shape[-1] if ref.ndim else 1
    agree = np.argmax(ref.reshape(-1, classes), axis=1) == np.argmax(cand.reshape(-1, classes), axis=1)
    if agree.size == 0:
        return 1.0, True
    return float(np.mean(agree)), bool(np.all(agree))


# ---------------------------------------------------------------------------------------------- detection


@dataclass(frozen=True)
class Detection:
    """One detection: a channel (class) and a half-open box ``[lo, hi)`` per spatial axis."""

    channel: tuple[int, ...]
    lo: tuple[int, ...]
    hi: tuple[int, ...]


def decode_detections(scores: np.ndarray, threshold: float) -> list[Detection]:
    """Detections of one sample's scores.

    * 1-D (per-class scores, e.g. multi-label logits): every class above ``threshold`` is a detection
      with the unit box ``[c, c+1)``, so IoU matching reduces to "the same classes fired".
    * N-D (``[..., H, W]`` score maps, leading axes are channels/classes): every connected region of
      the map above ``threshold`` is a detection with its bounding box, per channel.
    """
    from scipy import ndimage

    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim <= 1:
        return [Detection((), (int(c),), (int(c) + 1,)) for c in np.flatnonzero(scores.ravel() > threshold)]
    out: list[Detection] = []
    for channel in np.ndindex(*scores.shape[:-2]):
        labels, _ = ndimage.label(scores[channel] > threshold)
        for box in ndimage.find_objects(labels):
            if box is not None:
                out.append(Detection(tuple(int(c) for c in channel), tuple(s.start for s in box), tuple(s.stop for s in box)))
    return out


def box_iou(a: Detection, b: Detection) -> float:
    """IoU of two boxes; detections of different channels (classes) never match."""
    if a.channel != b.channel:
        return 0.0
    inter = 1
    for alo, ahi, blo, bhi in zip(a.lo, a.hi, b.lo, b.hi, strict=True):
        inter *= max(0, min(ahi, bhi) - max(alo, blo))
    area_a = int(np.prod([h - lo for lo, h in zip(a.lo, a.hi, strict=True)]))
    area_b = int(np.prod([h - lo for lo, h in zip(b.lo, b.hi, strict=True)]))
    union = area_a + area_b - inter
    return inter / union if union else 0.0


def match_f1(reference: list[Detection], candidate: list[Detection], iou_min: float) -> float:
    """F1 of a one-to-one matching (Hungarian, maximising IoU) keeping pairs with IoU >= ``iou_min``.

    1.0 when both are empty; 0.0 when exactly one is.
    """
    if not reference and not candidate:
        return 1.0
    if not reference or not candidate:
        return 0.0
    from scipy.optimize import linear_sum_assignment

    ious = np.array([[box_iou(r, c) for c in candidate] for r in reference])
    rows, cols = linear_sum_assignment(ious, maximize=True)
    matched = int(np.sum(ious[rows, cols] >= iou_min))
    return 2.0 * matched / (len(reference) + len(candidate))


def make_detection_metric(output: str | None = None, *, threshold: float = 0.5, iou_min: float = 0.5) -> TaskMetric:
    """A task metric comparing decoded detections of ``output`` (None: the first float output).

    Per request the score is the mean F1 over samples (axis 0 is the batch); the request passes when
    every sample's detections match one to one (F1 = 1). Bind your own in your module, e.g.
    ``text_boxes_agree = make_detection_metric("prob_map", threshold=0.3)``, and name it in the spec.
    """
    if not 0.0 < iou_min <= 1.0:
        raise ValueError(f"iou_min must be in (0, 1], got {iou_min}")

    def detections_agree(inputs: Request, reference_outputs: Request, candidate_outputs: Request) -> tuple[float, bool]:
        name = output or _pick_output(reference_outputs, ())
        ref = np.asarray(reference_outputs[name])
        cand = np.asarray(candidate_outputs[name])
        if ref.shape != cand.shape:
            raise ValueError(f"output {name} has shape {list(cand.shape)} but the reference has {list(ref.shape)}")
        if ref.ndim == 0 or ref.shape[0] == 0:
            return 1.0, True
        f1 = [
            match_f1(decode_detections(r, threshold), decode_detections(c, threshold), iou_min)
            for r, c in zip(ref, cand, strict=True)
        ]
        return float(np.mean(f1)), bool(min(f1) == 1.0)

    detections_agree.__name__ = f"detections_agree[{output or 'auto'}]"
    return detections_agree


# Ready-made instances for ``module:function`` use.
detections_agree = make_detection_metric(threshold=0.5, iou_min=0.5)
# Multi-label reading of classifier logits: a class "fires" when sigmoid(logit) > 0.5, i.e. logit > 0.
logit_detections_agree = make_detection_metric("logits", threshold=0.0)
