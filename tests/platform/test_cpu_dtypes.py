"""A half dtype the CPU lacks instructions for is said at run start, one line per role
(platform/cpu_dtypes.py): an AVX2-only x86 emulates bf16 and fp16; a Sapphire Rapids
(amx_bf16, avx512_fp16) and an Arm core with bf16 compute it; unknown flags say nothing."""

from __future__ import annotations

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.run.launch import started_dtypes
from flywheel.platform.cpu_dtypes import emulated_dtype_lines, emulated_dtypes

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n"
SAPPHIRE = "flags\t\t: avx2 avx512f avx512_fp16 amx_bf16 amx_tile\n"
ARM = "Features\t: fp asimd bf16 i8mm\n"


def test_the_cpus_flags_say_which_half_dtypes_are_emulated():
    assert emulated_dtypes(AVX2) == {"bf16", "fp16"}
    assert emulated_dtypes(SAPPHIRE) == set()
    assert emulated_dtypes(ARM) == {"fp16"}
    assert emulated_dtypes("") == set()


def test_a_role_in_an_emulated_dtype_gets_one_line_naming_its_key():
    lines = emulated_dtype_lines({"actor_train": "bf16", "actor_infer": "fp32",
                                  "reference": "fp16"}, AVX2)
    assert [line.split(":")[0] for line in lines] == ["actor_train.model_args.dtype",
                                                     "reference.model_args.dtype"]
    assert "write dtype: fp32" in lines[0]
    assert emulated_dtype_lines({"actor_train": "bf16"}, SAPPHIRE) == []


def test_the_lines_cover_the_roles_the_run_starts():
    """SFT starts actor_train alone: the schema's default actor_infer block is not named;
    a reward model is a model role, a rule reward is not."""
    sft = load_config_dict({"pipeline_type": "sft",
                            "actor_train": {"model_args": {"dtype": "bf16"}}})
    assert started_dtypes(sft) == {"actor_train": "bf16"}
    rlvr = load_config_dict({"pipeline_type": "rlvr",
                             "actor_infer": {"model_args": {"dtype": "bf16"}}})
    assert started_dtypes(rlvr) == {"actor_train": "fp32", "actor_infer": "bf16"}
    scored = load_config_dict({"pipeline_type": "rlvr", "rewards": {
        "rm": {"reward_type": "reward_model", "model_args": {
            "model_name_or_path": "builtin://tiny-qwen2-arith", "dtype": "bf16"}},
        "rule": {"reward_type": "math_rule"}}})
    assert started_dtypes(scored) == {"actor_train": "fp32", "actor_infer": "fp32",
                                      "rewards.rm": "bf16"}
