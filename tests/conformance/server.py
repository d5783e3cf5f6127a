"""The fixture server the official MCP conformance suite (`@modelcontextprotocol/conformance`) is run against.

Served by `interop/conformance.sh` as `askback serve tests.conformance.server:server` from the repository root. The
suite calls fixture tools, prompts and resources by fixed names and checks what comes back; each scenario's source
(`interop/node_modules/@modelcontextprotocol/conformance`) says what it expects.

Three kinds of fixture live here:

- Everything that asks the human goes through askback (`Form`, `Confirm`, `flow.ask`, chains of asks): the same
  handlers answer 2026-07-28 requests with `input_required` results and push their questions to 2025-11-25
  sessions.
- askback asks people only. Asking the client's model (`sampling/createMessage`) or its roots (`roots/list`) uses
  the SDK's resolvers (`Annotated[T, Resolve(fn)]` returning `Sample` / `ListRoots`) on `server.mcp`. So do the two
  scenarios that need an elicitation and a sampling request in the same `input_required` result
  (`..._multiple_inputs`, `..._capabilities`): one call has one `requestState`, and askback's flow state and the
  SDK's resolver state cannot share it.
- Everything else (content types, errors, logging, progress, prompts, resources, completions, list changes, the
  2025-11-25 `logging/setLevel` and `resources/subscribe` methods) is plain SDK on `server.mcp`. The one prompt
  that asks (`test_input_required_result_prompt`) returns an `InputRequiredResult` it builds itself: askback asks
  from tools only, and that is the SDK's only way for a prompt to ask.

The tasks extension's fixtures (`greet`, `slow_compute`, `failing_job`, ...) are in `tasks_fixtures`, registered
last.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Annotated, Any, Literal

import anyio
from mcp.server import ServerRequestContext
from mcp.server.mcpserver import Context, Elicit, ListRoots, Resolve, Sample, UserMessage
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import Prompt
from mcp_types import (
    AudioContent,
    Completion,
    CompletionArgument,
    CompletionContext,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    InputRequiredResult,
    ListRootsResult,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field
from tests.conformance.tasks_fixtures import register as register_task_fixtures

from askback import Accepted, Askback, Confirm, Flow, Form, Outcome

__all__ = ["server"]

logger = logging.getLogger("askback.conformance")

# A 1x1 PNG and a tiny WAV, as the suite's own fixtures use.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

server = Askback("askback-conformance", version="0.1.0")
mcp = server.mcp


# --- questions for the human (askback) -------------------------------------------------------------------------


class Name(BaseModel):
    name: str


class Color(BaseModel):
    color: str


class Contact(BaseModel):
    username: str = Field(description="User's response")
    email: str = Field(description="User's email address")


# SEP-1034: a default for every primitive type.
class Profile(BaseModel):
    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: Literal["active", "inactive", "pending"] = Field(default="active", description="User status")
    verified: bool = Field(default=True, description="Verification status")


def _titled(options: dict[str, str], *, where: Literal["oneOf", "items.anyOf"]) -> Any:
    """A `json_schema_extra` that shows a Literal's values with titles instead of a bare `enum`; the answer is still
    validated against the Literal."""

    def edit(schema: dict[str, Any]) -> None:
        titled = [{"const": value, "title": title} for value, title in options.items()]
        if where == "oneOf":
            schema.pop("enum", None)
            schema["oneOf"] = titled
        else:
            schema["items"] = {"anyOf": titled}

    return edit


# SEP-1330: the five ways a form offers a choice.
class EnumVariants(BaseModel):
    untitledSingle: Literal["option1", "option2", "option3"] = Field(description="Simple enum without titles")
    titledSingle: Literal["value1", "value2", "value3"] = Field(
        description="Enum with titled options (oneOf)",
        json_schema_extra=_titled(
            {"value1": "First Option", "value2": "Second Option", "value3": "Third Option"}, where="oneOf"
        ),
    )
    legacyEnum: Literal["opt1", "opt2", "opt3"] = Field(
        description="Legacy enum with enumNames",
        json_schema_extra={"enumNames": ["Option One", "Option Two", "Option Three"]},
    )
    untitledMulti: list[Literal["option1", "option2", "option3"]] = Field(description="Multi-select without titles")
    titledMulti: list[Literal["value1", "value2", "value3"]] = Field(
        description="Multi-select with titled options",
        json_schema_extra=_titled(
            {"value1": "First Choice", "value2": "Second Choice", "value3": "Third Choice"}, where="items.anyOf"
        ),
    )


user_name = Form(key="user_name", model=Name, message="What is your name?")
step1 = Form(key="step1", model=Name, message="Step 1: What is your name?")
step2 = Form(key="step2", model=Color, message="Step 2: What is your favorite color?")
confirm = Confirm(key="confirm", message="Please confirm", field="ok", title="OK")
contact = Form(key="contact", model=Contact, message="Please provide your information")
profile = Form(key="profile", model=Profile, message="Please provide user information")
enum_variants = Form(
    key="enum_variants", model=EnumVariants, message="Please select values using different enum schema types"
)


def _outcome_text(outcome: Outcome[Any]) -> str:
    content = outcome.value.model_dump_json() if isinstance(outcome, Accepted) else "{}"
    return f"action={outcome.action}, content={content}"


@server.tool(asks=[user_name])
async def test_input_required_result_elicitation(flow: Flow) -> str:
    """Asks the user's name (one form), then greets them."""
    return f"Hello, {flow.ask(user_name).name}!"


