"""On-policy distillation's rules (schema/distill.py), checked without the data or models.

- the pipeline kind has a teacher role and reads it (config/kinds.py: `roles`,
  `reads_roles`; a kind without the role is refused in checks/kind.py);
- a teacher's name is a metric-name segment;
- a teacher runs on a training backend: it scores the student's tokens with a forward
  pass, which the generation backends do not offer;
- with tag routing (`tag_included`), every domain the data mix names has a teacher;
- `opd_mode: pure` reads no verifier advantage, so a critic (gae) would train for nothing;
- a context_template names only {prompt}, {answer}, {tag}; the student as its own teacher
  (weights: student) has one, and samples untruncated;
- over agentic episodes: no tag_included, context_template or weights: student (episodes
  have no records), trajectory rows only (no step_level_samples, turn_level_returns).

What needs the data or the models is checked at start: every record's tag has a teacher
(pipelines/distill/teachers.py `check_teacher_tags`), and each teacher's tokenizer is the
student's (`check_teacher_tokenizers`). Pure functions on a `PipelineConfig`, run by
`checks.check_config`; each raises `ConfigError`.
"""

from __future__ import annotations

import re
from string import Formatter

from flywheel.algorithms.estimators import estimator_spec
from flywheel.config.catalogs import BackendEntry
from flywheel.config.kinds import kind_of
from flywheel.config.schema import PipelineConfig
from flywheel.platform.config.catalogs import Catalog
from flywheel.platform.config.errors import ConfigError

TEACHER_NAME = re.compile(r"[A-Za-z0-9_-]+")
CONTEXT_FIELDS = ("prompt", "answer", "tag")  # what a context_template may name


def check_distill(cfg: PipelineConfig, backends: Catalog[BackendEntry]) -> None:
    if not cfg.teacher:
        return
    # a kind without the role is refused by checks/kind.py; one with it must read it
    if not kind_of(cfg).reads("teacher"):
        raise ConfigError("", "teacher", f"pipeline_type {cfg.pipeline_type} has a teacher "
                                         f"role but reads none (its kind's reads_roles): "
                                         f"remove the teacher block")
    for name, teacher in cfg.teacher.items():
        key = f"teacher.{name}"
        if not TEACHER_NAME.fullmatch(name):
            raise ConfigError("", key, "a teacher's name is part of its metric names: use "
                                       "letters, digits, '_' and '-'")
        backend = teacher.strategy_args.strategy_name
        if backend in backends and backends.get(backend, key).kind != "train":
            trains = ", ".join(n for n, e in backends.items() if e.kind == "train"
                               and "reference" in e.roles and not e.latency_only)
            raise ConfigError("", f"{key}.strategy_args.strategy_name",
                              f"'{backend}' is a generation backend; a teacher scores the "
                              f"student's tokens with a forward pass, on a training "
                              f"backend ({trains})")
        check_context_template(key, teacher.context_template)
        if teacher.weights == "student":
            check_self_teacher(cfg, key)
    check_teacher_domains(cfg)
    if kind_of(cfg).envs:
        check_episode_teachers(cfg)
    if cfg.opd_mode == "pure" and cfg.critic is not None:
        raise ConfigError("", "critic", "opd_mode pure takes the advantage from the teachers "
                                        "alone, so a critic of the verifier rewards would "
                                        "train for nothing: remove it (and adv_estimator "
                                        "gae), or set opd_mode: mixed")


