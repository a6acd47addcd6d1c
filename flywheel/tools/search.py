"""search: BM25 over a local document file given in the config; no network.

The index is `rank_bm25.BM25Plus` (BM25, Robertson & Zaragoza, "The Probabilistic
Relevance Framework: BM25 and Beyond", 2009, eq. 3.15, k1 = 1.5, b = 0.75; with BM25+'s
lower bound delta = 1 and idf log((N + 1) / n), Lv & Zhai, CIKM 2011, eq. 5), built once
when the tool is built, over lower-cased word tokens (`\\w+`). Okapi's idf
log((N - n + 0.5) / (n + 0.5)) is zero or negative for a word in half the documents, so a
small collection would rank nothing; BM25+'s never is. Only documents sharing a word with
the query are returned. Documents: a `.jsonl` file whose lines
are objects with "text" (and optionally "title"), or any other text file with one document
per non-empty line. The observation lists the `top_k` best documents, each cut to
`max_chars`; a query matching nothing says so (not an error).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rank_bm25 import BM25Plus

from flywheel.tools.base import required_str

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class SearchSettings:
    """`tool_args` of the search tool."""

    documents: str  # path of the document file (.jsonl with "text", or one per line)
    top_k: int = 3  # documents returned per query
    max_chars: int = 600  # characters kept of each document
    max_query_chars: int = 500

    def __post_init__(self) -> None:
        if not self.documents:
            raise ValueError("documents must name a file")
        for name in ("top_k", "max_chars", "max_query_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def load_documents(path: str) -> list[str]:
    """The document texts of `path` (a ValueError naming the file and line if malformed)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if not path.endswith(".jsonl"):
        return [line.strip() for line in lines if line.strip()]
    docs = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            text = record["text"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f'{path}:{number}: expected a JSON object with "text"') from None
        title = record.get("title")
        docs.append(f"{title}: {text}" if title else str(text))
    return docs


class Search:
    name = "search"
    description = "Search the document collection; returns the best matching passages."
    parameters = {"type": "object", "required": ["query"],
                  "properties": {"query": {"type": "string", "description": "search words"}}}

    def __init__(self, settings: SearchSettings, documents: list[str]) -> None:
        if not documents:
            raise ValueError(f"search: {settings.documents} holds no documents")
        self.settings = settings
        self.documents = documents
        self.words = [set(words(d)) for d in documents]
        self.index = BM25Plus([words(d) or [""] for d in documents])

    def run(self, arguments: dict[str, Any]) -> str:
        query = words(required_str(arguments, "query", self.settings.max_query_chars))
        scores = self.index.get_scores(query) if query else []
        ranked = sorted((i for i in range(len(scores)) if self.words[i].intersection(query)),
                        key=lambda i: -scores[i])
        hits = ranked[: self.settings.top_k]
        if not hits:
            return "No document matches the query."
        return "\n".join(f"[{n}] {self.documents[i][: self.settings.max_chars]}"
                         for n, i in enumerate(hits, 1))


def build(settings: SearchSettings) -> Search:
    return Search(settings, load_documents(settings.documents))
