"""Search spaces: YAML -> a validated, conditional Optuna define-by-run space.

Format: tuner/workloads/spaces/README.md (the built-in spaces are the package data
``tuner/workloads/spaces/<workload>.yaml``). A space is validated completely before Ray starts;
every error names the file, the knob, the bad value and what is accepted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml

from tuner.errors import SpaceError
from tuner.knobs import (
    CHOICE_KNOBS,
    CUDA_ONLY_KNOBS,
    CUDA_ONLY_VALUES,
    DDP_BUCKET_CAP_MB,
    DDP_VALUES,
    DEVICE_PATH_REFUSED,
    KNOB_INFO,
    WORKER_KNOBS,
    Knobs,
)
from tuner.settings import DEVICE_TYPES

_TOP_KEYS = {"knobs", "description", *DEVICE_TYPES}


@dataclass(frozen=True)
class IntRange:
    """Integer knob range, inclusive; ``log`` samples on a log scale."""
    low: int
    high: int
    log: bool = False
    step: int = 1

    def contains(self, value: Any) -> bool:
        return isinstance(value, int) and self.low <= value <= self.high and (
            self.log or (value - self.low) % self.step == 0)

    def describe(self) -> str:
        return f"[{self.low}, {self.high}]" + (" log" if self.log else "")


@dataclass(frozen=True)
class Choices:
    """Categorical knob values."""
    values: tuple

    def contains(self, value: Any) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)

    def describe(self) -> str:
        return "{" + ", ".join(_fmt(v) for v in self.values) + "}"


Domain = IntRange | Choices


@dataclass(frozen=True)
class Space:
    """A validated search space: sampled knobs (domains) and constant knobs.

    Call ``for_device`` to get the space a run actually samples.
    """
    source: str
    domains: Mapping[str, Domain]
    constants: Mapping[str, Any]
    overrides: Mapping[str, tuple[Mapping[str, Domain], Mapping[str, Any]]] = field(
        default_factory=dict)
    """Per device type ('cpu'/'cuda'): domains and constants replacing those of ``knobs``."""
    global_batch: int | None = None
    """When set, grad_accum = global_batch // batch_size in every sampled configuration."""

    def for_device(self, device_type: str, max_workers: int,
                   max_batch: int | None = None) -> "Space":
        """Drop what cannot apply on ``device_type``; an integer ``num_workers`` range ends at
        ``max_workers`` (the node's CPU count, the most a trial can get: the YAML's ``high``
        is a prior written for some other machine, raised or lowered here), and ``batch_size``
        is capped at ``max_batch`` (the dataset's sample count: a larger batch never fills)."""
        base_domains, base_constants = dict(self.domains), dict(self.constants)
        over_domains, over_constants = self.overrides.get(device_type, ({}, {}))
        for name in (*over_domains, *over_constants):
            base_domains.pop(name, None)
            base_constants.pop(name, None)
        base_domains.update(over_domains)
        base_constants.update(over_constants)
        domains: dict[str, Domain] = {}
        for name, dom in base_domains.items():
            if device_type == "cpu" and name in CUDA_ONLY_KNOBS:
                continue
            if device_type == "cpu" and name in CUDA_ONLY_VALUES and isinstance(dom, Choices):
                kept = tuple(v for v in dom.values if v not in CUDA_ONLY_VALUES[name])
                if len(kept) == 1:
                    base_constants[name] = kept[0]  # the one value the space allows on CPU
                if len(kept) <= 1:
                    continue
                dom = Choices(kept)
            if name == "num_workers" and isinstance(dom, IntRange) and dom.high != max_workers:
                dom = IntRange(dom.low, max(dom.low, max_workers), dom.log, dom.step)
            if name == "batch_size" and max_batch is not None:
                dom = _cap(dom, max_batch)
            domains[name] = dom
        constants = base_constants
        if device_type == "cpu":
            for name in CUDA_ONLY_KNOBS:
                constants.pop(name, None)
        return Space(self.source, domains, constants, {}, self.global_batch)

    def workers_bound(self, device_type: str) -> int | None:
        """The space file's own bound on ``num_workers`` on ``device_type`` (its range's high,
        or its largest choice), before ``for_device`` fits a range to the node's CPUs; None
        where the knob is not searched."""
        dom = self.overrides.get(device_type, ({}, {}))[0].get("num_workers",
                                                               self.domains.get("num_workers"))
        if isinstance(dom, IntRange):
            return dom.high
        return max(dom.values) if isinstance(dom, Choices) else None

    def with_workers_high(self, high: int) -> "Space":
        """The space with an integer ``num_workers`` range ending at ``high`` (raised past the
        node's CPUs for an input pipeline that waits: ``tuner.probe.input_waits``); a choice
        list, or a space that does not search the knob, is unchanged."""
        dom = self.domains.get("num_workers")
        if not isinstance(dom, IntRange):
            return self
        dom = IntRange(dom.low, max(dom.low, high), dom.log, dom.step)
        return Space(self.source, {**self.domains, "num_workers": dom}, self.constants,
                     self.overrides, self.global_batch)

    def for_world_size(self, world_size: int, node_cpus: int) -> "Space":
        """The space of data-parallel trials of ``world_size`` ranks: DDP's knobs sampled
        (``DDP_DOMAINS``; a space that gives them keeps its own), and ``num_workers`` per rank
        capped so that the ranks' workers and training processes do not oversubscribe the
        node's ``node_cpus`` (world size x (num_workers + 1) <= node_cpus). Unchanged at
        world size 1."""
        if world_size <= 1:
            return self
        domains = {**DDP_DOMAINS, **self.domains}
        high = max(0, node_cpus // world_size - 1)
        dom = domains.get("num_workers")
        constants = dict(self.constants)
        if isinstance(dom, IntRange) and dom.high > high:
            if dom.low >= high:
                domains.pop("num_workers")
                constants["num_workers"] = high
            else:
                domains["num_workers"] = IntRange(dom.low, high, dom.log, dom.step)
        elif isinstance(dom, Choices):
            kept = tuple(v for v in dom.values if v <= high) or (min(dom.values),)
            domains["num_workers"] = Choices(kept)
        return Space(self.source, domains, constants, self.overrides, self.global_batch)

    def with_batch_high(self, high: int) -> "Space":
        """The space with an integer ``batch_size`` range ending at ``high``, above or below
        the YAML's (the memory probe's bound; the dataset's size while probing). A choice list
        is only capped: its values were chosen by hand."""
        dom = self.domains.get("batch_size")
        if dom is None:
            return self
        if isinstance(dom, IntRange):
            dom = IntRange(dom.low, max(dom.low, high), dom.log, dom.step)
        else:
            dom = _cap(dom, high)
        return Space(self.source, {**self.domains, "batch_size": dom}, self.constants,
                     self.overrides, self.global_batch)

    def with_batch_low(self, low: int) -> "Space":
        """The space with its ``batch_size`` range starting at ``low`` (at most its high; a
        choice list keeps its values from ``low`` up, or its largest when none is): the low end
        re-centred on the machine's knee (``tuner.probe.ComputeCurve``), where smaller batches
        only repeat the per-step overhead. Unchanged when ``low`` is at or below the low end."""
        dom = self.domains.get("batch_size")
        if dom is None:
            return self
        if isinstance(dom, IntRange):
            if low <= dom.low:
                return self
            dom = IntRange(min(low, dom.high), dom.high, dom.log, dom.step)
        else:
            dom = Choices(tuple(v for v in dom.values if v >= low) or (max(dom.values),))
        return Space(self.source, {**self.domains, "batch_size": dom}, self.constants,
                     self.overrides, self.global_batch)

    def without(self, name: str, value: Any) -> "Space":
        """The space with ``value`` no longer sampled for the choice knob ``name`` (held at the
        one value left, when one is); unchanged when ``name`` does not sample ``value``."""
        dom = self.domains.get(name)
        if not isinstance(dom, Choices) or value not in dom.values:
            return self
        kept = tuple(v for v in dom.values if v != value)
        if len(kept) == 1:
            return self.fixed(name, kept[0])
        return Space(self.source, {**self.domains, name: Choices(kept)}, self.constants,
                     self.overrides, self.global_batch)

    def fixed(self, name: str, value: Any) -> "Space":
        """The space with knob ``name`` no longer sampled: held at ``value``."""
        if name not in self.domains:
            return self
        domains = {k: v for k, v in self.domains.items() if k != name}
        return Space(self.source, domains, {**self.constants, name: value}, self.overrides,
                     self.global_batch)

    def bounds(self) -> dict[str, str]:
        """The searched range of each sampled knob, as shown at the start of a run."""
        return {name: dom.describe() for name, dom in self.domains.items()}

    def distributions(self) -> dict:
        """Optuna distributions of the sampled knobs (to add measured trials to a study)."""
        from optuna.distributions import CategoricalDistribution, IntDistribution
        out = {}
        for name, dom in self.domains.items():
            if isinstance(dom, IntRange):
                out[name] = IntDistribution(dom.low, dom.high, log=dom.log,
                                            step=1 if dom.log else dom.step)
            else:
                out[name] = CategoricalDistribution(list(dom.values))
        return out

    def sampler(self) -> "DefineByRun":
        return DefineByRun(dict(self.domains), dict(self.constants), self.global_batch)

    def with_global_batch(self, global_batch: int) -> "Space":
        """Fix the global batch: ``batch_size`` ranges over the divisors of ``global_batch``
        inside its domain, and ``grad_accum = global_batch // batch_size``, so every trial
        trains with the same optimizer semantics.

        Raises:
            SpaceError: no divisor lies inside the batch_size domain.
        """
        dom = self.domains.get("batch_size")
        if dom is None:
            dom = Choices((self.constants["batch_size"],))
        divisors = tuple(d for d in range(1, global_batch + 1)
                         if global_batch % d == 0 and dom.contains(d))
        if not divisors:
            raise SpaceError(f"--global-batch-size {global_batch}: no divisor lies in the "
                             f"batch_size domain {dom.describe()} of {self.source}")
        domains = dict(self.domains)
        domains["batch_size"] = Choices(divisors)
        constants = {
            k: v for k, v in self.constants.items() if k not in ("batch_size", "grad_accum")
        }
        domains.pop("grad_accum", None)
        return Space(self.source, domains, constants, {}, global_batch)

    def fit_reference(self, knobs: Knobs) -> Knobs:
        """A reference configuration under a fixed global batch: same micro-batch, grad_accum
        making up the global batch (SpaceError if the micro-batch does not divide it)."""
        if self.global_batch is None:
            return knobs
        if self.global_batch % knobs.batch_size:
            raise SpaceError(f"--global-batch-size {self.global_batch} is not a multiple of the "
                             f"reference batch_size {knobs.batch_size}")
        return knobs.replace(grad_accum=self.global_batch // knobs.batch_size)

    def fit_references(self, references: Mapping[str, Knobs]) -> tuple[tuple[str, Knobs], ...]:
        """``fit_reference`` for every named reference, checked together (name, knobs pairs in
        the order given).

        Raises:
            SpaceError: under ``--global-batch-size``, a reference whose micro-batch does not
                divide it: one line naming every such reference and the global batch sizes
                that work for all of them (multiples of the least common multiple of their
                ``batch_size``).
        """
        n = self.global_batch
        bad = {name: k.batch_size for name, k in references.items()
               if n is not None and n % k.batch_size}
        if bad:
            lcm = math.lcm(*(k.batch_size for k in references.values()))
            above = lcm * max(1, -(-n // lcm))  # the smallest multiple of lcm >= n
            sizes = ", ".join(f"{name} {k.batch_size}" for name, k in references.items())
            raise SpaceError(
                f"--global-batch-size {n} is not a multiple of the batch_size of "
                f"{', '.join(f'{name} ({b})' for name, b in bad.items())}; each reference keeps "
                f"its micro-batch, so the global batch must be a multiple of {lcm} (reference "
                f"batch sizes: {sizes}), e.g. {above} or {above + lcm}")
        return tuple((name, self.fit_reference(k)) for name, k in references.items())

    def project(self, knobs: Knobs) -> dict[str, Any]:
        """The Optuna parameters that describe ``knobs`` in this space (for enqueueing a
        reference configuration). Raises SpaceError if a value lies outside its domain."""
        params = {}
        values = knobs.to_dict()
        for name, dom in self.domains.items():
            if name in WORKER_KNOBS and knobs.num_workers == 0:
                continue
            value = values[name]
            if name == "ddp_bucket_cap_mb" and value is None:
                value = DDP_BUCKET_CAP_MB  # what None means
            if (
                name in ("num_workers", "batch_size")
                and isinstance(dom, IntRange)
                and value > dom.high
            ):
                # A reference may use more workers than this node has CPUs (or a batch larger
                # than the dataset); the trial still runs it as written, the search records it
                # at the cap.
                value = dom.high
            if name == "batch_size" and isinstance(dom, IntRange) and value < dom.low:
                # A reference's batch below a range re-centred on the knee (with_batch_low):
                # it runs as written, the search records it at the low end.
                value = dom.low
            if not dom.contains(value):
                raise SpaceError(
                    f"search space {self.source}: knob {name} {dom.describe()} excludes the "
                    f"reference value {_fmt(values[name])}; widen the space to include it")
            params[name] = value
        return params


class DefineByRun:
    """Optuna define-by-run space (picklable: Ray Tune checkpoints the searcher).

    ``prefetch_factor`` and ``persistent_workers`` are suggested only when ``num_workers > 0``;
    ``data_path`` is suggested first, and with 'device' no DataLoader knob is (``DEVICE_PATH_NO``).
    Returns constants merged over the suggestions.
    """

    def __init__(self, domains: dict[str, Domain], constants: dict[str, Any],
                 global_batch: int | None = None):
        self.domains = domains
        self.constants = constants
        self.global_batch = global_batch

    def __call__(self, trial) -> dict[str, Any]:
        chosen: dict[str, Any] = {}
        # the data path first: the device path has no DataLoader, so none of its knobs
        order = sorted(self.domains, key=lambda name: name != "data_path")
        for name in order:
            dom = self.domains[name]
            if name in DEVICE_PATH_NO and _data_path(chosen, self.constants) == "device":
                continue
            if name in WORKER_KNOBS and _workers(chosen, self.constants) == 0:
                continue
            if isinstance(dom, IntRange):
                step = None if dom.log else dom.step
                chosen[name] = trial.suggest_int(name, dom.low, dom.high, log=dom.log,
                                                 **({"step": step} if step else {}))
            else:
                chosen[name] = trial.suggest_categorical(name, list(dom.values))
        out = dict(self.constants)
        if _data_path(chosen, self.constants) == "device":
            out.update(num_workers=0, pin_memory=False)
        if _workers({**chosen, **out}, self.constants) == 0:
            for name in WORKER_KNOBS:
                out.pop(name, None)
        if self.global_batch is not None:
            out["grad_accum"] = self.global_batch // chosen["batch_size"]
        return out


def candidates(space: Space) -> list[int]:
    """Batch sizes ``space`` allows, ascending: its ``batch_size`` choices, every integer of
    its range (every ``step``-th for a linear one), or its constant."""
    dom = space.domains.get("batch_size")
    if isinstance(dom, Choices):
        return sorted(dom.values)
    if isinstance(dom, IntRange):
        return list(range(dom.low, dom.high + 1, 1 if dom.log else dom.step))
    return [space.constants["batch_size"]]


def _cap(dom: Domain, high: int) -> Domain:
    if isinstance(dom, IntRange):
        return dom if dom.high <= high else IntRange(dom.low, max(dom.low, high), dom.log, dom.step)
    kept = tuple(v for v in dom.values if v <= high)
    return Choices(kept or (min(dom.values),))


DDP_DOMAINS: dict[str, Domain] = {name: Choices(values) for name, values in DDP_VALUES.items()}
"""DistributedDataParallel's knobs as a data-parallel run samples them (``KnobInfo.ddp_values``
in ``tuner.knobs``)."""

DEVICE_PATH_NO = DEVICE_PATH_REFUSED
"""Knobs of the DataLoader, which the ``device`` data path does not use: not suggested there
(num_workers 0, pin_memory false) (``KnobInfo.loader_only`` in ``tuner.knobs``)."""


def _data_path(chosen: Mapping[str, Any], constants: Mapping[str, Any]) -> str:
    return str(chosen.get("data_path", constants.get("data_path", "loader")))


def _workers(chosen: Mapping[str, Any], constants: Mapping[str, Any]) -> int:
    return int(chosen.get("num_workers", constants.get("num_workers", 0)))


SPACES_PACKAGE = "tuner.workloads"
"""The package whose data holds the built-in spaces, under ``SPACES_DIR``."""
SPACES_DIR = "spaces"


def builtin_path(name: str) -> str:
    """The built-in space of workload ``name`` as shown to the user (the file's path in the
    source tree and in site-packages): 'tuner/workloads/spaces/ddpm.yaml'."""
    return f"{SPACES_PACKAGE.replace('.', '/')}/{SPACES_DIR}/{name}.yaml"


def load_space(name_or_path: str | Path, *, is_file: bool = False) -> Space:
    """Load a space by workload name (package data) or from a file (``is_file``, or a name
    ending in ``.yaml``: a workload's own space file, ``tuner.workload.Workload.space``).

    Raises:
        SpaceError: unreadable file, malformed YAML, unknown keys or knobs, impossible ranges.
    """
    if is_file or str(name_or_path).endswith(".yaml"):
        path = Path(name_or_path)
        source = str(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise SpaceError(f"search space {source}: cannot read it "
                             f"({exc.strerror or type(exc).__name__})") from None
        text = _decode(data, source)
    else:
        source = builtin_path(str(name_or_path))
        try:
            file = resources.files(SPACES_PACKAGE) / SPACES_DIR / f"{name_or_path}.yaml"
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SpaceError(
                f"no built-in search space {source}; pass one with --space FILE"
            ) from None
    return parse_space(text, source)


def _decode(data: bytes, source: str) -> str:
    """The text of a space file: UTF-8 (a BOM allowed) or UTF-16 with its BOM. Raises
    SpaceError for anything else (an image, an archive, a file in another encoding)."""
    encoding = "utf-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        byte = data[exc.start:exc.start + 1].hex()
        what = ("a binary file, not YAML text" if b"\x00" in data[:8192]
                else f"not {encoding.removesuffix('-sig').upper()} text")
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpaceError(f"search space {source}: {what} (byte 0x{byte} at offset {exc.start}, "
                         f"line {line}, is not {encoding.removesuffix('-sig').upper()}); "
                         "expected a UTF-8 YAML file (see tuner/workloads/spaces/README.md)"
                         ) from None


def _yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    """A YAML error as ``line L, column C: problem (context)`` (1-based, as editors count)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return (f"line {line}, column {column}: character {code:#06x} is not allowed in "
                "YAML (is this a text file?)")
    detail = " ".join(str(problem or exc).split())
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context:
        where = (f" that starts at line {context_mark.line + 1}, column {context_mark.column + 1}"
                 if context_mark is not None and context_mark != mark else "")
        detail += f" ({' '.join(str(context).split())}{where})"
    if mark is None:
        return detail
    return f"line {mark.line + 1}, column {mark.column + 1}: {detail}"


def _did_you_mean(name: Any, accepted: Any) -> str:
    """``did you mean 'x'? `` for a near miss of an accepted name, else ''."""
    import difflib
    close = difflib.get_close_matches(str(name), [str(a) for a in accepted], n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def parse_space(text: str, source: str) -> Space:
    """Parse and validate YAML text (see load_space)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpaceError(f"search space {source}: malformed YAML at "
                         f"{_yaml_problem(exc, text)}") from None
    if isinstance(doc, dict):
        unknown = sorted((k for k in doc if k not in _TOP_KEYS), key=str)
        if unknown:
            raise SpaceError(f"search space {source}: unknown key(s) "
                             f"{', '.join(map(str, unknown))}; "
                             f"{_did_you_mean(unknown[0], _TOP_KEYS)}"
                             f"accepted: {', '.join(sorted(_TOP_KEYS))}")
    if not isinstance(doc, dict) or not isinstance(doc.get("knobs"), dict) or not doc["knobs"]:
        raise SpaceError(
            f"search space {source}: expected a mapping with a non-empty 'knobs:' mapping"
        )
    domains, constants = _parse_knobs(doc["knobs"], source, "knobs")
    overrides = {}
    for device_type in DEVICE_TYPES:
        if device_type in doc:
            if not isinstance(doc[device_type], dict):
                raise SpaceError(f"search space {source}: '{device_type}:' must map knobs to "
                                 "ranges or values (overrides for that device)")
            overrides[device_type] = _parse_knobs(doc[device_type], source, device_type)
    if "batch_size" not in domains and "batch_size" not in constants:
        raise SpaceError(
            f"search space {source}: knob batch_size must be given (a range or a value)"
        )
    return Space(source, domains, constants, overrides)


def _parse_knobs(
    section: dict, source: str, label: str
) -> tuple[dict[str, Domain], dict[str, Any]]:
    domains: dict[str, Domain] = {}
    constants: dict[str, Any] = {}
    for name, spec in section.items():
        if name not in KNOB_INFO:
            raise SpaceError(f"search space {source}: unknown knob {name!r} under '{label}:'; "
                             f"{_did_you_mean(name, Knobs.names())}"
                             f"accepted: {', '.join(Knobs.names())}")
        where = f"search space {source}: knob {name}"
        if isinstance(spec, dict):
            domains[name] = _parse_domain(name, spec, where)
        else:
            value = _normalise(name, spec)
            _check_value(name, value, where)
            constants[name] = value
    return domains, constants


def _parse_domain(name: str, spec: dict, where: str) -> Domain:
    if "choices" in spec:
        if set(spec) != {"choices"}:
            raise SpaceError(f"{where}: 'choices' cannot be combined with "
                             f"{sorted(set(spec) - {'choices'}, key=str)}")
        values = spec["choices"]
        if not isinstance(values, list) or not values:
            raise SpaceError(f"{where}: 'choices' must be a non-empty list, got {values!r}")
        normalised = tuple(_normalise(name, v) for v in values)
        for v in normalised:
            _check_value(name, v, where)
        return Choices(normalised)
    allowed = {"low", "high", "log", "step"}
    unknown = sorted(set(spec) - allowed, key=str)
    if unknown and _did_you_mean(unknown[0], [*allowed, "choices"]):
        raise SpaceError(f"{where}: unknown key {unknown[0]!r} in a range; "
                         f"{_did_you_mean(unknown[0], [*allowed, 'choices'])}a range is "
                         "{low: N, high: M[, log: true][, step: K]} or {choices: [...]}")
    if not {"low", "high"} <= set(spec) or unknown:
        raise SpaceError(f"{where}: a range is {{low: N, high: M[, log: true][, step: K]}} or "
                         f"{{choices: [...]}}, got {spec!r}")
    low, high, log, step = spec["low"], spec["high"], spec.get("log", False), spec.get("step", 1)
    if KNOB_INFO[name].kind != "int":
        raise SpaceError(f"{where}: a low/high range needs an integer knob; use choices for it")
    for label, v in (("low", low), ("high", high), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpaceError(f"{where}: {label}={v!r} must be an integer")
    if not isinstance(log, bool):
        raise SpaceError(f"{where}: log={log!r} must be true or false")
    if low > high:
        raise SpaceError(f"{where}: impossible range low={low} > high={high}")
    if step < 1 or (log and step != 1):
        raise SpaceError(f"{where}: step={step} must be >= 1 (and 1 with log: true)")
    if log and low < 1:
        raise SpaceError(f"{where}: log scale needs low >= 1, got low={low}")
    _check_value(name, low, where)
    _check_value(name, high, where)
    return IntRange(low, high, log, step)


def _normalise(name: str, value: Any) -> Any:
    # YAML 1.1 reads a bare `off` as false; for the string knobs it means "off".
    if name in CHOICE_KNOBS and value is False:
        return "off"
    return value


def _check_value(name: str, value: Any, where: str) -> None:
    probe = {"batch_size": 1, name: value}
    if name in WORKER_KNOBS:
        probe["num_workers"] = 1
    try:
        Knobs.from_dict(probe)
    except (ValueError, TypeError) as exc:
        raise SpaceError(f"{where}: {exc}") from None


def _fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)

