"""What the prompts are: the data blocks and the batch and length keys.

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`);
every field is documented once, here, beside its definition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from flywheel.platform.config.field_bounds import bounded


@dataclass
class ReasoningGymTask:
    # Relative share of this task's prompts among the block's tasks (> 0): each record's
    # task is drawn with probability weight / sum of weights (reasoning-gym's composite).
    weight: float = 1.0
    # The task's own settings (its config dataclass in reasoning-gym, e.g. basic_arithmetic's
    # min_digits, max_digits, operators): unknown keys and bad values are refused when the
    # data loads. seed and size are the block's, never a task's.
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReasoningGymArgs:
    # reasoning-gym task name -> its weight and settings, e.g. {basic_arithmetic: {}}; the
    # names are reasoning-gym's (`reasoning_gym.factory.DATASETS`), an unknown one is refused
    # when the data loads. A record's tag is its task's name (domain/* metrics, routing).
    tasks: dict[str, ReasoningGymTask] = field(default_factory=dict)
    # How many records are generated (>= 1): the prompt set, reshuffled every epoch.
    size: int = 500
    # Seed of the generator: the same seed, tasks and size give the same records, so a
    # resumed run draws the same prompts. Give validation another seed than training.
    seed: int = bounded(0, 0, 2**32 - 1)


@dataclass
class DataArgs:
    # Prompt template by name: "native" sends the prompt text as is after the tokenizer's
    # bos (a messages-list prompt is an error); "chat" applies the tokenizer's own chat
    # template. ROLL's names (qwen2_5, qwen3, chatml, llama3, ...; see
    # pipelines/data/prompt_templates.py) mean "chat": the template always comes from the
    # tokenizer.
    # An unknown name is an error. Unset: native; validation: actor_train's (a validation
    # value that differs from actor_train's is refused: both encode alike).
    template: str | None = None
    # Per-tag templates (ROLL's tag_to_template): a record whose tag (tag_key) is a key here
    # is encoded with that template, any other with `template`. Names as for `template`; a
    # tag that no training or validation record carries is an error (RLVR only; validation:
    # actor_train's).
    tag_to_template: dict[str, str] = field(default_factory=dict)
    # System message put first by the chat template (chat templates only); unset: the
    # template's own default, if any.
    system_prompt: str | None = None
    # Keyword arguments of the tokenizer's apply_chat_template (e.g. enable_thinking:
    # false), chat templates only.
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # JSONL (.jsonl/.json, one record a line) or parquet files; `builtin://arithmetic/train`
    # and `/val` name the built-in synthetic math set. A single string is one file (ROLL).
    file_name: list[str] = field(default_factory=list)
    # JSONL field holding the prompt text.
    prompt_key: str = "prompt"
    # JSONL field holding the reference answer the reward compares against. A dotted name
    # the row lacks as a column reads inside a dict column ("reward_model.ground_truth":
    # ROLL's VL and verl's layout).
    answer_key: str = "answer"
    # Records tagged with a domain route to the reward whose tag_included holds it.
    tag_key: str = "tag"
    # Keep only the first N records (0 = all): quick runs and CI.
    max_samples: int = 0
    # ROLL's column names, accepted beside prompt_key/answer_key/tag_key: prompt (text
    # column), messages (a column of chat-message lists, or their JSON text), response (the
    # reference answer), id, tag. Each replaces its flywheel key; written together with a
    # flywheel key (not at its default) that names another column, it is an error.
    prompt: str | None = None
    messages: str | None = None
    response: str | None = None
    id: str | None = None
    tag: str | None = None
    # SFT only (ROLL SFT's query_key): a column whose text, when a record has it, follows
    # the prompt column's after a newline in the user turn. Unset: the prompt alone.
    query: str | None = None
    # A prompt longer than the top-level prompt_length tokens (after templating): "filter"
    # drops it when the data loads and logs how many were dropped; "error" stops the run.
    overlong_prompts: Literal["filter", "error"] = "filter"
    # Most bytes of one JSONL line (one record), checked before it is parsed or tokenized:
    # a longer line is read past in bounded pieces, never whole, and then dropped and
    # counted (one warning naming the first file:line) or refused, as overlong_prompts
    # says. Raise it for records that carry their images inline. 0 = no limit.
    max_record_bytes: int = bounded(4 << 20, 0)
    # Images in prompts (issue 29; ROLL's VL data layout, pipelines/data/image_files.py).
    # The column holding a record's image or list of images: file paths under
    # image_folder, bytes, `data:image/...;base64,` URIs or {"bytes", "path"} structs. A
    # record without it (or with it empty) is a text prompt. Records with images need a
    # model with an image processor, and backends that take images: actor_train hf_train,
    # actor_infer hf_infer (acts_when/table.py refuses the image keys elsewhere).
    image_key: str = "images"
    # The folder every image path is read from and must resolve inside (symlinks
    # followed); unset: image paths are refused (bytes and data URIs need none).
    image_folder: str | None = None
    # Pixel bounds (width * height) each image is resized into before the model's
    # processor sees it, aspect ratio kept (ROLL's image_max_pixels / image_min_pixels;
    # unset: no bound on that side). Both sides of a run get the same resized image.
    image_max_pixels: int | None = None
    image_min_pixels: int | None = None
    # A record whose image cannot be used (missing file, unreadable or corrupt bytes, a
    # decompression bomb, a path outside image_folder, a URL): "error" stops the load with
    # a one-line message naming the record; "skip" drops it and logs how many were skipped.
    bad_images: Literal["error", "skip"] = "error"
    # RLVR training mix by domain (ROLL's key; actor_train only): domain -> probability,
    # e.g. {math: 0.7, code: 0.3}. A domain is a record tag found in the data or, as in
    # ROLL, a reward's name (the records that reward scores); a tag wins when a name is
    # both. Probabilities are >= 0 and sum to 1 (within 0.01, then rescaled exactly); every
    # record must fall in exactly one domain (probability 0 leaves a domain out). Each batch
    # then holds p * rollout_batch_size prompts of each domain, rounded with the remainder
    # carried to the next batch (so the long-run share is exact), each domain drawn in its
    # own seeded order, epoch after epoch (pipelines/rlvr/domain_mix.py). Empty: one shuffled
    # order over all records, whatever their tags.
    domain_interleave_probs: dict[str, float] = field(default_factory=dict)
    # Prompts generated by reasoning-gym tasks (pipelines/data/reasoning_gym_data.py) in
    # place of file_name (RLVR only); score them with `reward_type: reasoning_gym`, which
    # calls each task's own score_answer. The column keys and max_samples name file
    # columns and rows, so they are refused beside it.
    reasoning_gym: ReasoningGymArgs | None = None


@dataclass
class BatchKeys:
    """How many prompts a step takes, and how long they and their responses may be."""

    # Prompts per training step (before num_return_sequences_in_group expansion).
    rollout_batch_size: int = 32
    val_batch_size: int = 0  # 0 = the whole validation set
    # Most prompt tokens (after templating) of an RLVR or SFT record (refused in agentic
    # configs, whose prompts are the env's turns); longer ones are dropped or
    # refused by data_args.overlong_prompts. With response_length it sizes vllm's
    # max_model_len when strategy_config leaves it unset.
    prompt_length: int = bounded(256, 1)
    # Response budget in tokens: the default of actor_infer's and validation's
    # max_new_tokens (a different written max_new_tokens is an error). RLVR and SFT only:
    # agentic turns are budgeted by custom_envs.<tag>.max_tokens_per_step (capped by a
    # written actor_infer max_new_tokens).
    response_length: int = bounded(128, 1)
    # Most tokens of a whole sequence. Agentic: vllm's max_model_len when strategy_config
    # leaves it unset. RLVR: when written, prompt_length + response_length must fit in it.
    sequence_length: int | None = None
