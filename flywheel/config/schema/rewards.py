"""The reward blocks (`rewards.<name>`): code sandbox, LLM judge, reward workers.

Part of the schema (`flywheel.config.schema` re-exports it as one `PipelineConfig`);
every field is documented once, here, beside its definition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from flywheel.config.schema.roles import WorkerConfig


@dataclass
class CodeSandboxArgs:
    """code_sandbox: how a response's program is run against the record's tests. Every
    test case runs in its own bubblewrap sandbox (no network, read-only system, private
    tmpfs, PID namespace, an unprivileged user); these are its limits."""

    # Score: "fraction" of test cases passed, or "all_or_nothing" (1 only if all pass).
    scoring: Literal["fraction", "all_or_nothing"] = "fraction"
    # Wall-clock seconds per test case; the sandbox's whole process tree is killed after.
    test_timeout_s: float = 5.0
    # CPU seconds per test case (RLIMIT_CPU); at most test_timeout_s is useful.
    cpu_seconds: int = 4
    # Address space per process in MiB (RLIMIT_AS); CPython needs about 30.
    memory_mb: int = 512
    # Processes and threads the sandbox user may have (RLIMIT_NPROC).
    max_processes: int = 32
    # Largest file a program may write, stdout and stderr included, in MiB (RLIMIT_FSIZE);
    # also the size of the private /tmp.
    max_file_mb: int = 8
    # Open file descriptors per process (RLIMIT_NOFILE).
    max_open_files: int = 64
    # Test cases run per sample, at most (the first N); 0: all.
    max_tests: int = 0


DEFAULT_JUDGE_TEMPLATE = (
    "Question:\n{prompt}\n\nReference answer:\n{reference}\n\nStudent answer:\n{response}"
    "\n\nIs the student answer correct? Reply with only yes or no.")


@dataclass
class LlmJudgeArgs:
    """llm_judge: a language model reads (prompt, response, reference) through a prompt
    template and answers; a parser turns its answer into a score in [0, 1]. The judge is
    a model this reward role loads itself (`backend: local`) or an OpenAI-compatible
    server (`backend: endpoint`). Its answer is untrusted text: one that does not parse
    scores 0 and counts in reward/judge_parse_failures."""

    # "local": generate greedily with this role's strategy_args backend (hf_infer or vllm)
    # on its device_mapping, with model_args.model_name_or_path (else the top-level
    # reward_pretrain). "endpoint": POST to an OpenAI-compatible {base_url}/chat/completions
    # (temperature 0); then model_args, strategy_args and device_mapping must stay unset.
    backend: Literal["local", "endpoint"] = "local"
    # endpoint: the server's API root, e.g. "http://127.0.0.1:8000/v1" (http or https).
    base_url: str | None = None
    # endpoint: the model name sent in each request.
    model: str | None = None
    # endpoint: NAME of the environment variable that holds the API key (sent as
    # "Authorization: Bearer ..."), never the key itself; unset: no key is sent. A named
    # variable that is not set when the reward starts is an error.
    api_key_env: str | None = None
    # endpoint (an error on a local judge): seconds to wait for one reply. A server that
    # cannot be reached, or answers with an HTTP error or not in time, stops the run with an
    # error naming base_url (a down judge must not score every sample 0); keep it below
    # sample_timeout_s.
    request_timeout_s: float = 20.0
    # The judge's prompt (one user message; the local judge applies its tokenizer's chat
    # template when it has one). Placeholders: {prompt}, {response}, {reference}; {response}
    # is required, "{{" and "}}" are literal braces; any other placeholder, attribute,
    # index, conversion or format spec is an error. Values are inserted as is, never
    # formatted again.
    prompt_template: str = DEFAULT_JUDGE_TEMPLATE
    # System message sent before the prompt; unset: none (the local model's chat template
    # may add its own default).
    system_prompt: str | None = None
    # How the judge's answer becomes a score. "yes_no": the first whole word "yes" (1) or
    # "no" (0), any case. "number": the last number in the answer (in "7/10" or "7 out of 10",
    # the 7), which must lie in [score_min, score_max]; score = (x - score_min) /
    # (score_max - score_min). Anything else is a parse failure: score 0.
    score_parser: Literal["number", "yes_no"] = "yes_no"
    # number: the range the template asks the judge to answer in (score_min < score_max);
    # written with yes_no, an error.
    score_min: float = 0.0
    score_max: float = 10.0
    # Most tokens the judge writes per answer (greedy decoding).
    max_new_tokens: int = 32


@dataclass
class RewardConfig(WorkerConfig):
    # Reward by name: "math_rule" compares the final answer (math-verify where it parses);
    # "code_sandbox" runs the response's last fenced code block against the record's
    # stdin/stdout tests in a bubblewrap sandbox (code_sandbox below); "llm_judge" asks a
    # language model for a verdict (llm_judge below); "ifeval" checks the instruction
    # constraint the reference names (ROLL's GeneralRuleRewardWorker); "multiple_choice"
    # compares the answer's choice letter with the reference's (ROLL's
    # CrossThinkQARuleRewardWorker), both with reward_args; "detection" scores the IoU of
    # the reply's boxes against the reference's (ROLL's DetectionRewardWorker, reward_args
    # format_ratio / min_iou); "python" calls a function of the
    # user's own (reward_import_path below); or a reward registered with
    # register_reward (flywheel/workers/rewards/registry.py holds the catalog).
    reward_type: str = "math_rule"
    # reward_type python: the function, "package.module:function". Its module must be
    # importable (working directory or PYTHONPATH) and lie under a prefix of the top-level
    # import_allowlist; it is imported with importlib in the scoring process, never
    # evaluated. Accepted forms (told by parameter names): fn(prompt, response, reference,
    # record), verl's compute_score(data_source, solution_str, ground_truth, extra_info),
    # TRL's batched fn(prompts, completions, **columns) (workers/rewards/user_function.py).
    # Required with reward_type python, refused with any other.
    reward_import_path: str | None = None
    # Settings of a reward that declares its own (a RewardSpec naming a settings dataclass,
    # e.g. a reward registered with register_reward): key -> value, checked against that
    # dataclass when the config loads. ifeval, multiple_choice and detection declare theirs
    # (repetition penalty; multiple_choice's scoring; detection's format_ratio and min_iou);
    # code_sandbox / llm_judge take theirs
    # from the blocks below and refuse it.
    reward_args: dict[str, Any] = field(default_factory=dict)
    # Record tags this reward scores; empty means every record.
    tag_included: list[str] = field(default_factory=list)
    # Multiplier of this reward's score under the top-level reward_aggregation:
    # weighted_sum (a record's score is the sum of weight * score over the rewards that
    # take its tag). first_match uses the one reward's score as is: only 1.0 is accepted.
    weight: float = 1.0
    # Number of reward workers (ROLL key); device_mapping may stay unset for rule rewards.
    world_size: int = 1
    # Hard limit in seconds on scoring one sample, enforced from outside: the reward runs
    # in a child process that is killed at the limit (even inside C code), and the sample
    # scores 0 with `timed_out` counted (reward/timed_out). Covers all of a code sample's
    # test cases, so keep it above code_sandbox.test_timeout_s times the tests run.
    sample_timeout_s: float = 30.0
    # Child processes per reward worker scoring samples in parallel (each has the limit).
    scoring_processes: int = 1
    # Samples of one reward worker timed out in a row (none scored between) after which
    # the reward is declared broken and the run stops (RewardHangs); 0: never. The first
    # timeout is said on the console. (workers/rewards/reward_limits.py)
    max_consecutive_timeouts: int = 8
    # Steps in a row in which this reward scored none of its samples (every one failed,
    # went unscored, timed out or crashed) after which the run stops
    # (RewardScoresNothing); 0: never. A step whose samples mostly failed is said on the
    # console whatever this is.
    max_failed_steps: int = 3
    # Address-space limit (RLIMIT_AS) in MiB of each scoring process and every process it
    # starts; reward code over it fails its sample (counted), the run goes on. Unset: 4096
    # for a rule reward (code_sandbox: at least its sandbox's memory_mb + 1024), none for
    # a reward that loads a model; 0: no limit.
    memory_mb: int | None = None
    # A regex every response this reward scores must match (ROLL's key): Python re.match
    # with DOTALL and MULTILINE on the whole response; a response that does not match gets
    # -1 added to its score (ROLL's format reward; metadata format_ok,
    # reward/format_rate). On any reward_type; unset: no format check.
    # E.g. "^<think>.*?</think>.*?<answer>.*?</answer>$" (ROLL's default pattern).
    format_pattern: str | None = None
    # ROLL's response length reward, times this coefficient, added to the score of each
    # sample this reward scores (ROLL's key; CrossThinkQA's worker): with n the response's
    # tokens, -0.5 for n < 100, -0.5 * (400 - n) / 300 up to 400, 0 beyond: it pushes
    # answers towards 400 tokens or more. 0 (the default) turns it off; any reward_type.
    response_length_penalty_coef: float = 0.0
    # Limits of the code_sandbox reward (ignored by other reward types).
    code_sandbox: CodeSandboxArgs = field(default_factory=CodeSandboxArgs)
    # The judge of the llm_judge reward; written on another reward type, an error.
    llm_judge: LlmJudgeArgs = field(default_factory=LlmJudgeArgs)


@dataclass
class RewardKeys:
    """The reward workers, and how their scores combine."""

    # Reward workers by name (RLVR); each scores the records its tag_included selects.
    rewards: dict[str, RewardConfig] = field(
        default_factory=lambda: {"math_rule": RewardConfig()}
    )
    # When several rewards take a record's tag (tag_included; an empty list takes every
    # tag): first_match scores it with the first of them in file order (one reward per
    # domain, as in ROLL; put a catch-all reward last); weighted_sum scores it with every
    # one of them and trains on the sum of weight * score (e.g. a correctness reward plus a
    # format reward). A record that no reward takes is refused when the data loads.
    reward_aggregation: Literal["first_match", "weighted_sum"] = "first_match"
