"""Shared test set-up: import paths, and which tests are the slow sweeps.

``make test`` runs everything but the sweeps below (``-m "not slow"``); ``make test-slow``
runs the sweeps; CI runs both. A sweep is slow because it exports many models or runs
many stage processes, not because it checks something the fast run does not touch:
each class it covers has a representative in the fast run.
"""

import os
import sys
from pathlib import Path

import pytest

# the export cache stays off unless a test turns it on with --cache-dir (tests/test_cache.py):
# no test reads or writes the user's cache, subprocesses included
os.environ["GRAPHCHECK_NO_CACHE"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))

# node-id prefixes of the slow sweeps, and fast representatives kept out of them
SLOW = (
    # torchtitan's models (each export ~30 s): the fast representative is the torchtitan-style
    # toy staged by torchtitan's own split (tests/test_conventions.py) and the layout test
    "tests/test_torchtitan.py::test_llama3_map_judges_every_boundary",
    "tests/test_torchtitan.py::test_verifies_unadapted",
    "tests/test_torchtitan.py::test_gate_equal_bytes_and_bitwise_isolation",
    "tests/test_torchtitan.py::test_moe_routing_is_proven_token_wise",
    "tests/test_torchtitan.py::test_flex_attention_as_it_stands",
    "tests/test_torchtitan.py::test_llama3_verifies_unadapted_with_torchtitans_stages",
    "tests/test_families.py::",  # every family at every cut, and their option variants
    "tests/test_hf_attention.py::test_each_pattern_is_refused_at_export",
    "tests/test_hf_attention.py::test_gate_agrees_with_the_twin",
    "tests/test_optable.py::test_table_covers_every_op_of_the_family",
    "tests/test_stages.py::test_allows_index_keeping_builders_at_every_cut",
    "tests/test_stages.py::test_allows_rebuild_where_offset_is_a_multiple",
    "tests/test_stages.py::test_real_hybrid_model",
    "tests/test_stages.py::test_flags_rebuild_that_flips_window_and_first_norm",  # GC301 row
    "tests/test_build_state.py::test_allows_the_twin_without_hidden_state",
    "tests/test_build_state.py::test_stage_module_that_moves_the_layer_container",
    "tests/test_build_state.py::test_model_given_as_object",
    "tests/test_build_state.py::test_identical_per_layer_buffers",
    "tests/test_build_state.py::test_flip_is_found_through_a_wrapping_stage",
    "tests/test_build_state.py::test_stage_without_a_layer_container",
    "tests/test_build_state.py::test_flags_state_left_by_building_or_tracing[first_cached",
    "tests/test_build_state.py::test_flags_state_left_by_building_or_tracing[counted",
    "tests/test_gate.py::test_cli_train_exit_status_and_json",
    "tests/test_gate.py::test_wrapped_stage_module_steps_every_parameter",
    "tests/test_gate.py::test_cli_stage_module_that_moves_the_layers_loads_its_weights[unwrapped",
    "tests/test_gate.py::test_independent_head_is_equal_after_one_step",
    "tests/test_gate.py::test_rebuilt_stages_that_flip_the_window_differ",
    "tests/test_gate.py::test_index_keeping_builder_runs_the_stage_modules",
    "tests/test_stages.py::test_flags_stage_dropping_the_model_loop_rounding",
    "tests/test_stages.py::test_flags_stage_running_a_layer_the_uncut_program_prunes",
    "tests/test_gate.py::test_static_pass_implies_equal_bytes",
    "tests/test_gate.py::test_random_",
    "tests/test_gate.py::test_hybrid_family_runs_on_the_stand_in_kernels",
    "tests/test_gate.py::test_class_counter_that_does_not_restart",
    "tests/test_gate.py::test_three_stages_hand_over_one_residual_each",
    "tests/test_gate.py::test_stage_names_map_to_global_names",
    "tests/test_dataflow.py::test_map_of_64_layers_uses_one_export",
    "tests/test_dataflow.py::test_strict_export",
    "tests/test_hf.py::test_full_size",
    "tests/test_adversarial.py::test_static_pass_implies_gate_agrees",
    "tests/test_soundness_dataflow.py::test_flags_a_data_dependent_size_tied_to_t",
    "tests/test_packaging.py::test_installed_package",
    "tests/test_buffer_values.py::test_constants_and_tables_keyed_by_layer",
    "tests/test_buffer_values.py::test_stages_built_in_this_process_compare_values_too",
    "tests/test_stage_default.py::test_a_stage_is_built_once_per_process",
    "tests/test_subgraph_names.py::test_regions_on_every_layer_prove_their_stage_programs",
    "tests/test_subgraph_names.py::test_flex_",
    "tests/test_subgraph_names.py::test_a_flex_",
    "tests/test_subgraph_names.py::test_torchtitan_",
    "tests/test_stage_default.py::test_twin_that_sets_the_flag_on_every_stage_passes",
    "tests/test_stage_default.py::test_not_pipeline_aware_passes_and_says_stage_programs_not_"
    "proven[violations:sdpa_doc_mask]",
    "tests/test_gate_exact.py::test_every_legal_twin_is_bitwise_isolated[backward_masked]",
    "tests/test_gate.py::test_model_with_none_layer_slots_runs_per_process",
    "tests/test_stage_false_alarms.py::test_token_choice_moe_proves_its_stage_programs",
    "tests/test_flat_residual.py::test_stage_programs_prove_alike_at_every_interior_cut",
    "tests/test_flat_residual.py::test_gate_runs_the_batched_twin_alike",
    "tests/test_flat_residual.py::test_gate_trains_the_flat_twin_alike",
    "tests/test_flat_residual.py::test_gate_stops_a_stage_that_hands_over_another_wire_than",
)
FAST = (
    "tests/test_families.py::test_dense_families_pass_at_every_legal_cut[llama]",
    "tests/test_families.py::test_moe_families_pass_at_every_legal_cut[qwen3_moe]",
    "tests/test_optable.py::test_table_covers_every_op_of_the_family[llama]",
    "tests/test_optable.py::test_table_covers_every_op_of_the_family[qwen3_moe]",
    "tests/test_gate.py::test_static_pass_implies_equal_bytes[reference:reference-4-None]",
    "tests/test_gate.py::test_static_pass_implies_equal_bytes[violations:fp32_residual-3-differ]",
    "tests/test_gate.py::test_static_pass_implies_equal_bytes[violations:skip_connection-1-blocked]",
    "tests/test_gate.py::test_static_pass_implies_equal_bytes"
    "[violations:ignores_cu_seqlens-4-isolation]",
    "tests/test_adversarial.py::test_static_pass_implies_gate_agrees[roll_masked_shift-4]",
    "tests/test_adversarial.py::test_static_pass_implies_gate_agrees[token_choice_moe-4]",
)


# the commands that prove stage programs by default
STAGED = ("verify", "plan")


@pytest.fixture
def cli(capsys):
    """The command line run in this process: ``cli("verify", MODEL, ...)`` returns
    ``(exit status, stdout, stderr)``. The tests using it are about the other rules:
    ``verify`` and ``plan`` get ``--stage-builder none`` unless they name a builder (the
    default has its own tests: tests/test_stage_default.py, with ``cli_default``)."""
    return _runner(capsys, opt_out=True)


@pytest.fixture
def cli_default(capsys):
    """The command line as a user runs it: stage programs proven by default."""
    return _runner(capsys, opt_out=False)


def _runner(capsys, opt_out: bool):
    from graphcheck.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        args = [str(a) for a in argv]
        if opt_out and args and args[0] in STAGED and "--stage-builder" not in args:
            args += ["--stage-builder", "none"]
        code = main(args)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def pytest_collection_modifyitems(config, items):
    for item in items:
        nodeid = item.nodeid.replace("\\", "/")
        if nodeid.startswith(SLOW) and nodeid not in FAST:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def exports(monkeypatch):
    """How many times a model was exported (graphcheck.api's export, counted)."""
    from graphcheck import api

    calls = []
    real = api.export_model

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "export_model", counted)
    return calls
