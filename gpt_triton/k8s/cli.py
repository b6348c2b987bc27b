"""``gpt-triton k8s render|submit|watch|collect|run``.

render/submit build the Job (and its spec ConfigMap) from gpt_triton.k8s.render; watch follows it; collect
reads each index's result bundle from the shared volume (``--from RUNS``), or from the pod logs of runs
started with ``--log-bundle``; run is the in-pod entrypoint the Job's tuner container calls.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.spec import load_spec, parse_duration
from gpt_triton.k8s import bundle as bundle_mod
from gpt_triton.k8s.client import INDEX_ANNOTATION, KubeClient, job_failed_reason, job_state, load_api_client
from gpt_triton.k8s.render import (
    DEFAULT_IMAGE,
    GPU_RESOURCE,
    TRITON_IMAGE,
    TUNER_ACCOUNT,
    TUNER_CONTAINER,
    SecretRef,
    TuneJobParams,
    render_run,
    to_yaml,
)


def register(subparsers: Any) -> None:
    k8s = subparsers.add_parser("k8s", help="run tuning as Kubernetes Jobs: render, submit, watch, collect")
    sub = k8s.add_subparsers(dest="k8s_command", required=True)

    p = sub.add_parser("render", help="print the tuning Job(s) and spec ConfigMap as YAML")
    _job_args(p)
    p.add_argument("--out", type=Path, help="write the YAML here instead of stdout")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("examples", help="write the example manifests of k8s/ (rendered by this module)")
    p.add_argument("directory", type=Path)
    p.set_defaults(func=cmd_examples)

    p = sub.add_parser("submit", help="create the tuning Job(s) and spec ConfigMap in the cluster")
    _job_args(p)
    _conn_args(p, namespace=False)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("watch", help="follow a tuning Job until it completes (exit 0) or fails (exit 1)")
    p.add_argument("name", help="the Job name (printed by submit)")
    p.add_argument("--timeout", help="give up after this long, e.g. 2h (default: wait forever)")
    _conn_args(p)
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("collect", help="fetch report.json and the promoted artifact of each index of a Job")
    p.add_argument("name", help="the Job name")
    p.add_argument("--out", type=Path, required=True, help="directory; results land in OUT/<index>/")
    p.add_argument("--from", dest="runs_dir", type=Path,
                   help="the PVC's runs/ directory (mounted or copied): read RUNS/<job>/<index>/result.tar.gz there, "
                        "without the API; default: the pod logs of runs started with --log-bundle")
    _conn_args(p)
    p.set_defaults(func=cmd_collect)

    p = sub.add_parser("run", help="(inside the Job's pod) pick the model, run `gpt-triton tune`, print the result bundle")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="the model to tune (a file in --inputs, .onnx optional)")
    which.add_argument("--models-file", type=Path, help="one model a line; line JOB_COMPLETION_INDEX is tuned")
    p.add_argument("--inputs", type=Path, required=True, help="directory holding the input models")
    p.add_argument("--runs", type=Path, required=True, help="run directories go to RUNS/<job>/<index>")
    p.add_argument("--repository", type=Path, required=True, help="the production model repository")
    p.add_argument("--spec", type=Path, help="the tuning spec")
    p.add_argument("--triton-url", default="127.0.0.1:8001", help="the sidecar Triton's gRPC address")
    p.add_argument("--pushgateway", help="HOST:PORT of a Pushgateway")
    p.add_argument("--log-bundle", action="store_true",
                   help="also print the result bundle to the log as base64 (when nobody can read the volume)")
    p.add_argument("--bundle-max-bytes", type=int, default=bundle_mod.DEFAULT_MAX_BYTES,
                   help="with --log-bundle: leave the artifact out of the logged bundle above this size")
    p.add_argument("tune_args", nargs="*", help="after --: more `gpt-triton tune` arguments")
    p.set_defaults(func=cmd_run)


def _job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action="append", required=True, dest="models", metavar="NAME",
                   help="model file name in the PVC's inputs/ (repeat for an Indexed fan-out, one index each)")
    p.add_argument("--spec", type=Path, help="YAML tuning spec (validated, then stored in a ConfigMap)")
    p.add_argument("--gpu-product", action="append", default=[], metavar="P",
                   help="nvidia.com/gpu.product label value; repeat for one Job per product; none: CPU only")
    p.add_argument("--name", help="Job name (default: tune-<model>-<gpu product>)")
    p.add_argument("--namespace", "-n", default="gpt-triton")
    p.add_argument("--image", default=DEFAULT_IMAGE, help=f"tuner image (default {DEFAULT_IMAGE})")
    p.add_argument("--triton-image", default=TRITON_IMAGE)
    p.add_argument("--pvc", default="gpt-triton-data", help="PVC with inputs/, repository/ and runs/")
    p.add_argument("--service-account", default=TUNER_ACCOUNT,
                   help=f"the tuner pods' account: no API permissions needed (default {TUNER_ACCOUNT})")
    p.add_argument("--promotion-lock", choices=["file", "lease"], default="file",
                   help="file: flock on the PVC; lease: a coordination.k8s.io Lease (mounts the account's token)")
    p.add_argument("--triton-arg", action="append", default=[], metavar="ARG",
                   help="extra tritonserver flag, as serving has it (the chart's triton.extraArgs); repeatable")
    p.add_argument("--log-bundle", action="store_true",
                   help="the pods also print their result bundle to the log (for `collect` without --from)")
    p.add_argument("--gpu-resource", default=GPU_RESOURCE,
                   help=f"GPU extended resource (default {GPU_RESOURCE}; a MIG slice: nvidia.com/mig-1g.10gb)")
    p.add_argument("--signing-secret", default="gpt-triton-signing:signing-key", metavar="NAME:KEY",
                   help="Secret and key holding the signing key")
    p.add_argument("--no-signing", action="store_true", help="do not reference a signing-key Secret")
    p.add_argument("--pushgateway", help="HOST:PORT of a Pushgateway")
    p.add_argument("--parallelism", type=int, default=1, help="fan-out: indexes run at once")
    p.add_argument("--deadline", default="6h", help="activeDeadlineSeconds, e.g. 6h")
    p.add_argument("--tuner-gpus", type=int, help="GPUs for the tuner container (default 1 with --gpu-product)")
    p.add_argument("--tune-arg", action="append", default=[], metavar="ARG",
                   help="extra `gpt-triton tune` argument, repeatable; use the = form: --tune-arg=--time-budget=2h")


def _conn_args(p: argparse.ArgumentParser, namespace: bool = True) -> None:
    if namespace:
        p.add_argument("--namespace", "-n", default="gpt-triton")
    p.add_argument("--server", help="API server URL (default: KUBECONFIG, then in-cluster)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")


def _kube(args: argparse.Namespace) -> KubeClient:
    return KubeClient(load_api_client(args.server, args.kubeconfig, args.context), args.namespace)


def _params(args: argparse.Namespace) -> tuple[list[TuneJobParams], str]:
    spec_text = ""
    if args.spec is not None:
        load_spec(args.spec)  # fail here, not an hour later in the pod
        spec_text = args.spec.read_text()
    secret = None
    if not args.no_signing:
        name, _, key = args.signing_secret.partition(":")
        if not name or not key:
            raise GptTritonError(f"--signing-secret {args.signing_secret!r} must be NAME:KEY, e.g. gpt-triton-signing:signing-key")
        secret = SecretRef(name, key)
    products: list[str | None] = list(args.gpu_product) or [None]
    out = []
    for product in products:
        name = args.name
        if name and len(products) > 1:
            name = f"{name}-{product}"
        out.append(TuneJobParams(
            models=tuple(args.models), gpu_product=product, name=name, namespace=args.namespace, image=args.image,
            triton_image=args.triton_image, service_account=args.service_account, pvc=args.pvc,
            signing_secret=secret, pushgateway=args.pushgateway, parallelism=args.parallelism,
            active_deadline_s=int(parse_duration(args.deadline)), tuner_gpus=args.tuner_gpus,
            extra_tune_args=tuple(args.tune_arg), triton_extra_args=tuple(args.triton_arg),
            gpu_resource=args.gpu_resource, promotion_lock=args.promotion_lock, log_bundle=args.log_bundle,
        ))
    names = [p.job_name for p in out]
    if len(set(names)) != len(names):
        raise GptTritonError("two GPU products give the same Job name: pass distinct --gpu-product values")
    return out, spec_text


def cmd_render(args: argparse.Namespace) -> int:
    params, spec_text = _params(args)
    text = to_yaml([obj for p in params for obj in render_run(p, spec_text)])
    if args.out is None:
        sys.stdout.write(text)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


def cmd_examples(args: argparse.Namespace) -> int:
    from gpt_triton.k8s.examples import write_examples

    for path in write_examples(args.directory):
        print(f"wrote {path}")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    params, spec_text = _params(args)
    kube = _kube(args)
    for p in params:
        configmap, job = render_run(p, spec_text)
        # The Job first: a name clash then leaves nothing behind. The ConfigMap is owned by the Job, so it
        # is garbage-collected with it; the pod waits for the mount until the ConfigMap exists.
        created = kube.create(job)
        uid = (created.get("metadata") or {}).get("uid")
        if uid:
            configmap["metadata"]["ownerReferences"] = [{
                "apiVersion": "batch/v1", "kind": "Job", "name": p.job_name, "uid": uid, "blockOwnerDeletion": False,
            }]
        kube.create(configmap)
        print(f"created job {p.namespace}/{p.job_name} ({len(p.models)} model(s), "
              f"{p.gpu_product or 'CPU only'}); follow it: gpt-triton k8s watch {p.job_name} -n {p.namespace}")
    return 0


def _pod_line(pod: dict[str, Any]) -> str:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    index = (meta.get("annotations") or {}).get(INDEX_ANNOTATION)
    where = f" [index {index}]" if index is not None else ""
    detail = ""
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == TUNER_CONTAINER:
            state = cs.get("state") or {}
            if "terminated" in state:
                detail = f" (tuner exit {state['terminated'].get('exitCode')})"
            elif "waiting" in state:
                detail = f" ({state['waiting'].get('reason', 'waiting')})"
    return f"pod {meta.get('name')}{where}: {status.get('phase', 'Unknown')}{detail}"


def cmd_watch(args: argparse.Namespace) -> int:
    kube = _kube(args)
    timeout = parse_duration(args.timeout) if args.timeout else None
    seen: dict[str, str] = {}

    def on_change(job: dict[str, Any]) -> None:
        status = job.get("status") or {}
        line = (f"job {args.name}: {job_state(job)} active={status.get('active', 0)} "
                f"succeeded={status.get('succeeded', 0)} failed={status.get('failed', 0)}")
        completions = (job.get("spec") or {}).get("completions")
        if (job.get("spec") or {}).get("completionMode") == "Indexed":
            # Fan-out progress: which models (indexes) are done or failed.
            line += (f" done-indexes={status.get('completedIndexes') or '-'}/{completions}"
                     f" failed-indexes={status.get('failedIndexes') or '-'}")
        if seen.get("") != line:
            seen[""] = line
            print(line, flush=True)
        for pod in kube.job_pods(args.name):
            name = str((pod.get("metadata") or {}).get("name"))
            pod_line = _pod_line(pod)
            if seen.get(name) != pod_line:
                seen[name] = pod_line
                print(f"  {pod_line}", flush=True)

    job = kube.watch_job(args.name, on_change, timeout_s=timeout)
    if job_state(job) == "complete":
        print(f"job {args.name} completed; fetch results: gpt-triton k8s collect {args.name} -n {args.namespace} --out DIR")
        return 0
    print(f"job {args.name} failed: {job_failed_reason(job) or 'see kubectl describe job'}", file=sys.stderr)
    return 1


def _pick_pods(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per completion index: the succeeded pod, else the newest failed one (its report says why)."""
    best: dict[str, dict[str, Any]] = {}

    def rank(pod: dict[str, Any]) -> tuple[int, str]:
        phase = (pod.get("status") or {}).get("phase")
        return (2 if phase == "Succeeded" else 1 if phase == "Failed" else 0,
                str((pod.get("metadata") or {}).get("creationTimestamp", "")))

    for pod in pods:
        index = str(((pod.get("metadata") or {}).get("annotations") or {}).get(INDEX_ANNOTATION, "0"))
        if index not in best or rank(pod) > rank(best[index]):
            best[index] = pod
    return dict(sorted(best.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0))


