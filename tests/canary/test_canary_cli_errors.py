"""User errors of `gpt-triton canary` are one line and exit code 2, before anything changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from prom_fixtures import free_port
from sleepy_model import write_sleepy_model

from gpt_triton.cli import main


def canary(repository: Path, *extra: str) -> list[str]:
    return ["canary", "--repository", str(repository), "--model", "sleepy", "--triton-url",
            f"127.0.0.1:{free_port()}", *extra]


def test_missing_candidate_version_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_sleepy_model(tmp_path)
    code = main(canary(tmp_path, "--candidate-version", "9", "--prometheus", "http://127.0.0.1:1"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "no version directory 9" in err and "\n" not in err


def test_unreachable_prometheus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_sleepy_model(tmp_path)
    code = main(canary(tmp_path, "--candidate-version", "2", "--prometheus", f"127.0.0.1:{free_port()}"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Prometheus" in err and "--prometheus" in err


def test_unreachable_triton(tmp_path: Path, prometheus_factory, capsys: pytest.CaptureFixture[str]) -> None:
    write_sleepy_model(tmp_path)
    prom = prometheus_factory(triton_targets=[])
    code = main(canary(tmp_path, "--candidate-version", "2", "--prometheus", prom.url))
    err = capsys.readouterr().err.strip()
    assert code == 3 and "Triton at" in err and "--triton-url" in err, err  # transient: worth a retry


def test_bad_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_sleepy_model(tmp_path)
    code = main(canary(tmp_path, "--candidate-version", "2", "--prometheus", "x", "--steps", "50,10"))
    assert code == 2 and "increasing" in capsys.readouterr().err