@server.tool(asks=[confirm])
async def test_input_required_result_request_state(flow: Flow) -> str:
    """Asks for a confirmation; the answer is read back through askback's sealed requestState."""
    ok = flow.ask(confirm)
    return f"state-ok: confirmation {'received' if ok else 'withheld'} (round {flow.round})"


@server.tool(asks=[step1, step2])
async def test_input_required_result_multi_round(flow: Flow) -> str:
    """A chain over two rounds: the second question is asked only once the first is answered."""
    name = flow.ask(step1).name
    color = flow.ask(step2).color
    return f"{name} likes {color}."


@server.tool(asks=[confirm])
async def test_input_required_result_tampered_state(flow: Flow) -> str:
    """Asks for a confirmation; a tampered requestState on the retry is refused by the SDK's sealing boundary."""
    return "state-ok: confirmed" if flow.ask(confirm) else "state-ok: not confirmed"


@server.tool(asks=[user_name])
async def test_streaming_elicitation(flow: Flow) -> str:
    """Asks the user's name: on 2026-07-28 the question travels in the result, never as a request on the stream."""
    return f"Hello, {flow.ask(user_name).name}!"


@server.tool(asks=[contact])
async def test_elicitation(message: str, flow: Flow) -> str:
    """Asks the user for a username and an email address, showing `message`."""
    return f"User response: {_outcome_text(flow.outcome(contact, message=message))}"


@server.tool(asks=[profile])
async def test_elicitation_sep1034_defaults(flow: Flow) -> str:
    """Asks a form whose every field has a default (SEP-1034)."""
    return f"Elicitation completed: {_outcome_text(flow.outcome(profile))}"


@server.tool(asks=[enum_variants])
async def test_elicitation_sep1330_enums(flow: Flow) -> str:
    """Asks a form with each enum variant of SEP-1330."""
    return f"Elicitation completed: {_outcome_text(flow.outcome(enum_variants))}"


# --- questions for the client's model and roots (the SDK's resolvers) ------------------------------------------
#
# The SDK names a resolver's wire key after its module path (`tests.conformance.server:capital_question`); that is
# stable here because the fixture is only ever served under this one module path.


def _ask_model(text: str, max_tokens: int) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=text))], max_tokens=max_tokens)


def capital_question() -> Sample:
    return _ask_model("What is the capital of France?", 100)


def greeting() -> Sample:
    return _ask_model("Generate a greeting", 50)


def client_roots() -> ListRoots:
    return ListRoots()


def the_prompt(prompt: str) -> Sample:
    return _ask_model(prompt, 100)


