"""The tool-call protocol shared by the tiny policy and the real one (Qwen3's format).

A prompt is the chat template's rendering of the messages and the tool schemas. The model
answers with free text and zero or more blocks

    <tool_call>
    {"name": "bash", "arguments": {"command": "ls"}}
    </tool_call>

which `parse_tool_calls` turns into `ToolCall`s. A malformed block is not an exception: it is
a ToolCall with `error` set, whose `error_message()` the agent sends back to the model as the
tool result, so the policy sees (and can learn from) what it got wrong. Executing a call is
the agent's job, not this module's.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": ("Run one bash command in the repository's root folder and return its "
                        "exit code, stdout and stderr. Each call runs in a fresh shell; the "
                        "command has a time limit."),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the bash command to run"},
            },
            "required": ["command"],
        },
    },
}

SUBMIT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": ("Finish the task: the current state of the repository is your answer. "
                        "Call it alone, once, when the fix is done."),
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}

EDIT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "edit",
        "description": ("Replace exactly one occurrence of `old` with `new` in the file at "
                        "`path`; fails if `old` occurs zero times or more than once."),
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path, relative to the repository root"},
                "old": {"type": "string", "description": "the exact text to replace (must occur once)"},
                "new": {"type": "string", "description": "the replacement text"},
            },
            "required": ["path", "old", "new"],
        },
    },
}

# The agent's default tool set (mini-swe-agent style: bash plus an explicit submit).
TOOLS: tuple[dict[str, Any], ...] = (BASH_TOOL, SUBMIT_TOOL)


def tool_schemas(edit: bool = False) -> list[dict[str, Any]]:
    """The tool schemas to render into the system prompt: bash, submit (and edit if asked)."""
    return [*TOOLS, EDIT_TOOL] if edit else list(TOOLS)


# -- rendering ------------------------------------------------------------------------------

def render(tokenizer, messages: Sequence[dict], tools: Sequence[dict] | None = TOOLS,
           add_generation_prompt: bool = True, **template_kwargs) -> str:
    """The prompt text for `messages` (dicts with role/content, assistant `tool_calls`, tool
    results as role "tool") and `tools` (schemas; None or [] for none), through the
    tokenizer's chat template; ends with '<|im_start|>assistant\\n' when add_generation_prompt.
    """
    return tokenizer.apply_chat_template(list(messages), tools=list(tools) if tools else None,
                                         add_generation_prompt=add_generation_prompt,
                                         tokenize=False, **template_kwargs)


def render_ids(tokenizer, messages: Sequence[dict], tools: Sequence[dict] | None = TOOLS,
               add_generation_prompt: bool = True, **template_kwargs) -> list[int]:
    """`render` followed by tokenization (no extra special tokens): the prompt's token ids."""
    text = render(tokenizer, messages, tools, add_generation_prompt, **template_kwargs)
    return tokenizer.encode(text, add_special_tokens=False)


