"""The torch side of a trial: the code that runs inside a Ray worker (or a rank of a
data-parallel trial) and measures one configuration.

* ``harness``: one trial top to bottom (build, warm up, timed windows, the result row) and
  ``make_trainable``, the Ray Tune trainable of a workload;
* ``result_columns``: the result row's columns the loop does not measure (environment, rates
  and MFU, compile time, a failed or stopped trial's columns);
* ``steppers``: one optimizer step of each kind (plain, AMP, compiled, data-parallel);
* ``apply``: the knobs applied to torch and restored after (cuDNN, TF32, threads, ...);
* ``measure``: windows, step times, memory and the breakdown of a step;
* ``flops``: FLOPs per sample, counted on the meta device;
* ``failures``: out-of-memory and the other ways a trial fails, recognised in one place;
* ``ranks``, ``distributed``: the ranks of a data-parallel trial under Ray Train;
* ``validate``: the winner as a plain training loop, against the trial's figure.

Everything outside this package is torch-free at import, apart from the workloads.
"""
