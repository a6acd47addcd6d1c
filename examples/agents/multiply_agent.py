"""A plain `openai` client agent with a calculator tool: what `pipeline_type: agent` trains.

The agent owns its loop and its tool: it asks the model, runs the calculator when the model
calls it, sends the result back, and scores the final answer itself. flywheel only serves
the model (OPENAI_BASE_URL) and trains on the ids of every call. The same function runs
against any OpenAI-compatible server (docs_site/docs/pipelines/agent.md).

It plays the episodes of the built-in agentic pipeline's multiply env with tools
(examples/agent_smollm2_multiply_tools.yaml: flywheel/tools/tool_env.py over
flywheel/envs/multiply.py), so the two pipelines train on one task: a call that could not
be read (the endpoint leaves it in the reply's content, no tool_calls) is answered with the
env's error and the call format, as a <tool_response> (a tool result in the hermes format,
SmolLM2's), not with the nudge to answer, which sends the model to multiply from memory;
an unknown tool gets the tool box's words. It imports flywheel's call parser and those two
error texts only so that, for the same replies, its rows are the built-in pipeline's, id for
id (tests/pipelines/test_agent_token_continuity.py); an agent for another server needs
nothing from flywheel.
"""

import ast
import json
import operator
import re

from flywheel.tools.call_parser import MalformedCall, parse_tool_call
from flywheel.tools.tool_env import malformed_call_message
from flywheel.tools.toolbox import unknown_tool_message

SYSTEM = ("You can use tools. Call the calculator for every product, then reply with only "
          "<answer>N</answer>.")
QUESTION = ("What is {a} * {b}? Compute it exactly (use a tool), then give only the number "
            "as <answer>N</answer>.")
TOOLS = [{"type": "function", "function": {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression exactly (integers of any size up to "
                   "100 digits; + - * / // % ** and parentheses).",
    "parameters": {"type": "object", "required": ["expression"],
                   "properties": {"expression": {"type": "string",
                                                 "description": "e.g. 4821 * 739"}}}}}]
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def calculate(expression: str) -> str:
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("not + - * of integers")
    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError) as error:
        return f"Error: {error}"


async def agent(task: dict, client) -> float:
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": QUESTION.format(a=task["a"], b=task["b"])}]
    for _ in range(3):  # a call, the answer, one turn to spare
        reply = (await client.chat.completions.create(
            model="policy", messages=messages, tools=TOOLS, max_tokens=48)).choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        if not reply.tool_calls:
            broken = parse_tool_call(reply.content or "")
            if isinstance(broken, MalformedCall):  # the env's error, in a tool result's tags
                error = malformed_call_message(broken.reason)
                messages.append({"role": "user",
                                 "content": f"<tool_response>\n{error}\n</tool_response>"})
                continue
            found = re.search(r"<answer>\s*([\d,_ ]+)\s*</answer>", reply.content or "")
            if found:
                return float(int(re.sub(r"[,_ ]", "", found.group(1))) == task["a"] * task["b"])
            messages.append({"role": "user",
                             "content": "Give the product as one integer: <answer>N</answer>."})
            continue
        for call in reply.tool_calls:
            arguments = json.loads(call.function.arguments)
            result = (calculate(str(arguments.get("expression", "")))
                      if call.function.name == "calculator"
                      else unknown_tool_message(call.function.name, ["calculator"]))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return 0.0
