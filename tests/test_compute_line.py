"""The summary's compute line and the machine's compute limit row (``tuner.summary``): what
they print where the FLOPs are unknown or tiny (a simulated card's 18-parameter model), and
why a limit the best ran faster than is no limit."""

from __future__ import annotations

from tuner.ceilings import MACHINE_BATCHES, MachineCompute, verdict
from tuner.summary import _compute_line, _machine_cells, flop_text, without_best_switches


def test_unknown_or_zero_flops_say_so_and_never_print_zeros():
    for flops in (None, 0.0):
        line = _compute_line({"model_flops_per_sample": flops, "achieved_tflops": 0.0,
                              "mfu_pct": 0.0})
        assert "unknown" in line and "0.00" not in line and "MFU 0.0%" not in line


def test_tiny_flops_are_shown_in_a_unit_that_reads_them():
    """The simulated H200's stand-in model (216 FLOP a sample) at 5,000 samples/sec: kFLOP
    and MFLOP/s, and an MFU below what one decimal shows, said as such."""
    line = _compute_line({"model_flops_per_sample": 216.0, "achieved_tflops": 1.08e-6,
                          "mfu_pct": 1e-9})
    assert line == ("compute: 0.22 kFLOP/sample (forward + backward) · 1.08 MFLOP/s achieved"
                    " · MFU below 0.1% of the card's dense peak")
    assert "0.00" not in line


def test_a_real_model_keeps_gflop_and_tflop():
    """ddpm on an H100: 15.3 GFLOP a sample (FlopCounterMode), 4,851 samples/sec."""
    line = _compute_line({"model_flops_per_sample": 15.3e9, "achieved_tflops": 74.2,
                          "mfu_pct": 7.5})
    assert line == ("compute: 15.30 GFLOP/sample (forward + backward) · 74.20 TFLOP/s "
                    "achieved · MFU 7.5% of the card's dense peak")
    assert flop_text(0.98e9) == "0.98 GFLOP" and flop_text(5e6) == "5.00 MFLOP"


def _limit(rate: float, best: float, switches: list[str]) -> MachineCompute:
    return MachineCompute(samples_per_sec=rate, trial_id="probe", batch_size=384, grad_accum=1,
                          amp="bf16", data_path=MACHINE_BATCHES, verdict=verdict(rate, best),
                          switches=switches)


def test_a_limit_measured_without_the_best_s_layout_says_so():
    """The memory probe's timed steps (bf16, no channels_last) read 4,154.5 on the simulated
    H200 under 12 GB; the best ran 5,133.7 with channels_last and tf32: the row names what the
    limit ran without, not 'a disturbed measurement'."""
    best = {"amp": "bf16", "channels_last": True, "tf32": True, "samples_per_sec": 5133.7}
    limit = _limit(4154.5, 5133.7, [])
    assert without_best_switches(limit, best) == ["channels_last", "tf32"]
    judged, text = _machine_cells(limit, best)
    assert judged == "not a bound"
    assert "measured without the best's channels_last, tf32" in text
    assert "disturbed" not in text


def test_a_limit_with_the_best_s_switches_that_reads_below_it_is_a_disturbed_measurement():
    best = {"amp": "bf16", "channels_last": True}
    judged, text = _machine_cells(_limit(4000.0, 5000.0, ["channels_last"]), best)
    assert judged == "not a bound" and "disturbed" in text
    judged, text = _machine_cells(_limit(5500.0, 5000.0, []), best)
    assert judged == "91% of it"  # above the best: a bound, whatever its switches


def test_a_run_that_recorded_no_trial_says_so_without_an_empty_tally():
    from rich.console import Console

    from tuner.driver import RunSummary
    from tuner.summary import print_summary
    console = Console(record=True, width=200)
    print_summary(console, None, RunSummary("run-a", "fake", "cpu", "tiny", [], 13.0,
                                            "/tmp/results"))
    assert "0 trials in 13 s; leaderboard: /tmp/results/leaderboard" in console.export_text()
