"""Character-level tokenizer for the built-in tiny model, in Qwen2's byte-level BPE format.

Why characters: no hub is reachable, so the built-in model cannot borrow a trained BPE
vocabulary, and a tiny model learns arithmetic and grid-world text far more easily when
every character is one token (a digit is always the same id at a fixed position).

Why byte-level BPE rather than a plain char vocabulary: transformers 5.x's `AutoTokenizer`
ignores a checkpoint's tokenizer pipeline for `model_type: qwen2` and rebuilds it as
`Qwen2Tokenizer` (Qwen's split regex + ByteLevel + NFC, BPE with no unk token), keeping only
the vocab and merges from `tokenizer.json`. vLLM loads tokenizers through `AutoTokenizer`
too. A WordLevel char vocab saved next to a Qwen2 config therefore loads as a different
tokenizer that silently drops spaces and newlines. So the vocab is written in byte-level
form (space is `Ġ`, newline `Ċ`), multi-byte characters of the alphabet get merges, and we
build the tokenizer *as* `Qwen2Tokenizer`: in memory and after loading it is the same object.

The vocabulary (ids are stable; tests pin them):
- 0..3: `<pad> <bos> <eos> <unk>`;
- 4..101: one token per character of `ALPHABET`: printable ASCII (space..`~`), newline, and
  the symbols text environments draw with (`EXTRA_CHARS`);
- then the remaining single bytes and the merge intermediates (byte fallback).
Any string round-trips: decode(encode(s)) == s (NFC-normalised, which changes nothing in the
alphabet). A character outside the alphabet becomes its UTF-8 bytes, one token each, instead
of `<unk>`: Qwen2Tokenizer has no unk token, and losing text silently would be worse.
`<unk>` keeps id 3 but is never produced.

`split_special_tokens=True`: the *text* "<eos>" is five characters, never the eos id, so a
model that writes "<eos>" cannot forge a special token. No bos/eos is added by `encode`: the
pipeline decides where bos goes (see flywheel/pipelines/data/arithmetic_data.py). Appending a
character to the alphabet changes the vocab and so the model's spec hash: cached models
rebuild (and the shipped warm-started models must be re-made: their warm_start.json says how).
"""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
EXTRA_CHARS = ("\n", "√", "·")
ALPHABET = tuple(chr(c) for c in range(ord(" "), ord("~") + 1)) + EXTRA_CHARS
MODEL_MAX_LENGTH = 512


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map, which ByteLevel BPE vocabs use."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    others = [b for b in range(256) if b not in printable]
    mapping = {b: chr(b) for b in printable}
    mapping.update({b: chr(256 + i) for i, b in enumerate(others)})
    return mapping


BYTE_TO_SYMBOL = _bytes_to_unicode()


def byte_symbols(text: str) -> str:
    """`text` as ByteLevel symbols: `" √"` -> `"ĠâĪļ"`."""
    return "".join(BYTE_TO_SYMBOL[b] for b in text.encode("utf-8"))


def char_vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Token -> id (specials, alphabet, leftover bytes, merge intermediates) and BPE merges.

    A multi-byte character `c1 c2 c3` gets merges `(c1, c2)` and `(c1c2, c3)`, so it encodes
    to exactly one token; single-byte characters need no merge.
    """
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in ALPHABET:
        vocab[byte_symbols(ch)] = len(vocab)
    for b in range(256):
        vocab.setdefault(BYTE_TO_SYMBOL[b], len(vocab))
    merges = []
    for ch in ALPHABET:
        symbols = byte_symbols(ch)
        merged = symbols[0]
        for symbol in symbols[1:]:
            merges.append((merged, symbol))
            merged += symbol
            vocab.setdefault(merged, len(vocab))
    return vocab, merges


def make_char_tokenizer() -> PreTrainedTokenizerFast:
    """Build the tokenizer in memory (deterministic; no files touched)."""
    vocab, merges = char_vocab_and_merges()
    return Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
        split_special_tokens=True,
    )


def save_char_tokenizer(directory: str | Path) -> PreTrainedTokenizerFast:
    """Write tokenizer.json and tokenizer_config.json under `directory` (AutoTokenizer loads it)."""
    tokenizer = make_char_tokenizer()
    tokenizer.save_pretrained(str(directory))
    return tokenizer
