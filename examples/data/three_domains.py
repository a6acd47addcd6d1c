"""Writes the prompts of examples/rlvr_three_domains.yaml (run from the repo root:
`python examples/data/three_domains.py`; the JSONL files it writes are committed).

Three domains, one tag each, each scored by its own reward:
- `math`: times tables in words (math_rule);
- `code`: small stdin/stdout programs, tests in the APPS/TACO shape (code_sandbox);
- `open_qa`: short factual questions with a reference answer (llm_judge).
Training and validation use different records of every domain.
"""

import json
from pathlib import Path

CODE_TASKS = [  # (task, [(stdin, stdout), ...])
    ("reads two integers on one line and prints their sum", [("2 3\n", "5\n"), ("10 -4\n", "6\n")]),
    ("reads one integer n and prints n squared", [("7\n", "49\n"), ("-3\n", "9\n")]),
    ("reads a line of text and prints it reversed", [("abc\n", "cba\n"), ("hello\n", "olleh\n")]),
    ("reads a word and prints it in upper case", [("flywheel\n", "FLYWHEEL\n"), ("ab\n", "AB\n")]),
    ("reads an integer n and prints 'even' or 'odd'", [("4\n", "even\n"), ("7\n", "odd\n")]),
    ("reads two integers and prints the larger one", [("3 9\n", "9\n"), ("12 5\n", "12\n")]),
    ("reads an integer n and prints 1 + 2 + ... + n", [("4\n", "10\n"), ("10\n", "55\n")]),
    ("reads a line and prints how many characters it has", [("abcd\n", "4\n"), ("hi\n", "2\n")]),
    ("reads three integers on one line and prints the smallest", [("4 2 8\n", "2\n"),
                                                                  ("9 7 8\n", "7\n")]),
    ("reads an integer n and prints n factorial", [("5\n", "120\n"), ("3\n", "6\n")]),
    ("reads a word and prints how many vowels it has", [("banana\n", "3\n"), ("sky\n", "0\n")]),
    ("reads two integers a and b and prints a * b", [("6 7\n", "42\n"), ("-2 8\n", "-16\n")]),
]
QA = [
    ("What is the capital of France?", "Paris"), ("What is the capital of Japan?", "Tokyo"),
    ("What color is the sky on a clear day?", "blue"), ("How many legs does a spider have?", "8"),
    ("What is the largest planet in the solar system?", "Jupiter"),
    ("What gas do plants take in from the air?", "carbon dioxide"),
    ("What is frozen water called?", "ice"), ("How many days are in a week?", "7"),
    ("What is the capital of Italy?", "Rome"), ("Which animal is known as the king of the jungle?",
                                                  "the lion"),
    ("What do bees make?", "honey"), ("What is the opposite of hot?", "cold"),
    ("How many continents are there?", "7"), ("What is the capital of Spain?", "Madrid"),
    ("Which planet is called the red planet?", "Mars"), ("What is H2O?", "water"),
]


def code_record(task: str, cases: list[tuple[str, str]]) -> dict:
    tests = {"inputs": [i for i, _ in cases], "outputs": [o for _, o in cases]}
    return {"prompt": f"Write a Python program that {task}. Put the program in one "
                      f"```python code block.", "answer": json.dumps(tests), "tag": "code"}


def main() -> None:
    math = [{"prompt": f"What is {a} * {b}?", "answer": str(a * b), "tag": "math"}
            for a in range(2, 13) for b in range(2, 13)]
    code = [code_record(t, c) for t, c in CODE_TASKS]
    qa = [{"prompt": q, "answer": a, "tag": "open_qa"} for q, a in QA]
    splits = {"train": math[::2] + code[:8] + qa[:11],
              "val": math[1::2][:24] + code[8:] + qa[11:]}
    here = Path(__file__).parent
    for name, rows in splits.items():
        lines = [json.dumps(r) for r in rows]
        (here / f"three_domains_{name}.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
