"""Agents behind an OpenAI-compatible endpoint (issue 47): the user's own `openai`-client
agent runs an episode; every call it makes is served from actor_infer token-in, token-out.

- wire.py: OpenAI's chat-completions request, checked; errors with their HTTP status.
- tool_format.py: OpenAI tools / tool calls / tool results as the model's text, and back.
- token_ledger.py: each call's prompt ids, continuing the ids of replies sent back.
- generator.py: the one generation seam (actor_infer's workers, or a strategy in-process).
- endpoint.py: the HTTP server (FastAPI on uvicorn, loopback only, a key per episode).
"""
