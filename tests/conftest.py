import os
from pathlib import Path

import pytest
import torch

from tests.support import session_report

pytest_plugins = ["tests.support.hub_fixtures"]

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # pytest-xdist workers share the cores: torch's default (a thread per core in each) would oversubscribe them
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

TESTS = Path(__file__).resolve().parent
#: Tests marked ``slow``: ``make test-fast`` (``pytest -m "not slow"``) leaves them out, ``make test`` runs
#: them. Each starts Python processes, builds environments, compiles, or converts and verifies models at
#: full size: seconds to minutes each. A key is a folder, a file, or ``file::test`` (a name prefix).
SLOW = {
    "timm_suite": "timm's own model tests, in a child pytest",
    "training": "timm's train.py and validate.py, torchrun DDP, the digits example",
    "models/test_compile.py": "torch.compile",
    "models/test_export.py": "ONNX, torch.export and TorchScript, with timm's scripts",
    "models/test_pretrained_scripts.py": "timm's train.py / validate.py on pretrained tags",
    "packaging/test_wheel.py": "builds the wheel and a venv",
    "packaging/test_autoload.py": "builds wheel and editable venvs",
    "packaging/test_benchmark.py": "runs the benchmark end to end",
    "docs/test_doc_blocks.py": "re-runs every command the docs show",
    "convert/test_fuzz_loaders.py": "property-based fuzzing, in worker processes",
    "convert/test_resource_bounds.py": "memory-capped worker processes",
    "hub/test_hub_faults.py": "huggingface_hub's retries against injected faults",
    "hub/test_pull_interrupted_and_concurrent.py": "killed and concurrent pull processes",
    "hub/test_hub.py": "push and pull through the local Hub server, fresh loading processes",
    "hub/test_local_hub.py": "the local Hub server as a process",
    "convert/test_convert_sources.py": "every source format converted and verified by its own library",
    "convert/test_convert_features.py": "conversions with resampling, dtypes and training checkpoints, verified",
    "convert/test_convert_roundtrip.py": "import and export through every format",
    "convert/test_any_architecture.py": "off-table architectures converted and verified",
    "models/test_equivalence_timm.py": "our models against timm's, ViT-B included",
    "models/test_pretrained_loading.py": "pretrained tags loaded at full size from laid-out caches",
    "convert/test_assumptions.py::test_cli": "the convert command in processes",
    "convert/test_convert_bad_input.py::test_conversion_killed_mid_write": "conversions killed in processes",
    "convert/test_convert_bad_input.py::test_failed_verification": "a verification at ViT-Ti size",
    "convert/test_convert_bad_input.py::test_pickle_that_would_run_code": "loads in processes",
    "packaging/test_cli.py::test_a_closed_pipe": "vitscratch list in processes",
    "packaging/test_cli.py::test_version": "the CLI in a process",
    "packaging/test_cli.py::test_unknown_model": "the CLI in a process",
    "packaging/test_cli.py::test_summary_and_attention_take_hf_hub": "push and read through the local Hub server",
    "docs/test_attention_example.py": "renders the example picture twice",
    "inspect/test_attention_maps.py::test_nonzero_exit": "the CLI in processes",
    "models/test_pretrained_tags.py::test_list_pretrained": "the CLI in a process",
    "models/test_model.py::test_torch_compile": "torch.compile",
    "models/test_cold_start.py::test_fresh_model_initialised_like_timm": "every variant initialised, ViT-H included",
    "convert/test_convert_bad_input.py::test_unknown_source_format": "a conversion per format",
    "convert/test_convert_bad_input.py::test_identity_layer_scale": "a verified conversion",
    "convert/test_hostile_checkpoints.py::test_the_payload_is_live": "the payload run in a process",
    "convert/test_assumptions.py::test_wrong_head_count": "three verified conversions",
    "hub/test_hub_configs.py": "every variant's config generated and built",
    "inspect/test_attention_maps.py::test_command_writes_png": "a ViT-Ti picture rendered",
    "inspect/test_attention_maps.py::test_missing_output": "the CLI in a process",
    "inspect/test_attention_maps.py::test_command_reads": "the CLI on a model directory",
    "inspect/test_attention_maps.py::test_failure_while_writing": "a ViT-Ti picture rendered",
    "trust/test_probes.py": "each probe in a memory-capped child process",
    "trust/test_fuzz_trust.py": "fuzz cases in crash-isolated child processes",
    "trust/test_config_data.py::test_attention_refuses": "the attention command in processes",
    "hub/test_concurrent_writers.py": "concurrent writer processes",
    "hub/test_push_labels.py": "push and pull through the local Hub server",
    "hub/test_push_sends_only_the_model.py": "push through the local Hub server",
    "hub/test_transformers_loading.py": "transformers' pipeline on converted and pulled directories",
    "hub/test_without_fcntl.py": "convert, push and pull in a process without fcntl",
    "convert/test_install_kills.py": "writers killed at every install step",
    "convert/test_hostile_checkpoints.py::test_vitscratch_convert_refuses": "the convert command in processes",
    "models/test_naflex_packed.py::test_compile": "torch.compile",
    "models/test_naflex_packed.py::test_compiled": "torch.compile",
    "models/test_naflex_packed.py::test_onnx": "ONNX export, checked in onnxruntime",
    "models/test_naflex_packed.py::test_padded_path_exports": "torch.export",
    "models/test_naflex_packed.py::test_flops_do_not_grow": "FLOP counts of padded batches",
    "models/test_model.py::test_torch_export": "torch.export and fx tracing",
    "models/test_timm_contracts.py::test_attention_extract": "timm's AttentionExtract, fx tracing included",
    "models/test_timm_options.py::test_torchscript": "TorchScript",
    "models/test_timm_options.py::test_act_and_norm_layer_load": "conversions verified against timm",
    "models/test_library_uses.py::test_peft": "peft's LoRA adapters",
    "models/test_offline_errors.py": "loads of every tag with the Hub unreachable",
    "models/test_pretrained_tags.py::test_torchvision_tag": "torchvision's weights enums",
    "packaging/test_cli.py::test_summary": "the summary of full-size models",
    "packaging/test_cli.py::test_list_has_every_variant": "every variant built and counted",
    "inspect/test_summary_report.py::test_cli": "the summary command in processes",
    "inspect/test_counts.py::test_real_torchsummary": "torchsummary over full-size models",
    "inspect/test_flops.py::test_analytic_matches_flop_counter": "torch's FLOP counter over full-size models",
    "inspect/test_flops.py::test_every_variant": "torch's FLOP counter over every variant",
    "inspect/test_layer_table.py::test_rows_sum_to_torchsummary": "torchsummary over full-size models",
    "hub/test_pull_hostile_hub.py": "pulls against a hostile local Hub, slow bodies included",
    "hub/test_fuzz_hostile_hub.py": "pulls against a local Hub that mutates its answers",
    "hub/test_timm_load_hostile_hub.py": "hf-hub: loads against a hostile local Hub",
    "hub/test_push_uploads_what_it_checked.py": "a push per request, with a file swapped at that request",
    "hub/test_model_card_is_data.py": "pushes through the local Hub server",
    "trust/test_naflex_probes.py": "NaFlex probes in memory-capped child processes",
    "trust/test_fuzz_naflex.py": "NaFlex fuzz cases in a crash-isolated worker",
    "trust/test_fuzz_model_card.py": "model-card fuzz cases in a crash-isolated worker",
    "trust/test_config_cannot_redirect_weights.py": "every loading route, the CLI in processes",
    "convert/test_checkpoint_gate.py": "crafted checkpoints through every reader",
    "convert/test_transformers_config.py": "transformers configs checked and verified",
    "convert/test_convert_writes_what_loads.py": "conversions in capped child processes",
    "inspect/test_picture_gate.py": "picture bombs in capped child processes",
    "packaging/test_gate_routes.py": "every route run under a profiler, push and pull included",
}


def _is_slow(item) -> bool:
    relative = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()
    node = f"{relative}::{item.name}"
    return any(
        relative == key or relative.startswith(key + "/") or ("::" in key and node.startswith(key)) for key in SLOW
    )


def pytest_collection_modifyitems(items):
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_sessionfinish(session):
    """Hand this process's end-of-run report to the controller (xdist worker), or keep it to print."""
    parts = session_report.own_parts()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["session_report"] = parts
    else:
        session_report.merge(parts)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: known only where pytest-xdist is installed
def pytest_testnodedown(node, error):
    parts = getattr(node, "workeroutput", {}).get("session_report")
    if parts:  # a worker that crashed before its session finished hands over nothing
        session_report.merge(parts)


def pytest_terminal_summary(terminalreporter):
    """timm's test table and how many fuzz cases ran (tests/support/fuzzing.py counts them), by loader and outcome."""
    session_report.write(terminalreporter)
