"""Atomic promotion of a model version into the production Triton repository.

A version is written into a hidden temp folder in the model directory (Triton only loads numeric
folders), fsynced, then renamed to its number; the model-level config.pbtxt is replaced by rename too.
A failure at any step removes what this promotion wrote and leaves earlier versions untouched.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import py_compile
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import sha256_file
from gpt_triton.environment import environment_fingerprint
from gpt_triton.promote.lock import promotion_lock
from gpt_triton.promote.signing import (
    KEY_ENV,
    KEY_ID_PARAMETER,
    SIGNATURES_FILE,
    SIGNED_PARAMETER,
    sign_version_dir,
    signer_for,
)

PROVENANCE_FILE = "provenance.json"
CONFIG_FILE = "config.pbtxt"
# A signed copy of the model-level config written with the version, so verify can tell if config.pbtxt
# (outside every version folder, so unsigned itself) was edited since.
PROMOTED_CONFIG_FILE = "promoted_config.pbtxt"
TMP_PREFIX = ".tmp-"
# fullmatch, not match with "$": "$" also matches before a trailing newline.
_MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromotedVersion:
    version: int
    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)  # the provenance.json written
    pruned: list[int] = field(default_factory=list)  # versions removed by this promotion
    signed: bool = False  # False: promoted without a signing key (logged as a warning)


def list_versions(model_dir: Path) -> list[int]:
    """Numeric version folders of a model directory, ascending (what Triton would see)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0)


