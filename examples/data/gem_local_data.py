"""Local data for ROLL's GEM math and QA env tags (`roll_math`, `roll_qa`; flywheel/envs/
question_envs.py), which ROLL fills from hub datasets (DAPO-Math-17k, HotpotQA) that this
machine cannot reach. `platform convert --from roll` points those tags here.

    python examples/data/gem_local_data.py   # rewrites the three files below

- gem_math.jsonl: 300 short math questions with exact answers (integers, fractions as
  \\frac{p}{q}, decimals), of six kinds; answers are checked by math-verify.
- gem_qa.jsonl + gem_qa_documents.jsonl: 300 questions about a made-up world (people,
  towns, countries, rivers) whose facts are only in the documents, so a model must search
  them (the `search` tool's BM25 over gem_qa_documents.jsonl). Half the questions need two
  documents (a person's town, then the town's country or river), as HotpotQA's do.

Deterministic: one seeded generator; the same seed writes the same bytes.
"""

from __future__ import annotations

import json
import random
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 26
SYLLABLES = ("ka", "lo", "mi", "ren", "ta", "vo", "sel", "dun", "bri", "mar", "os", "quil",
             "fen", "har", "ju", "nel", "pra", "tor", "wen", "zel")
PROFESSIONS = ("baker", "astronomer", "carpenter", "poet", "violinist", "engineer",
               "botanist", "cartographer", "weaver", "glassblower")


def _frac(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else (
        f"\\frac{{{value.numerator}}}{{{value.denominator}}}")


def math_item(rng: random.Random, kind: int) -> dict[str, str]:
    if kind == 0:
        a, b, c = rng.randint(12, 99), rng.randint(3, 19), rng.randint(3, 19)
        return {"question": f"What is {a} + {b} \\times {c}?", "answer": str(a + b * c)}
    if kind == 1:
        x, a, b = rng.randint(-20, 20), rng.randint(2, 12), rng.randint(-50, 50)
        return {"question": f"Solve for $x$: ${a}x + ({b}) = {a * x + b}$.", "answer": str(x)}
    if kind == 2:
        p, q = rng.randint(1, 30), rng.randint(2, 30)
        k = rng.randint(2, 9)
        return {"question": f"Write $\\frac{{{p * k}}}{{{q * k}}}$ in lowest terms.",
                "answer": _frac(Fraction(p, q))}
    if kind == 3:
        percent, n = rng.choice((5, 10, 15, 20, 25, 40, 75)), rng.randint(4, 400)
        value = Fraction(percent * n, 100)
        text = str(value.numerator) if value.denominator == 1 else str(float(value))
        return {"question": f"What is {percent}% of {n}?", "answer": text}
    if kind == 4:
        n = rng.randint(5, 200)
        return {"question": f"What is the sum of the integers from 1 to {n}?",
                "answer": str(n * (n + 1) // 2)}
    price, count = rng.randint(12, 95), rng.randint(3, 40)
    return {"question": f"A pencil costs {price} cents. How many cents do {count} pencils "
                        f"cost?", "answer": str(price * count)}


def name(rng: random.Random, parts: int, taken: set[str]) -> str:
    while True:
        word = "".join(rng.choice(SYLLABLES) for _ in range(parts)).capitalize()
        if word not in taken:
            taken.add(word)
            return word


def world(rng: random.Random) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(documents, questions) of a made-up world."""
    taken: set[str] = set()
    countries = [name(rng, 3, taken) + "ia" for _ in range(8)]
    rivers = [name(rng, 2, taken) for _ in range(12)]
    towns = [(name(rng, 2, taken) + "ton", rng.choice(countries), rng.choice(rivers))
             for _ in range(40)]
    docs = [{"title": t, "text": f"{t} is a town in {c}, on the banks of the river {r}."}
            for t, c, r in towns]
    questions = []
    for _ in range(150):
        person = f"{name(rng, 2, taken)} {name(rng, 3, taken)}"
        town, country, river = rng.choice(towns)
        job, year = rng.choice(PROFESSIONS), rng.randint(1700, 1990)
        article = "an" if job[0] in "aeiou" else "a"
        docs.append({"title": person, "text": f"{person} (born {year} in {town}) was "
                                              f"{article} {job}."})
        one_hop = rng.choice([(f"In which town was {person} born?", town),
                              (f"What was the profession of {person}?", job),
                              (f"In which year was {person} born?", str(year))])
        two_hop = rng.choice([(f"In which country is the town where {person} was born?",
                               country),
                              (f"On which river lies the birthplace of {person}?", river)])
        questions += [{"question": q, "answer": a} for q, a in (one_hop, two_hop)]
    rng.shuffle(docs)
    rng.shuffle(questions)
    return docs, questions


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")


def main(out: Path = HERE, seed: int = SEED) -> None:
    rng = random.Random(seed)
    write_jsonl(out / "gem_math.jsonl", [math_item(rng, i % 6) for i in range(300)])
    docs, questions = world(rng)
    write_jsonl(out / "gem_qa_documents.jsonl", docs)
    write_jsonl(out / "gem_qa.jsonl", questions)


if __name__ == "__main__":
    main()
