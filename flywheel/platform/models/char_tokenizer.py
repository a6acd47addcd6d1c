"""Character-level tokenizer for the built-in tiny model.

Why characters: no hub is reachable, so the built-in model cannot borrow a trained BPE
vocabulary, and a tiny model learns arithmetic and grid-world text far more easily when
every character is one token (a digit is always the same id at a fixed position).

Why `tokenizers` + `PreTrainedTokenizerFast` rather than a hand-written class: the saved
`tokenizer.json` is the format every backend reads (transformers' `AutoTokenizer`, vLLM,
SGLang), so the built-in model travels through the same code paths as a hub model.

Choices that the rest of the platform relies on:
- ids 0..3 are `<pad> <bos> <eos> <unk>`; then printable ASCII (space..`~`), newline, and the
  few symbols text environments draw with (`EXTRA_CHARS`). Appending a character changes the
  vocab size and so the model's spec hash: cached models rebuild, nothing silently mismatches.
- No normaliser and no whitespace handling: decode(encode(s)) == s for any string over the
  alphabet. Characters outside it become `<unk>` (one per character).
- `split_special_tokens=True`: the *text* "<eos>" is five characters, never the eos id, so a
  model that writes "<eos>" cannot forge a special token. Special ids are added by code.
- No bos/eos added by `encode`: the pipeline decides where bos goes (see data/arithmetic.py).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
EXTRA_CHARS = ("\n", "√", "·")
ALPHABET = tuple(chr(c) for c in range(ord(" "), ord("~") + 1)) + EXTRA_CHARS
MODEL_MAX_LENGTH = 512


def char_vocab() -> dict[str, int]:
    """Token -> id: the special tokens first (ids 0..3), then one entry per character."""
    return {tok: i for i, tok in enumerate(SPECIAL_TOKENS + ALPHABET)}


def make_char_tokenizer() -> PreTrainedTokenizerFast:
    """Build the tokenizer in memory (deterministic; no files touched)."""
    tok = Tokenizer(models.WordLevel(vocab=char_vocab(), unk_token=UNK))
    # Every character (newline included: `.` would skip it) is its own pre-token.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # concatenate, no spaces between tokens
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
        split_special_tokens=True,
    )


def save_char_tokenizer(directory: str | Path) -> PreTrainedTokenizerFast:
    """Write tokenizer.json and tokenizer_config.json under `directory` (AutoTokenizer loads it)."""
    tokenizer = make_char_tokenizer()
    tokenizer.save_pretrained(str(directory))
    return tokenizer