def next_version(model_dir: Path) -> int:
    """One past the highest existing version (1 for a new model); gaps from pruning are never reused."""
    versions = list_versions(model_dir)
    return versions[-1] + 1 if versions else 1


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Flush every file and folder below ``root`` so the rename never exposes unwritten data after a crash."""
    for dirpath, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            _fsync_path(Path(dirpath) / name)
        _fsync_path(Path(dirpath))


def _relative_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _compile_python(version_dir: Path) -> None:
    """Byte-compile the version's python files (the adapter) now, so they are signed with it.

    Triton's python backend imports model.py with the normal import system, which would otherwise write
    ``__pycache__`` into the signed folder at load time. Checked-hash pycs are validated against the
    source's hash, not its mtime, so a copied repository still uses them and nothing new is written.
    The cache tag is this interpreter's: promote with the Python minor version Triton's stub runs.
    """
    for source in sorted(version_dir.rglob("*.py")):
        py_compile.compile(
            str(source), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH
        )


def _write_provenance(version_dir: Path, provenance: dict[str, Any], model_name: str, version: int) -> dict[str, Any]:
    files = {rel: sha256_file(version_dir / rel) for rel in _relative_files(version_dir)}
    manifest: dict[str, Any] = dict(provenance)
    manifest.setdefault("created", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    manifest.update(
        model_name=model_name,
        version=version,
        environment=environment_fingerprint(),
        files=files,
    )
    try:
        text = json.dumps(manifest, indent=1, sort_keys=True, default=str)
    except (TypeError, ValueError) as exc:
        raise GptTritonError(f"provenance for {model_name} is not JSON-serialisable: {exc}") from exc
    (version_dir / PROVENANCE_FILE).write_text(text + "\n")
    return manifest


def _config_text(config: model_config_pb2.ModelConfig, model_name: str, version: int, serving: int | None,
                 key_id: str | None = None, only_new: bool = False) -> str:
    """The model-level config: the given one, named for the model, with a policy that keeps serving loadable.

    With a known serving version both it and the new one are listed (a canary needs both); otherwise the
    two newest stay loadable so the previous version survives a rollback; with ``only_new`` (the older
    versions are served by another backend, which this config cannot load) only the new one. With ``key_id`` (a signed
    promotion) its parameters say the versions are signed and by which key, where deleting a version's
    signatures.json cannot remove it (the adapter checks this file against the signed copy).
    """
    final = model_config_pb2.ModelConfig()
    final.CopyFrom(config)
    final.name = model_name
    for name in (SIGNED_PARAMETER, KEY_ID_PARAMETER):
        if name in final.parameters:
            del final.parameters[name]
    if key_id is not None:
        final.parameters[SIGNED_PARAMETER].string_value = "true"
        final.parameters[KEY_ID_PARAMETER].string_value = key_id
    final.ClearField("version_policy")
    if only_new:
        final.version_policy.specific.versions.append(version)
    elif serving is not None and serving != version:
        final.version_policy.specific.versions.extend(sorted({serving, version}))
    else:
        final.version_policy.latest.num_versions = 2
    return str(text_format.MessageToString(final))


def _current_config(model_dir: Path) -> tuple[bool, model_config_pb2.ModelConfig | None]:
    """(whether the model's config.pbtxt exists, the parsed config or None when it cannot be read)."""
    path = model_dir / CONFIG_FILE
    if not path.is_file():
        return False, None
    try:
        return True, text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    except (OSError, UnicodeDecodeError, text_format.ParseError):
        return True, None


def _other_backend(model_dir: Path, config: model_config_pb2.ModelConfig) -> bool:
    """Whether the model's current config.pbtxt serves with another backend than ``config`` (a hand-written
    onnxruntime model re-tuned into gpt-triton's python adapter): its versions then cannot load under the new
    config, so only the new version is listed. An unreadable config counts as another backend."""
    exists, current = _current_config(model_dir)
    if current is None:
        return exists
    return (current.backend, current.platform) != (config.backend, config.platform)


def _served_versions(model_dir: Path) -> set[int] | None:
    """The versions Triton serves now, by the current config.pbtxt's version_policy (no policy: Triton's
    default, the newest one); None when the config cannot be read, so nothing is pruned."""
    versions = list_versions(model_dir)
    exists, current = _current_config(model_dir)
    if not exists:
        return set(versions[-1:])
    if current is None:
        return None
    policy = current.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return set(versions)
    if which == "specific":
        return set(policy.specific.versions)
    return set(versions[-max(policy.latest.num_versions, 1):])


def _pinned_version(model_dir: Path) -> int | None:
    """The oldest version a specific version policy in the current config.pbtxt lists (production held on
    it; newer listed ones are canaries), if that version still exists."""
    current = _current_config(model_dir)[1]
    if current is None:
        return None
    if current.version_policy.WhichOneof("policy_choice") != "specific":
        return None
    listed = [v for v in current.version_policy.specific.versions if v in list_versions(model_dir)]
    return min(listed) if listed else None


def _prune(model_dir: Path, keep_versions: int, served: set[int] | None, new_version: int) -> list[int]:
    """Remove versions outside the newest ``keep_versions``, but never a served one (the pinned ``serving``
    version, or what the config served before this promotion), nor one newer than the oldest served one (a
    canary may need it), nor the new one."""
    if not served:
        return []
    versions = list_versions(model_dir)
    kept = set(versions[-keep_versions:]) | served | {new_version}
    removed = []
    for version in versions:
        if version in kept or version >= min(served):
            continue
        # Rename first so Triton never sees a half-deleted version folder.
        trash = model_dir / f"{TMP_PREFIX}prune-{version}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(model_dir / str(version), trash)
        except OSError:  # the new version is already in place; an unprunable old one is only clutter
            continue
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(version)
    return removed


def _clean_stale(model_dir: Path) -> None:
    """Temp folders left by a promotion that was killed: safe to remove while we hold the lock."""
    for entry in model_dir.iterdir():
        if entry.name.startswith(TMP_PREFIX) or entry.name.startswith(f".{CONFIG_FILE}.tmp-"):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def check_model_name(model_name: str) -> None:
    """A name Triton and the repository layout accept: one line naming it otherwise (tune checks it first)."""
    if not _MODEL_NAME.fullmatch(model_name):
        raise GptTritonError(f"bad model name {model_name!r}: use letters, digits, '_', '-', '.' (not starting with '.')")


def _prepare_model_dir(repository: Path, model_name: str) -> Path:
    check_model_name(model_name)
    model_dir = repository / model_name
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GptTritonError(f"cannot write to repository {repository}: {exc.strerror or exc}; check the path and its permissions") from exc
    if not os.access(model_dir, os.W_OK | os.X_OK):
        raise GptTritonError(f"cannot write to repository {model_dir}: permission denied; check its permissions")
    return model_dir


def promote(
    repository: Path,
    model_name: str,
    config: model_config_pb2.ModelConfig,
    write_version: Callable[[Path], None],
    provenance: dict[str, Any],
    *,
    keep_versions: int = 3,
    signing_key: bytes | None = None,
    serving_version: int | None = None,
) -> PromotedVersion:
    """Add the next version of ``model_name`` to ``repository`` atomically; see the module docstring.

    ``write_version(dir)`` fills the version folder; provenance.json (the caller's facts + environment
    fingerprint + file sha256s) and, with ``signing_key``, signatures.json are added here.
    """
    if keep_versions < 1:
        raise GptTritonError(f"keep_versions must be at least 1 (got {keep_versions})")
    repository = Path(repository)
    model_dir = _prepare_model_dir(repository, model_name)
    key_id = None
    if signing_key:
        signer = signer_for(signing_key)
        signer.check_can_sign()  # a public key fails here, before anything is written
        key_id = signer.key_id
    with promotion_lock(model_dir, model_name):
        _clean_stale(model_dir)
        served = {serving_version} if serving_version is not None else _served_versions(model_dir)
        # An operator's pin (a specific version policy) outlives the promotion: its oldest version stays listed.
        pinned = serving_version if serving_version is not None else _pinned_version(model_dir)
        if serving_version is not None and serving_version not in list_versions(model_dir):
            raise GptTritonError(
                f"serving version {serving_version} of {model_name} is not in {model_dir}: pass the version Triton serves"
            )
        version = next_version(model_dir)
        token = uuid.uuid4().hex[:12]
        tmp_dir = model_dir / f"{TMP_PREFIX}{token}"
        tmp_config = model_dir / f".{CONFIG_FILE}.tmp-{token}"
        final_dir = model_dir / str(version)
        renamed = False
        try:
            tmp_dir.mkdir()
            write_version(tmp_dir)
            if not any(tmp_dir.iterdir()):
                raise GptTritonError(f"promotion of {model_name} wrote no files into the version folder")
            for reserved in (PROVENANCE_FILE, SIGNATURES_FILE, PROMOTED_CONFIG_FILE):
                if (tmp_dir / reserved).exists():
                    raise GptTritonError(f"write_version must not write {reserved}: promotion adds it")
            config_text = _config_text(config, model_name, version, pinned, key_id,
                                       only_new=_other_backend(model_dir, config))
            (tmp_dir / PROMOTED_CONFIG_FILE).write_text(config_text)
            _compile_python(tmp_dir)
            manifest = _write_provenance(tmp_dir, provenance, model_name, version)
            if signing_key:
                sign_version_dir(tmp_dir, signing_key, model=model_name, version=version)
            _fsync_tree(tmp_dir)
            with open(tmp_config, "w") as handle:
                handle.write(config_text)
                handle.flush()
                os.fsync(handle.fileno())
            os.rename(tmp_dir, final_dir)
            renamed = True
            os.replace(tmp_config, model_dir / CONFIG_FILE)
        except BaseException as exc:
            if renamed and final_dir.exists():
                # Hide it again before deleting so Triton never sees a half-removed version.
                os.rename(final_dir, tmp_dir)
            shutil.rmtree(tmp_dir, ignore_errors=True)
            tmp_config.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                where = exc.filename or model_dir
                raise GptTritonError(f"promotion into {where} failed: {exc.strerror or exc}; nothing was changed") from exc
            raise
        # Make both renames durable. Best effort: some filesystems refuse fsync on a directory, and the
        # version is complete and visible either way.
        with contextlib.suppress(OSError):
            _fsync_path(model_dir)
        pruned = _prune(model_dir, keep_versions, served, version)
    if not signing_key:
        _log.warning("promoted %s version %d UNSIGNED: no signing key is set, so nothing can tell a tampered copy "
                     "from it; set %s to sign promotions", model_name, version, KEY_ENV)
    return PromotedVersion(version=version, path=final_dir, manifest=manifest, pruned=pruned, signed=bool(signing_key))
