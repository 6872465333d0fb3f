"""The tests whose outcome depends on the wall clock: they time real steps, sleeps, deadlines
or other processes' CPU use. Each must pass 20 runs in 20 beside another suite; they carry the
``timing`` marker (``pytest -m timing``), and ``bench/flaky_check.py`` runs them repeatedly
beside a second suite and counts the passes per test."""

TIMING_TESTS: dict[str, tuple[str, ...]] = {
    "test_harness.py": (
        "test_ok_trial_measures_and_reports_every_window",
        "test_on_cpu_the_breakdown_is_timed_inside_the_windows_not_in_extra_steps",
        "test_steps_longer_than_half_a_window_skip_the_steady_state_probes",
        "test_windows_of_whole_long_steps_drop_nothing_and_judge_no_steady_state",
        "test_the_steady_state_is_judged_from_the_windows_and_a_transient_window_is_dropped",
        "test_a_trial_stopped_in_the_window_after_a_drop_is_recorded_without_the_dropped_one",
        "test_one_warm_up_step_of_one_time_costs_does_not_make_the_steps_long",
        "test_a_steady_trial_runs_no_probe_before_its_windows",
        "test_a_warm_up_step_that_would_end_past_the_cap_is_not_started",
        "test_no_window_begins_past_the_deadline",
    ),
    "test_budget_runs.py": (
        "test_a_budget_run_ends_in_time_and_early_stopping_prunes_slow_trials",
    ),
    "test_limits.py": (
        "test_an_injected_ceiling_below_the_pipeline_is_measured_again_and_flagged",
        "test_time_to_train_prediction",
    ),
    "test_load.py": (
        "test_the_trials_own_cpu_time_counts_its_descendants_and_no_other_process",
    ),
    "test_codegen.py": (
        "test_validate_trains_with_the_printed_lines_and_reads_the_trials_rate",
    ),
    "test_faults_ray.py": ("test_an_address_where_another_service_listens_stops_in_seconds",),
}
"""Test file name -> the names of its timing-dependent tests (parametrised ones included)."""


def mark(items, marker, whole_files: bool) -> None:
    """Adds ``marker`` to the collected ``items`` named in ``TIMING_TESTS``.

    Raises:
        LookupError: ``whole_files`` (no node id or ``-k`` narrowed the collection) and a name
            listed for a collected file matches no test in it: renamed or deleted, the list
            must follow.
    """
    seen: dict[str, set[str]] = {}
    for item in items:
        file = item.path.name
        seen.setdefault(file, set()).add(item.originalname)
        if item.originalname in TIMING_TESTS.get(file, ()):
            item.add_marker(marker)
    for file, names in seen.items():
        missing = set(TIMING_TESTS.get(file, ())) - names
        if missing and whole_files:
            raise LookupError(f"tests/timing.py lists tests that {file} does not have: "
                              f"{sorted(missing)}")
