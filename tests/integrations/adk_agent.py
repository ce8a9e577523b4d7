"""A real ADK agent for the end-to-end test: an ``LlmAgent`` whose model is scripted.

``python -m tests.integrations.adk_agent URL SCHEMA TEXT`` runs one turn of the session
``app``/``u``/``s`` in a fresh process and prints what the run produced, as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from session_sql.integrations.adk import SQLSessionService


class ScriptedModel(BaseLlm):
    """Answers from the request alone, so that a resumed run proves what history it got.

    "weather ..." asks for the ``get_weather`` tool; a tool result is turned into a sentence;
    anything else is echoed with the number of contents the model was sent.
    """

    model: str = "scripted-1"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        part = llm_request.contents[-1].parts[0]  # type: ignore[index]
        if part.function_response is not None:
            result = (part.function_response.response or {}).get("result")
            reply = types.Part(text=f"the weather: {result}")
        elif (part.text or "").startswith("weather"):
            city = (part.text or "").split()[-1]
            reply = types.Part(
                function_call=types.FunctionCall(name="get_weather", args={"city": city})
            )
        else:
            reply = types.Part(text=f"echo {part.text} after {len(llm_request.contents)}")
        # Token usage as Gemini reports it: ten tokens a content sent, five a reply.
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=10 * len(llm_request.contents), candidates_token_count=5
        )
        yield LlmResponse(
            content=types.Content(role="model", parts=[reply]),
            model_version=self.model,
            usage_metadata=usage,
        )


def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


def runner(service: SQLSessionService) -> Runner:
    agent = LlmAgent(
        name="helper", model=ScriptedModel(), tools=[get_weather], output_key="last_reply"
    )
    return Runner(agent=agent, app_name="app", session_service=service)


async def turn(run: Runner, text: str, **delta: Any) -> list[Event]:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    return [
        event
        async for event in run.run_async(
            user_id="u", session_id="s", new_message=message, state_delta=delta or None
        )
    ]


async def main(url: str, schema: str, text: str) -> None:
    async with SQLSessionService.from_url(url, schema=schema) as service:
        produced = await turn(runner(service), text)
        session = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert session is not None
        print(
            json.dumps(
                {
                    "produced": [e.model_dump(mode="json", exclude_none=True) for e in produced],
                    "events": len(session.events),
                    "state": session.state,
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