def _text(result: CreateMessageResult) -> str:
    return result.content.text if isinstance(result.content, TextContent) else "(no text)"


@mcp.tool()
async def test_input_required_result_sampling(answer: Annotated[CreateMessageResult, Resolve(capital_question)]) -> str:
    """Asks the client's model a question."""
    return f"Model said: {_text(answer)}"


@mcp.tool()
async def test_input_required_result_list_roots(roots: Annotated[ListRootsResult, Resolve(client_roots)]) -> str:
    """Asks the client for its roots."""
    return f"Client exposed {len(roots.roots)} root(s)."


@mcp.tool()
async def test_sampling(prompt: str, answer: Annotated[CreateMessageResult, Resolve(the_prompt)]) -> str:
    """Asks the client's model `prompt`."""
    return f"LLM response: {_text(answer)}"


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@mcp.tool()
async def test_input_required_result_multiple_inputs(
    name: Annotated[Name, Resolve(ask_name)],
    said: Annotated[CreateMessageResult, Resolve(greeting)],
    roots: Annotated[ListRootsResult, Resolve(client_roots)],
) -> str:
    """Asks the user, the client's model and the client's roots in one round."""
    return f"{_text(said)} {name.name}; {len(roots.roots)} root(s). All inputs received."


def say_hello_if_sampling(ctx: Context) -> Sample | None:
    caps = ctx.client_capabilities
    return _ask_model("Say hello", 50) if caps is not None and caps.sampling is not None else None


def ask_name_if_elicitation(ctx: Context) -> Elicit[Name] | None:
    caps = ctx.client_capabilities
    return Elicit("What is your name?", Name) if caps is not None and caps.elicitation is not None else None


@mcp.tool()
async def test_input_required_result_capabilities(
    said: Annotated[CreateMessageResult | None, Resolve(say_hello_if_sampling)],
    name: Annotated[Name | None, Resolve(ask_name_if_elicitation)],
) -> str:
    """Asks only through what the request declared: the model when it declared sampling, the user when it declared
    elicitation."""
    parts = [f"model said {_text(said)!r}" if said else "no sampling", f"name {name.name}" if name else "no name"]
    return "; ".join(parts)


@mcp.tool()
async def test_missing_capability(said: Annotated[CreateMessageResult, Resolve(capital_question)]) -> str:
    """Needs the client's sampling capability: without it the call fails with -32021 naming `sampling`."""
    return f"Model said: {_text(said)}"


# --- plain SDK fixtures ----------------------------------------------------------------------------------------


@mcp.tool()
def test_simple_text() -> str:
    """Returns simple text."""
    return "This is a simple text response for testing."


@mcp.tool()
def test_image_content() -> list[ImageContent]:
    """Returns an image."""
    return [ImageContent(type="image", data=PNG, mime_type="image/png")]


@mcp.tool()
def test_audio_content() -> list[AudioContent]:
    """Returns audio."""
    return [AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


@mcp.tool()
def test_embedded_resource() -> list[EmbeddedResource]:
    """Returns an embedded resource."""
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
            ),
        )
    ]


@mcp.tool()
def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Returns text, an image and an embedded resource."""
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG, mime_type="image/png"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="test://mixed-content-resource", mime_type="application/json", text='{"test": "data", "value": 123}'
            ),
        ),
    ]


@mcp.tool()
def test_error_handling() -> str:
    """Always fails, with a tool error the model can read."""
    raise ToolError("This tool intentionally returns an error for testing")


async def _log_three(ctx: Context) -> None:
    # The suite asks for pauses between the messages, so that a client sees them arrive one by one.
    for i, text in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
        if i:
            await anyio.sleep(0.05)
        await ctx.log("info", text)


@mcp.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Sends three log messages while it runs."""
    await _log_three(ctx)
    return "Tool with logging executed successfully"


@mcp.tool()
async def test_logging_tool(ctx: Context) -> str:
    """Logs while it runs; a 2026-07-28 request that set no log level must not receive the messages."""
    await _log_three(ctx)
    return "Logging tool executed"