def tool_call_message(name: str, arguments: dict[str, Any], content: str = "") -> dict:
    """An assistant message with one tool call, in the OpenAI/transformers message format."""
    return {"role": "assistant", "content": content,
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The exact text of one tool-call block as the chat template renders it."""
    return f'{TOOL_CALL_OPEN}\n{{"name": "{name}", "arguments": {json.dumps(arguments, ensure_ascii=False)}}}\n{TOOL_CALL_CLOSE}'


# -- parsing --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolCall:
    """One <tool_call> block of a model's answer.

    `name`/`arguments` are set when the block parsed; `error` is None for a good call, else
    one of ERROR_KINDS, with `detail` saying what exactly. `raw` is the block's text between
    the tags; `start`/`end` are its character offsets (tags included) in the parsed text.
    """

    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str = ""
    error: str | None = None
    detail: str = ""
    start: int = 0
    end: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def error_message(self) -> str:
        """What the agent tells the model about a bad call (empty for a good one)."""
        if self.ok:
            return ""
        return (f"Tool call error ({self.error}): {self.detail} Write each call as "
                f"{TOOL_CALL_OPEN}\\n{{\"name\": <tool name>, \"arguments\": {{...}}}}\\n"
                f"{TOOL_CALL_CLOSE} with valid JSON.")


ERROR_KINDS = ("unterminated", "invalid_json", "not_an_object", "missing_name", "bad_arguments",
               "unknown_tool", "missing_argument", "unexpected_argument", "wrong_type")

_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)
_JSON_TYPES = {"string": str, "object": dict, "array": list, "boolean": bool,
               "integer": int, "number": (int, float), "null": type(None)}


def _parse_block(body: str, start: int, end: int) -> ToolCall:
    text = body.strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return ToolCall(None, raw=body, error="invalid_json", start=start, end=end,
                        detail=f"the call is not valid JSON: {exc.msg} at line {exc.lineno} "
                               f"column {exc.colno}.")
    if not isinstance(obj, dict):
        return ToolCall(None, raw=body, error="not_an_object", start=start, end=end,
                        detail=f"expected a JSON object, got {type(obj).__name__}.")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(None, raw=body, error="missing_name", start=start, end=end,
                        detail='the object has no string "name".')
    args = obj.get("arguments", {})
    if isinstance(args, str):  # OpenAI style: arguments as a JSON-encoded string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolCall(name, raw=body, error="bad_arguments", start=start, end=end,
                            detail=f'"arguments" is a string that is not valid JSON: {exc.msg}.')
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCall(name, raw=body, error="bad_arguments", start=start, end=end,
                        detail=f'"arguments" must be an object, got {type(args).__name__}.')
    return ToolCall(name, args, raw=body, start=start, end=end)


def validate_call(call: ToolCall, tools: Sequence[dict]) -> ToolCall:
    """Check a parsed call against the tool schemas: known name, required arguments present,
    no unknown arguments, top-level JSON types right. Returns the call, with `error` set if not."""
    if not call.ok:
        return call
    schemas = {t.get("function", t)["name"]: t.get("function", t) for t in tools}
    if call.name not in schemas:
        return _with_error(call, "unknown_tool",
                           f"no tool named {call.name!r}; the tools are {', '.join(sorted(schemas))}.")
    params = schemas[call.name].get("parameters", {})
    props = params.get("properties", {})
    missing = [k for k in params.get("required", []) if k not in call.arguments]
    if missing:
        return _with_error(call, "missing_argument",
                           f"{call.name} needs argument(s) {', '.join(missing)}.")
    extra = sorted(set(call.arguments) - set(props))
    if extra and params.get("additionalProperties", False) is False:
        return _with_error(call, "unexpected_argument",
                           f"{call.name} takes no argument(s) {', '.join(extra)}; it takes "
                           f"{', '.join(props) or 'none'}.")
    for key, spec in props.items():
        want = _JSON_TYPES.get(spec.get("type", ""))
        value = call.arguments.get(key)
        if key in call.arguments and want is not None and (
                not isinstance(value, want) or (isinstance(value, bool) and spec["type"] != "boolean")):
            return _with_error(call, "wrong_type", f"argument {key} of {call.name} must be a "
                                                   f"{spec['type']}, got {type(value).__name__}.")
    return call


def _with_error(call: ToolCall, kind: str, detail: str) -> ToolCall:
    return ToolCall(call.name, call.arguments, call.raw, kind, detail, call.start, call.end)


def parse_tool_calls(text: str, tools: Sequence[dict] | None = None) -> list[ToolCall]:
    """Every <tool_call>...</tool_call> block of `text`, in order, as ToolCalls.

    A block that does not parse (bad JSON, not an object, no name, arguments not an object)
    gives a ToolCall with `error` set; an opening tag without its closing tag (generation cut
    by the length limit) gives one `unterminated` call. With `tools`, each call is also checked
    against the schemas (`validate_call`). Text without any tag gives [].
    """
    calls: list[ToolCall] = []
    pos = 0
    for match in _BLOCK.finditer(text):
        calls.append(_parse_block(match.group(1), match.start(), match.end()))
        pos = match.end()
    rest = text.find(TOOL_CALL_OPEN, pos)
    if rest != -1:
        calls.append(ToolCall(None, raw=text[rest + len(TOOL_CALL_OPEN):], error="unterminated",
                              detail=f"{TOOL_CALL_OPEN} is never closed by {TOOL_CALL_CLOSE}.",
                              start=rest, end=len(text)))
    if tools:
        calls = [validate_call(c, tools) for c in calls]
    return calls


def assistant_message(text: str) -> dict:
    """The assistant message to append to the history for a generated `text`.

    The content is the text exactly as generated (tool-call blocks included), and no
    `tool_calls` field: the template then re-renders the turn byte for byte, so the history's
    tokens are the tokens the policy produced (what PPO's token alignment needs). The parsed
    calls are returned separately by `parse_tool_calls`.
    """
    return {"role": "assistant", "content": text}


def tool_message(content: str) -> dict:
    """A tool result message (rendered as a user turn wrapped in <tool_response>)."""
    return {"role": "tool", "content": content}
