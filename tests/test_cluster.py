"""tuner.cluster.validate_cluster_config: the repository's cluster.yaml passes Ray's schema and
Ray's own checks offline; broken copies fail with one line naming the file, the JSON path of the
bad value and what was expected."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tuner.cluster import validate_cluster_config
from tuner.errors import TunerError

CLUSTER_YAML = Path(__file__).resolve().parent.parent / "cluster.yaml"


@pytest.fixture(scope="module")
def repo_config() -> dict:
    return validate_cluster_config(CLUSTER_YAML)


def test_repo_cluster_yaml_validates(repo_config):
    head = repo_config["head_node_type"]
    workers = {n: t for n, t in repo_config["available_node_types"].items() if n != head}
    assert "GPU" not in repo_config["available_node_types"][head]["resources"]
    gpu_types = [t for t in workers.values() if t["resources"].get("GPU", 0) >= 1]
    assert gpu_types, "no GPU worker type"
    for node_type in gpu_types:
        assert any(k.startswith("accelerator_type:") for k in node_type["resources"])
        assert node_type["max_workers"] > node_type["min_workers"]  # it autoscales


def test_repo_cluster_yaml_installs_the_mounted_checkout(repo_config):
    assert repo_config["file_mounts"]["~/tuner"] == "."
    assert "pip install -e ~/tuner" in repo_config["setup_commands"]
    assert all("RAY_AUTH_MODE=token" in cmd for cmd in
               repo_config["head_start_ray_commands"][1:] +
               repo_config["worker_start_ray_commands"][1:])


def test_repo_cluster_yaml_holds_no_credentials():
    text = CLUSTER_YAML.read_text().lower()
    for word in ("aws_access_key_id", "aws_secret_access_key", "ssh_private_key", "password",
                 "token:"):
        assert word not in text


def _broken(tmp_path: Path, config: dict, change) -> Path:
    config = copy.deepcopy(config)
    change(config)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _rename_setup_commands(c):
    c["setup_comands"] = c.pop("setup_commands")


def _half_gpu(c):
    c["available_node_types"]["gpu"]["resources"]["GPU"] = 0.5


def _min_above_max(c):
    c["available_node_types"]["gpu"].update(min_workers=3, max_workers=2)


@pytest.mark.parametrize("change, expected", [
    (_rename_setup_commands, "setup_comands: unknown key; did you mean 'setup_commands'?"),
    (_half_gpu, "available_node_types.gpu.resources.GPU: 0.5 is not of type 'integer'"),
    (_min_above_max, "available_node_types.gpu.min_workers: 3 is greater than "
                     "available_node_types.gpu.max_workers (2)"),
    (lambda c: c["available_node_types"]["gpu"].pop("resources"),
     "available_node_types.gpu: 'resources' is a required property"),
    (lambda c: c.update(max_workers=0),
     "max_workers: 0 is less than the sum of min_workers"),
    (lambda c: c.update(head_node_type="cpu"),
     "head_node_type: 'cpu' is not one of the available_node_types"),
    (lambda c: c["setup_commands"].__setitem__(0, ["pip", "install"]),
     "setup_commands[0]: ['pip', 'install'] is not of type 'string'"),
    (lambda c: c["provider"].update(type="awz"), "provider.type: Unsupported node provider: awz"),
], ids=["top-level-typo", "fractional-gpu", "min-above-max", "no-resources", "global-max",
        "head-type", "command-type", "provider-type"])
def test_invalid_copy_fails_with_one_clear_line(tmp_path, repo_config, change, expected):
    path = _broken(tmp_path, repo_config, change)
    with pytest.raises(TunerError) as info:
        validate_cluster_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(TunerError, match=r"nope\.yaml: no such file"):
        validate_cluster_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("text, expected", [
    ("cluster_name: [tuner\n", "line 2, column 1: malformed YAML"),
    ("- a\n- b\n", "(top level): expected a mapping of cluster settings"),
    ("", "(top level): expected a mapping of cluster settings"),
])
def test_malformed_yaml(tmp_path, text, expected):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(TunerError) as info:
        validate_cluster_config(path)
    assert str(info.value).startswith(f"{path}: ")
    assert expected in str(info.value)
