"""weight_sync_bucket_mb and the object store sized from the model (ray_runtime.py)."""

import pytest

from flywheel.config.schema import RayConfig
from flywheel.pipelines.config import load_config_dict
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.models.weight_size import checkpoint_numel, weight_bytes
from flywheel.platform.ray_runtime import object_store_bytes

MIB = 1 << 20


def error_for(data):
    with pytest.raises(ConfigError) as info:
        load_config_dict(data, source="f.yaml")
    return info.value


def test_bucket_size_is_a_positive_number_of_mib():
    assert load_config_dict({"weight_sync_bucket_mb": 1}).weight_sync_bucket_mb == 1
    error = error_for({"weight_sync_bucket_mb": 0})
    assert error.key_path == "weight_sync_bucket_mb" and "at least 1" in str(error)


def test_sft_has_no_weight_sync_to_bucket():
    error = error_for({"pipeline_type": "sft", "weight_sync_bucket_mb": 64})
    assert error.key_path == "weight_sync_bucket_mb" and "SFT does not use it" in str(error)


def test_object_store_fits_two_syncs_unless_given():
    assert object_store_bytes(RayConfig(), 1000 * MIB) == 2256 * MIB
    assert object_store_bytes(RayConfig(), 10 * MIB) == 512 * MIB  # the floor
    assert object_store_bytes(RayConfig(), None) == 512 * MIB  # size unknown
    assert object_store_bytes(RayConfig(object_store_memory_mb=300), 1000 * MIB) == 300 * MIB
    assert error_for({"ray": {"object_store_memory_mb": 0}}).key_path == (
        "ray.object_store_memory_mb")


def test_weight_bytes_read_from_the_safetensors_header(tiny_model_path, tmp_path):
    from safetensors.torch import load_file

    numel = sum(t.numel() for t in load_file(f"{tiny_model_path}/model.safetensors").values())
    assert checkpoint_numel(tiny_model_path) == numel
    assert weight_bytes(tiny_model_path, "bf16") == 2 * numel
    assert weight_bytes(str(tmp_path), "fp32") is None  # no safetensors: unknown
