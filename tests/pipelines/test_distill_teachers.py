"""On-policy distillation's start checks (pipelines/distill/teachers.py): a teacher whose
tokenizer is not the student's, and a record whose tag no teacher takes, are refused."""

import copy

import pytest

from flywheel.pipelines.config import load_config_dict
from flywheel.pipelines.data.records import DataError, PromptRecord
from flywheel.pipelines.distill.teachers import (
    check_teacher_tags,
    check_teacher_tokenizers,
    tokenizer_mismatch,
)
from flywheel.platform.config.errors import ConfigError
from flywheel.platform.models.builtin import resolve_pretrain
from flywheel.workers.strategies.hf_model import load_tokenizer


@pytest.fixture(scope="module")
def student():
    return load_tokenizer(resolve_pretrain("builtin://tiny-qwen2-arith"))


def config(**teacher):
    return load_config_dict({"teacher": {"t": {
        "model_args": {"model_name_or_path": "builtin://tiny-qwen2"}, **teacher}}})


def test_the_built_in_models_share_one_tokenizer(student):
    cfg = config()
    check_teacher_tokenizers(cfg, student, load_tokenizer)  # the real teacher's: passes
    assert tokenizer_mismatch(student, load_tokenizer(resolve_pretrain("builtin://tiny-qwen2"))
                              ) is None


def test_a_teacher_with_another_tokenizer_is_refused_at_start_with_the_reason(student):
    grown = copy.deepcopy(student)
    grown.add_tokens(["<extra>"])
    with pytest.raises(ConfigError) as info:
        check_teacher_tokenizers(config(), student, lambda path: grown)
    assert info.value.key_path == "teacher.t.model_args.model_name_or_path"
    n = len(student.get_vocab())
    assert f"vocabularies of {n} (student) and {n + 1} (teacher) tokens" in info.value.message
    assert "does not re-tokenize" in info.value.message


def test_a_teacher_folder_without_a_tokenizer_is_refused(student, tmp_path):
    def bare(path):
        return load_tokenizer(str(tmp_path))  # an empty folder: no tokenizer files

    with pytest.raises(ConfigError, match="its tokenizer does not load"):
        check_teacher_tokenizers(config(), student, bare)


def test_the_first_differing_token_and_special_ids_are_named(student):
    class Swapped:
        eos_token_id, pad_token_id, bos_token_id = (student.eos_token_id,
                                                    student.pad_token_id, student.bos_token_id)

        def get_vocab(self):
            vocab = dict(student.get_vocab())
            a, b = sorted(vocab, key=vocab.get)[5:7]
            vocab[a], vocab[b] = vocab[b], vocab[a]
            return vocab

    assert "token id 5 is" in tokenizer_mismatch(student, Swapped())
    other_eos = copy.deepcopy(student)
    other_eos.eos_token = other_eos.convert_ids_to_tokens(7)
    assert "eos_token_id is" in tokenizer_mismatch(student, other_eos)


def record(tag):
    return PromptRecord(id=tag, prompt="1+1=", answer="2", tag=tag)


def test_a_record_whose_tag_no_teacher_takes_is_refused():
    cfg = config(tag_included=["math"])
    check_teacher_tags(cfg, [record("math")])
    with pytest.raises(DataError, match=r"2 record\(s\) with 'code' would go to no teacher"):
        check_teacher_tags(cfg, [record("math"), record("code"), record("code")])
    check_teacher_tags(config(), [record("code")])  # an empty tag_included takes every tag
