"""The template catalog: `data_args.template` -> how a prompt is encoded.

"native" sends the prompt text as is after the tokenizer's bos; "chat" applies the
tokenizer's own chat template. ROLL's names select the tokenizer's chat template too (ROLL
ships per-model templates; the tokenizer already holds the right one). The encoder is
`prompt_data.PromptEncoder`; the config checks read this module, which imports nothing, so
that `platform validate` knows the names without loading tokenizers. A new template name is
one line here.
"""

from __future__ import annotations

from typing import Literal

TEMPLATES: dict[str, Literal["native", "chat"]] = {
    "native": "native", "none": "native", "raw": "native",
    "chat": "chat", "qwen2_5": "chat", "qwen2_5_vl": "chat", "qwen3": "chat",
    "chatml": "chat", "llama3": "chat", "deepseek": "chat", "default": "chat",
}