def check_episode_teachers(cfg: PipelineConfig) -> None:
    """Teachers over agentic episodes (pipelines/distill/episode_teachers.py): every teacher
    scores every trajectory row, whose tokens the advantage's trajectory path credits."""
    for name, teacher in cfg.teacher.items():
        key = f"teacher.{name}"
        if teacher.weights == "student":
            raise ConfigError("", f"{key}.weights", "student needs a context_template over "
                                                    "records, which episodes do not have; "
                                                    "use a teacher of its own model")
        for field, why in (("tag_included", "episodes carry an env tag, not a record's: "
                                            "every teacher scores every episode"),
                           ("context_template", "episodes have no record to write a "
                                                "privileged prompt from")):
            if getattr(teacher, field):
                raise ConfigError("", f"{key}.{field}", f"{why}; remove it")
    per_turn = estimator_spec(cfg.adv_estimator).per_turn
    if cfg.step_level_samples or cfg.turn_level_returns or per_turn:
        key = ("step_level_samples" if cfg.step_level_samples else "turn_level_returns"
               if cfg.turn_level_returns else "adv_estimator")
        raise ConfigError("", key, "on-policy distillation over episodes adds the teachers' "
                                   "per-token term to the trajectory advantage (one row per "
                                   "episode, episode returns); remove it or the teacher")


def check_context_template(key: str, template: str | None) -> None:
    """Only plain {prompt}, {answer}, {tag} placeholders (no attribute, index, format spec)."""
    if template is None:
        return
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in Formatter().parse(template)
                  if name is not None]
    except ValueError as e:
        raise ConfigError("", f"{key}.context_template", f"is not a template ({e}); write "
                                                         f"{{{{ and }}}} for braces") from None
    for name, spec, conv in fields:
        if name not in CONTEXT_FIELDS or spec or conv:
            raise ConfigError("", f"{key}.context_template",
                              f"has the placeholder {{{name}{'!' + conv if conv else ''}"
                              f"{':' + spec if spec else ''}}}; it takes "
                              f"{', '.join('{' + f + '}' for f in CONTEXT_FIELDS)}")


def check_self_teacher(cfg: PipelineConfig, key: str) -> None:
    """The student as its own teacher (weights: student)."""
    if cfg.teacher[key.split(".", 1)[1]].context_template is None:
        raise ConfigError("", f"{key}.weights", "student: the student scoring its own samples "
                                                "on its own prompt is itself (a 0 signal); give "
                                                "the teacher privileged context with "
                                                "context_template")
    gen = cfg.actor_infer.generating_args
    if gen.do_sample and (gen.top_k > 0 or gen.top_p < 1.0):
        raise ConfigError("", f"{key}.weights", "student scores on actor_train's sampling head, "
                                                "which drops the tokens outside actor_infer's "
                                                "top_k / top_p: the teacher would give a token "
                                                "it is shown probability 0. Sample untruncated "
                                                "(top_k -1, top_p 1), or use weights: own")


def teacher_tags(cfg: PipelineConfig) -> dict[str, tuple[str, ...]]:
    """Per teacher, the tags it takes (empty: every tag)."""
    return {name: tuple(t.tag_included) for name, t in cfg.teacher.items()}


def untaught_tags(tags: list[str], routing: dict[str, tuple[str, ...]]) -> list[str]:
    """The tags of `tags` no teacher takes, sorted."""
    if any(not included for included in routing.values()):
        return []
    taken = {tag for included in routing.values() for tag in included}
    return sorted(set(tags) - taken)


def domain_tags(cfg: PipelineConfig, domain: str) -> list[str]:
    """The tags of one domain_interleave_probs key: the key itself (a data tag), or, when
    it names a reward with a tag_included, that reward's tags (ROLL's domain_2_tag: its
    OPD example keys the mix by reward and routes teachers by the rewards' tags)."""
    reward = cfg.rewards.get(domain)
    return list(reward.tag_included) if reward is not None and reward.tag_included else [domain]


def check_teacher_domains(cfg: PipelineConfig) -> None:
    """Every domain of the data mix has a teacher (the records are checked at start)."""
    domains = list(cfg.actor_train.data_args.domain_interleave_probs or {})
    tags = [tag for domain in domains for tag in domain_tags(cfg, domain)]
    missing = untaught_tags(tags, teacher_tags(cfg))
    if missing:
        raise ConfigError("", "teacher", f"no teacher takes tag(s) {', '.join(missing)} of "
                                         f"actor_train.data_args.domain_interleave_probs' "
                                         f"domains: add them to a teacher's tag_included, or "
                                         f"give a teacher an empty tag_included (every tag)")