@mcp.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress 0, 50 and 100 of 100."""
    for done in (0, 50, 100):
        await ctx.report_progress(progress=done, total=100, message=f"Completed step {done} of 100")
    return "Progress reported"


def _dynamic() -> str:
    """Registered and removed again by the list-change triggers."""
    return "dynamic"


@mcp.tool()
async def test_trigger_tool_change(ctx: Context) -> str:
    """Changes the tool list and tells subscribers."""
    mcp.add_tool(_dynamic, name="test_dynamic_tool")
    mcp.remove_tool("test_dynamic_tool")
    await ctx.notify_tools_changed()
    return "tool list changed"


@mcp.tool()
async def test_trigger_prompt_change(ctx: Context) -> str:
    """Changes the prompt list and tells subscribers."""
    mcp.add_prompt(Prompt.from_function(_dynamic, name="test_dynamic_prompt", description="dynamic"))
    mcp.remove_prompt("test_dynamic_prompt")
    await ctx.notify_prompts_changed()
    return "prompt list changed"


# Resources


@mcp.resource("test://static-text")
def static_text() -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@mcp.resource("test://static-binary")
def static_binary() -> bytes:
    """A static binary resource (a PNG)."""
    return base64.b64decode(PNG)


@mcp.resource("test://template/{id}/data")
def template_data(id: str) -> str:
    """A resource template."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@mcp.resource("test://watched-resource")
def watched() -> str:
    """A resource a 2025-11-25 client can subscribe to."""
    return "Watched resource content"


# Prompts


@mcp.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """A prompt without arguments."""
    return [UserMessage(role="user", content=TextContent(type="text", text="This is a simple prompt for testing."))]


@mcp.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """A prompt with two required arguments."""
    text = f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
    return [UserMessage(role="user", content=TextContent(type="text", text=text))]


@mcp.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    """A prompt with an embedded resource."""
    resource = TextResourceContents(
        uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
    )
    return [
        UserMessage(role="user", content=EmbeddedResource(type="resource", resource=resource)),
        UserMessage(role="user", content=TextContent(type="text", text="Please process the embedded resource above.")),
    ]


@mcp.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """A prompt with an image."""
    return [
        UserMessage(role="user", content=ImageContent(type="image", data=PNG, mime_type="image/png")),
        UserMessage(role="user", content=TextContent(type="text", text="Please analyze the image above.")),
    ]


CONTEXT_SCHEMA = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}


@mcp.prompt()
async def test_input_required_result_prompt(ctx: Context) -> list[UserMessage] | InputRequiredResult:
    """A prompt that asks the user for context before it renders."""
    answer = (ctx.input_responses or {}).get("user_context")
    if isinstance(answer, ElicitResult) and answer.action == "accept" and answer.content:
        text = f"Use the following context: {answer.content.get('context', '')}"
        return [UserMessage(role="user", content=TextContent(type="text", text=text))]
    question = ElicitRequestFormParams(message="What context should the prompt use?", requested_schema=CONTEXT_SCHEMA)
    return InputRequiredResult(input_requests={"user_context": ElicitRequest(params=question)})


# Completions and the 2025-11-25 methods MCPServer does not register itself


@mcp.completion()
async def complete(
    ref: PromptReference | ResourceTemplateReference, argument: CompletionArgument, context: CompletionContext | None
) -> Completion:
    return Completion(values=[], total=0, has_more=False)


async def set_level(ctx: ServerRequestContext[Any, Any], params: SetLevelRequestParams) -> EmptyResult:
    logger.info("log level set to %s", params.level)
    return EmptyResult()


async def subscribe(ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
    return EmptyResult()


async def unsubscribe(ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
    return EmptyResult()


# MCPServer has no public registration for these (the SDK's own conformance server does the same); the runner gates
# them to the 2025-11-25 wire, where 2026-07-28 requests get -32601.
_lowlevel = mcp._lowlevel_server
_lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)
_lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
_lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)

register_task_fixtures(server)