def _install(out: Path, index: str, data: bytes) -> tuple[Path, dict[str, Any]]:
    """Extract beside the destination, then swap it in: a failed extraction leaves the old result intact."""
    final = out / index
    tmp = Path(tempfile.mkdtemp(prefix=f".{index}-", dir=out))
    try:
        manifest = bundle_mod.extract_bundle(data, tmp)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return final, manifest


def _collect_from_volume(args: argparse.Namespace) -> int:
    job_dir = args.runs_dir / args.name
    if not job_dir.is_dir():
        raise GptTritonError(f"{job_dir} does not exist: pass the PVC's runs/ directory as --from (the Job writes "
                             f"runs/<job>/<index>/) and check the Job name")
    indexes = sorted((p.name for p in job_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=int)
    if not indexes:
        raise GptTritonError(f"{job_dir} has no index directories: the Job has not started tuning yet")
    args.out.mkdir(parents=True, exist_ok=True)
    missing = []
    for index in indexes:
        data = bundle_mod.read_result(job_dir / index)
        if data is None:
            missing.append(index)
            continue
        final, manifest = _install(args.out, index, data)
        print(_summary(index, str(job_dir / index), final, manifest))
    if missing:
        raise GptTritonError(f"no {bundle_mod.RESULT_FILE} for index {', '.join(missing)} in {job_dir}: "
                             "those runs are not finished (gpt-triton k8s watch)")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    if args.runs_dir is not None:
        return _collect_from_volume(args)
    kube = _kube(args)
    job = kube.get_job(args.name)  # a clear 404 before anything else
    pods = _pick_pods(kube.job_pods(args.name))
    if not pods:
        if job_state(job) != "running":
            raise GptTritonError(f"job {args.namespace}/{args.name} has finished and its pods are gone "
                                 f"(ttlSecondsAfterFinished): collect from the volume with --from RUNS")
        raise GptTritonError(f"job {args.namespace}/{args.name} has no pods yet: wait for it (gpt-triton k8s watch)")
    args.out.mkdir(parents=True, exist_ok=True)
    missing = []
    for index, pod in pods.items():
        pod_name = str(pod["metadata"]["name"])
        data = bundle_mod.parse_bundle(kube.pod_log(pod_name, TUNER_CONTAINER))
        if data is None:
            missing.append(f"{index} ({pod_name}: {(pod.get('status') or {}).get('phase')})")
            continue
        final, manifest = _install(args.out, index, data)
        print(_summary(index, pod_name, final, manifest))
    if missing:
        raise GptTritonError(f"no result bundle in the log of index {', '.join(missing)}: the run is not finished, "
                             "was started without --log-bundle, or its log was lost; collect from the volume with "
                             "--from RUNS (RUNS/<job>/<index>/result.tar.gz)")
    return 0


def _summary(index: str, pod: str, where: Path, manifest: dict[str, Any]) -> str:
    report: dict[str, Any] = {}
    if (where / "report.json").is_file():
        report = json.loads((where / "report.json").read_text())
    model = (report.get("model") or {}).get("name") or (report.get("model") or {}).get("path", "?")
    art = "artifact included" if manifest.get("artifact") else manifest.get("artifact_omitted", "no artifact promoted")
    return (f"index {index} ({pod}) -> {where}: status={report.get('status', 'no report')} model={model} "
            f"promoted_version={report.get('promoted_version')} ; {art}")


def _model_for_index(models_file: Path) -> str:
    raw = os.environ.get("JOB_COMPLETION_INDEX")
    if raw is None or not raw.isdigit():
        raise GptTritonError("JOB_COMPLETION_INDEX is not set: --models-file needs an Indexed Job (completionMode: Indexed)")
    models = [line.strip() for line in models_file.read_text().splitlines() if line.strip()]
    index = int(raw)
    if index >= len(models):
        raise GptTritonError(f"JOB_COMPLETION_INDEX={index} but {models_file} lists {len(models)} models: "
                             "set completions to the number of models")
    return models[index]


def _model_path(inputs: Path, model: str) -> Path:
    for candidate in (inputs / model, inputs / f"{model}.onnx"):
        if candidate.is_file():
            return candidate
    raise GptTritonError(f"model {model!r} not found in {inputs}: copy {model}.onnx into the PVC's inputs/ directory")


def cmd_run(args: argparse.Namespace) -> int:
    model = args.model or _model_for_index(args.models_file)
    model_path = _model_path(args.inputs, model)
    index = os.environ.get("JOB_COMPLETION_INDEX", "0")
    run_dir = args.runs / os.environ.get("JOB_NAME", "local") / index
    name = Path(model).stem if model.endswith(".onnx") else model
    cmd = [sys.executable, "-m", "gpt_triton", "tune", str(model_path), "--model-name", name,
           "--repository", str(args.repository), "--out", str(run_dir), "--triton-url", args.triton_url]
    if args.spec is not None:
        cmd += ["--spec", str(args.spec)]
    if args.pushgateway:
        cmd += ["--pushgateway", args.pushgateway]
    if (run_dir / "report.json").exists() or any(run_dir.glob("*")):
        cmd.append("--resume")  # a retried pod (node disruption) continues from the tuning cache
    cmd += list(args.tune_args)
    print(f"gpt-triton k8s run: index {index}, model {model}: {' '.join(cmd)}", flush=True)
    rc = subprocess.call(cmd)
    promoted = None
    report_path = run_dir / "report.json"
    if report_path.is_file():
        try:
            value = json.loads(report_path.read_text()).get("promoted_path")
            promoted = Path(value) if value else None
        except ValueError:
            promoted = None
    # The whole artifact on the volume; the log gets one pointer line (and the capped copy only if asked).
    stored = bundle_mod.make_bundle(run_dir, promoted, max_bytes=sys.maxsize)
    path = bundle_mod.write_result(run_dir, stored)
    sys.stdout.write(bundle_mod.pointer_line(path, stored))
    if args.log_bundle:
        sys.stdout.write(bundle_mod.format_bundle(bundle_mod.make_bundle(run_dir, promoted, args.bundle_max_bytes)))
    sys.stdout.flush()
    return rc
