"""A real OpenAI-compatible chat-completions server (aiohttp) for the CLI tests, with scripted replies.

The reply policy is chosen by the request's ``model`` name, so one server serves every test:

* ``first-legal``: the first free cell of the last ``Your move (...)`` list in the dialog;
* ``always-a1``: ``A1`` every time (legal once, then an occupied cell);
* ``garbage``: a reply no Tic-Tac-Toe parser accepts.

Every request body is recorded in ``requests`` so tests can check what the client sent.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

__all__ = ["ScriptedOpenAIServer", "serve_openai"]

_LEGAL = re.compile(r"Your move \(([A-C1-3, ]+)\)")


class ScriptedOpenAIServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""

    def reply(self, body: dict[str, Any]) -> str:
        model = body["model"]
        if model == "garbage":
            return "I would rather not play."
        if model == "always-a1":
            return "A1"
        if model == "first-legal":
            text = "\n".join(str(m.get("content") or "") for m in body["messages"])
            legal = _LEGAL.findall(text)[-1].split(",")
            return f"<move>{legal[0].strip()}</move>"
        raise web.HTTPNotFound(text=f'{{"error": "unknown model {model}"}}')

    async def chat_completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        content = self.reply(body)
        return web.json_response(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            }
        )


@asynccontextmanager
async def serve_openai() -> AsyncIterator[ScriptedOpenAIServer]:
    """Serve on a free localhost port for the duration of the block."""
    server = ScriptedOpenAIServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.chat_completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.base_url = f"http://127.0.0.1:{port}/v1"
    try:
        yield server
    finally:
        await runner.cleanup()
