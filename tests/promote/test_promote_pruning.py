"""keep_versions as tune applies it: promotion prunes old versions without a serving version given, reading
what Triton serves from the current config.pbtxt, and never removes a served (pinned) version nor the new one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from gpt_triton.promote.repository import list_versions, promote

Writer = Callable[[str], Callable[[Path], None]]


def _promote(repo: Path, config: model_config_pb2.ModelConfig, make_writer: Writer, payload: str, keep: int):  # type: ignore[no-untyped-def]
    return promote(repo, "m", config, make_writer(payload), {"run_id": payload}, keep_versions=keep)


def _pin(model_dir: Path, *versions: int) -> None:
    """What an operator does to hold production on a version: a specific version policy."""
    path = model_dir / "config.pbtxt"
    config = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    config.ClearField("version_policy")
    config.version_policy.specific.versions.extend(versions)
    path.write_text(text_format.MessageToString(config))


def test_tune_style_promotions_keep_only_keep_versions(tmp_path: Path, config: model_config_pb2.ModelConfig,
                                                       make_writer: Writer) -> None:
    """The fault: every tune kept every version. With keep_versions=1 and the config serving the two newest,
    each promotion leaves the new version and the two the config served."""
    repo = tmp_path / "repo"
    pruned = [_promote(repo, config, make_writer, p, keep=1).pruned for p in "abcdef"]
    assert list_versions(repo / "m") == [4, 5, 6]
    assert sum(pruned, []) == [1, 2, 3]


def test_a_pinned_version_is_never_pruned(tmp_path: Path, config: model_config_pb2.ModelConfig,
                                          make_writer: Writer) -> None:
    repo = tmp_path / "repo"
    for payload in "ab":
        _promote(repo, config, make_writer, payload, keep=1)
    _pin(repo / "m", 1)  # production pinned to version 1
    for payload in "cde":
        result = _promote(repo, config, make_writer, payload, keep=1)
        assert 1 not in result.pruned
    assert list_versions(repo / "m")[0] == 1 and list_versions(repo / "m")[-1] == 5
    # The pin outlives the promotions: production stays on 1, the new version is listed beside it.
    policy = text_format.Parse((repo / "m" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()).version_policy
    assert list(policy.specific.versions) == [1, 5]


def test_an_unreadable_config_prunes_nothing(tmp_path: Path, config: model_config_pb2.ModelConfig,
                                             make_writer: Writer) -> None:
    repo = tmp_path / "repo"
    for payload in "abc":
        _promote(repo, config, make_writer, payload, keep=3)
    (repo / "m" / "config.pbtxt").write_text("this is { not a config")
    assert _promote(repo, config, make_writer, "d", keep=1).pruned == []
    assert list_versions(repo / "m") == [1, 2, 3, 4]
