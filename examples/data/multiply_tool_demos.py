"""Writes the tool-call demonstrations of examples/sft_smollm2_tool_calls.yaml (run from the
repo root: `python examples/data/multiply_tool_demos.py`; the JSONL files it writes are
committed).

SmolLM2-135M-Instruct rarely writes a well-formed tool call unprompted, so the tool-use
example (examples/agent_smollm2_multiply_tools.yaml) starts from a short SFT on these. Each
demonstration is one multiply episode as the agentic run renders it with
`chat_template: true` (flywheel/envs/chat_turns.py): the same system message (the example's
agent_system_template plus the calculator's description in the Hermes wording), the env's
question as the user message, then two records, one per assistant turn: the calculator
call, and after the tool's result (a user message in <tool_response> tags, as SmolLM2's
template gets it) the answer. Factors are 3-4 digits like the env's, drawn from a seed of
their own, not the env's (at 3-4 digits a demo repeating a validation question is rare).
"""

import json
import random
from pathlib import Path

from flywheel.envs.chat_turns import tool_system_text
from flywheel.envs.multiply import DEFAULT_INSTRUCTION
from flywheel.tools import function_schema
from flywheel.tools.calculator import Calculator

SYSTEM = ("You can use tools. Call the calculator for every product, then reply with only "
          "<answer>N</answer>.")
SIZES = {"train": 200, "val": 20}


def system_message() -> str:
    """As ChatTurns.first_prompt joins them: the tag's system text, then the tools."""
    tools = tool_system_text([function_schema(Calculator())], "<tool_call>", "</tool_call>")
    return f"{SYSTEM}\n\n{tools}"


def factor(rng: random.Random) -> int:
    digits = rng.randint(3, 4)
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def demo(a: int, b: int) -> list[dict]:
    arguments = json.dumps({"expression": f"{a} * {b}"})
    call = f'<tool_call>\n{{"name": "calculator", "arguments": {arguments}}}\n</tool_call>'
    asked = [{"role": "system", "content": system_message()},
             {"role": "user", "content": DEFAULT_INSTRUCTION.format(a=a, b=b)}]
    answered = [*asked, {"role": "assistant", "content": call},
                {"role": "user", "content": f"<tool_response>\n{a * b}\n</tool_response>"}]
    answer = {"role": "assistant", "content": f"<answer>{a * b}</answer>"}
    return [{"messages": [*asked, {"role": "assistant", "content": call}]},
            {"messages": [*answered, answer]}]


def main() -> None:
    here = Path(__file__).parent
    for name, size in SIZES.items():
        rng = random.Random(f"multiply-tool-demos-{name}")
        records = [r for _ in range(size) for r in demo(factor(rng), factor(rng))]
        (here / f"multiply_tool_demos_{name}.jsonl").write_text(
            "\n".join(json.dumps(r) for r in records) + "\n")


if __name__ == "__main__":
    main()
