"""Offline check of a Ray cluster-launcher YAML (``python -m tuner check-cluster FILE``).

Three checks, in order; the first problem found is raised as one line naming the file, the JSON
path of the bad value and what was expected:

1. Ray's own JSON schema (``ray/autoscaler/ray-schema.json``, draft-07) through ``jsonschema``:
   unknown keys, wrong types (resource counts are integers), missing required keys.
2. Worker counts the schema cannot express: ``min_workers <= max_workers`` per node type, the
   sum of ``min_workers`` within the global ``max_workers``, ``head_node_type`` naming a node type.
3. Ray's ``prepare_config`` + ``validate_config`` (what ``ray up`` runs after filling in the
   provider's defaults). Private API: skipped when it cannot be imported.

Not caught offline (checked against Ray 2.60's schema): typos inside a provider's
``node_config`` (the schema leaves it open), and anything that needs the cloud (AMI, quotas,
credentials). Node types must list their ``resources``: ``ray up`` looks them up on AWS.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
import reprlib
from pathlib import Path
from typing import Any, Iterable

from tuner.errors import TunerError, one_line

_MESSAGE_CHARS = 160
"""A bad value longer than this is abbreviated in the error line."""
_LINE_CHARS = 2 * _MESSAGE_CHARS
"""A message quoted in the error line (YAML's, the schema's, Ray's) is cut to this length."""


def validate_cluster_config(path: str | Path) -> dict:
    """Load a Ray cluster YAML and validate it as ``ray up`` would, without any cloud access.

    Args:
        path: the cluster-launcher YAML file.

    Returns:
        The configuration as loaded (not filled out with Ray's provider defaults).

    Raises:
        TunerError: missing file, malformed YAML, or an invalid configuration; one line, e.g.
            ``cluster.yaml: available_node_types.gpu.resources.GPU: 0.5 is not of type 'integer'``.
    """
    path = Path(path)
    config = _load(path)
    _check_schema(path, config)
    _check_worker_counts(path, config)
    _check_with_ray(path, config)
    return config


def _load(path: Path) -> dict:
    import yaml
    if path.is_dir():
        raise TunerError(f"{path}: is a directory, expected a Ray cluster YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TunerError(f"{path}: no such file (expected a Ray cluster YAML file)") from None
    except UnicodeDecodeError as exc:
        data = path.read_bytes()
        what = "a binary file" if b"\x00" in data[:8192] else "not UTF-8 text"
        raise TunerError(f"{path}: {what} (byte 0x{data[exc.start:exc.start + 1].hex()} at "
                         f"offset {exc.start} is not UTF-8); expected a Ray cluster YAML "
                         "file") from None
    except OSError as exc:
        raise TunerError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise TunerError(f"{path}: {where}malformed YAML ({one_line(problem, _LINE_CHARS)})"
                         ) from None
    if not isinstance(config, dict):
        raise TunerError(f"{path}: (top level): expected a mapping of cluster settings "
                         f"(cluster_name, provider, available_node_types, ...), "
                         f"got {type(config).__name__}")
    return config


def _schema() -> dict:
    import ray.autoscaler
    return json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json")
                      .read_text(encoding="utf-8"))


def _check_schema(path: Path, config: dict) -> None:
    import jsonschema
    schema = _schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = list(validator.iter_errors(config))
    if not errors:
        return
    error = jsonschema.exceptions.best_match(errors)
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    raise TunerError(f"{path}: {_describe(error)}{more}")


def _describe(error) -> str:
    """``<json path>: <problem>`` for one jsonschema error."""
    where = list(error.absolute_path)
    if error.validator == "additionalProperties":
        known = list(error.schema.get("properties", {}))
        unknown = [k for k in error.instance if k not in known]
        if unknown:
            key = unknown[0]
            hint = difflib.get_close_matches(str(key), known, n=1)
            expected = (f"did you mean {hint[0]!r}?" if hint
                        else f"expected one of: {', '.join(known)}")
            return f"{_json_path([*where, key])}: unknown key; {expected}"
    if error.validator == "type":
        expected = error.validator_value
        expected = (" or ".join(repr(t) for t in expected) if isinstance(expected, list)
                    else repr(expected))
        return f"{_json_path(where)}: {_short(error.instance)} is not of type {expected}"
    if error.validator == "required" and where[:1] == ["available_node_types"] and \
            "resources" in error.message:
        return (f"{_json_path(where)}: {error.message} (list the node's resources, e.g. "
                '{"CPU": 8, "GPU": 1}: `ray up` looks them up on AWS, an offline check cannot)')
    return f"{_json_path(where)}: {one_line(error.message, _LINE_CHARS)}"


def _check_worker_counts(path: Path, config: dict) -> None:
    """Checks the schema cannot express. Runs after it, so the values are integers."""
    node_types = config.get("available_node_types")
    if node_types is None:
        return
    names = ", ".join(node_types) or "none"
    head = config.get("head_node_type")
    if head is None:
        raise TunerError(f"{path}: head_node_type: missing; expected one of the "
                         f"available_node_types ({names})")
    if head not in node_types:
        raise TunerError(f"{path}: head_node_type: {head!r} is not one of the "
                         f"available_node_types ({names})")
    for name, node_type in node_types.items():
        where = ["available_node_types", name]
        low, high = node_type.get("min_workers", 0), node_type.get("max_workers")
        for key, value in (("min_workers", low), ("max_workers", high)):
            if value is not None and value < 0:
                raise TunerError(f"{path}: {_json_path([*where, key])}: {value} is negative; "
                                 "expected a count >= 0")
        if high is not None and low > high:
            raise TunerError(f"{path}: {_json_path([*where, 'min_workers'])}: {low} is greater "
                             f"than {_json_path([*where, 'max_workers'])} ({high}); expected "
                             "min_workers <= max_workers")
    total_min = sum(t.get("min_workers", 0) for t in node_types.values())
    global_max = config.get("max_workers")
    if global_max is not None and total_min > global_max:
        raise TunerError(f"{path}: max_workers: {global_max} is less than the sum of "
                         f"min_workers over available_node_types ({total_min}); expected "
                         f"max_workers >= {total_min}")


def _check_with_ray(path: Path, config: dict) -> None:
    """Ray's own checks on the config filled out with the provider's defaults."""
    import click
    import jsonschema
    try:
        from ray.autoscaler._private.util import prepare_config, validate_config
    except ImportError:  # private API: moved or removed in this Ray version
        return
    try:
        validate_config(prepare_config(copy.deepcopy(config)))
    except jsonschema.ValidationError as exc:  # a provider default the config clashes with
        raise TunerError(f"{path}: {_describe(exc)} (after Ray filled in the provider's "
                         "defaults)") from None
    except NotImplementedError as exc:  # "Unsupported node provider: ..."
        raise TunerError(f"{path}: provider.type: {one_line(exc, _LINE_CHARS)}") from None
    except (ValueError, RuntimeError, KeyError, AssertionError, click.ClickException) as exc:
        message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
        raise TunerError(f"{path}: rejected by Ray's own checks: "
                         f"{one_line(message, _LINE_CHARS) or type(exc).__name__}") from None


_PLAIN_KEY = re.compile(r"[A-Za-z_][\w\-:]*")


def _json_path(parts: Iterable[Any]) -> str:
    """``available_node_types.gpu.resources.GPU``; list items as ``[2]``; keys with dots or
    spaces as ``['ray.head.default']``; ``(top level)`` for the document itself."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"[{str(part)!r}]"
    return out or "(top level)"


def _short(value: Any) -> str:
    r = reprlib.Repr()
    r.maxstring = r.maxother = _MESSAGE_CHARS
    return one_line(r.repr(value), _LINE_CHARS)
