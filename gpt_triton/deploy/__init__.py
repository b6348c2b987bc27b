"""Deploy a candidate as a Triton model: config.pbtxt (via model_config_pb2) and version files."""

from gpt_triton.deploy._config import (
    ADAPTER_SOURCE,
    AUTOCOMPLETES_DYNAMIC_BATCHING,
    RUNTIME_FILE,
    UnservableError,
    choose_backend,
    config_text,
    default_max_batch_size,
    model_config,
    parse_config,
    serving_notes,
    unservable_runtimes,
    verify_plan,
    write_model,
    write_version_files,
)
from gpt_triton.deploy._load import deploy_candidates, unload_candidates
from gpt_triton.deploy._plan import (
    TRT_TO_TRITON,
    check_plan_config,
    describe_plan,
    engine_from_record,
    plan_engine,
)

__all__ = [
    "ADAPTER_SOURCE",
    "AUTOCOMPLETES_DYNAMIC_BATCHING",
    "RUNTIME_FILE",
    "TRT_TO_TRITON",
    "UnservableError",
    "check_plan_config",
    "choose_backend",
    "config_text",
    "default_max_batch_size",
    "deploy_candidates",
    "describe_plan",
    "engine_from_record",
    "model_config",
    "parse_config",
    "plan_engine",
    "serving_notes",
    "unload_candidates",
    "unservable_runtimes",
    "verify_plan",
    "write_model",
    "write_version_files",
]
