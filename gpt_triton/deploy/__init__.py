"""Deploy a candidate as a Triton model: config.pbtxt (via model_config_pb2) and version files."""

from gpt_triton.deploy._config import (
    ADAPTER_SOURCE,
    RUNTIME_FILE,
    choose_backend,
    config_text,
    default_max_batch_size,
    model_config,
    parse_config,
    write_model,
    write_version_files,
)
from gpt_triton.deploy._load import deploy_candidates, unload_candidates

__all__ = [
    "ADAPTER_SOURCE",
    "RUNTIME_FILE",
    "choose_backend",
    "config_text",
    "default_max_batch_size",
    "deploy_candidates",
    "model_config",
    "parse_config",
    "unload_candidates",
    "write_model",
    "write_version_files",
]
