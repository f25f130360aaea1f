#!/usr/bin/env python3
"""The Jinja engine against transformers' apply_chat_template on real chat templates.

Every template in TEMPLATES_DIR (the ones llama.cpp keeps of real models, from the
llama-cpp-python source distribution scripts/setup.sh fetches) renders the same
conversations twice: through transformers' render_jinja_template (what
apply_chat_template calls: jinja2's ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks, loop controls and transformers' tojson/raise_exception) and through
`pagedllm-tokenize --render-template`. The texts must be byte-equal; where jinja2
raises (raise_exception, a role the template refuses), ours must fail too.

Conversations: plain turns with and without a system message and a generation
prompt; tools with an assistant tool call and the tool's result; a reasoning trace;
thinking off (Qwen3's enable_thinking). Templates of the families this project serves
(REQUIRED) must match on every conversation; any other template that fails is listed
as UNSUPPORTED with the reason, so a new failure anywhere fails the test.

Also the templates of the models this project ships or serves by default: the GGUF
files' tokenizer.chat_template (--gguf: the default model, SmolLM2) and the
tokenizer_config.json files' chat_template (--tokenizer-config: the embedded model, the
tokenizer fixtures).

Usage: chat_template_oracle.py --bin pagedllm-tokenize --templates DIR [--gguf FILE...]
                               [--tokenizer-config FILE...]
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

from transformers.utils.chat_template_utils import render_jinja_template

# The families issue 35 names, by their file in llama.cpp's models/templates.
REQUIRED = [
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "Qwen-QwQ-32B.jinja",
    "google-gemma-2-2b-it.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
    "HuggingFaceTB-SmolLM3-3B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
]

# Templates jinja2 renders but this engine refuses, each with why (a feature no
# template of the families served uses). None today.
UNSUPPORTED = {}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
        },
    },
}

CASES = {
    "user, generation prompt": dict(messages=[{"role": "user", "content": "Hi there!"}], add_generation_prompt=True),
    "system and turns": dict(
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": " What is 2+2? "},
            {"role": "assistant", "content": "4."},
            {"role": "user", "content": "And 3+3?\nExplain ünïcödé <b>tags</b> & \"quotes\"."},
        ],
        add_generation_prompt=True,
    ),
    "turns, no generation prompt": dict(
        messages=[
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi! How can I help?"},
        ],
        add_generation_prompt=False,
    ),
    "tools and a tool round trip": dict(
        messages=[
            {"role": "system", "content": "Use tools when they help."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "a1B2c3D4e",  # 9 alphanumerics, as Mistral's templates require
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "a1B2c3D4e", "name": "get_weather",
             "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
        ],
        tools=[WEATHER_TOOL],
        add_generation_prompt=True,
    ),
    "parallel tool calls, content null": dict(
        messages=[
            {"role": "user", "content": "Weather in Rome and Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_rome_01", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
                    {"id": "call_oslo_02", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_rome_01", "content": "24"},
            {"role": "tool", "tool_call_id": "call_oslo_02", "content": "-3"},
        ],
        tools=[WEATHER_TOOL],
        add_generation_prompt=True,
    ),
    "content parts": dict(
        messages=[
            {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]},
            {"role": "user", "content": [{"type": "text", "text": "Describe Paris"}, {"type": "text", "text": "briefly."}]},
        ],
        add_generation_prompt=True,
    ),
    "tools offered": dict(
        messages=[{"role": "user", "content": "Weather in Oslo in fahrenheit?"}],
        tools=[WEATHER_TOOL],
        add_generation_prompt=True,
    ),
    "reasoning trace": dict(
        messages=[
            {"role": "user", "content": "Is 7 prime?"},
            {"role": "assistant", "content": "<think>\nIt has no divisors but 1 and 7.\n</think>\n\nYes."},
            {"role": "user", "content": "And 9?"},
        ],
        add_generation_prompt=True,
    ),
    "thinking off": dict(
        messages=[{"role": "user", "content": "Quick: capital of France?"}],
        add_generation_prompt=True,
        enable_thinking=False,
    ),
}

SPECIAL_TOKENS = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
# Templates that print today's date read date_string first; fixing it keeps both sides equal.
FIXED = dict(date_string="26 Jul 2024")


def oracle(template, case):
    variables = {**SPECIAL_TOKENS, **FIXED, **case}
    messages = variables.pop("messages")
    tools = variables.pop("tools", None)
    try:
        return {"text": render_jinja_template([messages], tools=tools, chat_template=template, **variables)[0][0]}
    except Exception as error:  # raise_exception, or jinja2's own errors
        return {"error": f"{type(error).__name__}: {error}"}


def ours(binary, path, cases):
    lines = []
    for case in cases:
        variables = {**SPECIAL_TOKENS, **FIXED, **case}
        variables.setdefault("tools", None)  # transformers passes tools=None and documents=None
        variables.setdefault("documents", None)
        lines.append(json.dumps(variables))
    result = subprocess.run([binary, "--render-template", str(path)], input="\n".join(lines) + "\n",
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{path.name}: pagedllm-tokenize exited {result.returncode}: {result.stderr}")
    return [json.loads(line) for line in result.stdout.splitlines()]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--templates", required=True, type=pathlib.Path)
    parser.add_argument("--gguf", nargs="*", default=[], type=pathlib.Path)
    parser.add_argument("--tokenizer-config", nargs="*", default=[], type=pathlib.Path)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()

    paths = sorted(args.templates.glob("*.jinja"))
    extra = pathlib.Path(tempfile.mkdtemp(prefix="chat_template_oracle_"))
    for gguf_path in args.gguf:
        import gguf
        field = gguf.GGUFReader(gguf_path).fields["tokenizer.chat_template"]
        (extra / f"{gguf_path.name}.jinja").write_bytes(bytes(field.parts[field.data[0]]))
    for config_path in args.tokenizer_config:
        template = json.loads(config_path.read_text()).get("chat_template")
        if isinstance(template, list):
            template = next(t["template"] for t in template if t["name"] == "default")
        if template:
            (extra / f"{config_path.parent.name}.jinja").write_text(template)
    extra_paths = sorted(extra.glob("*.jinja"))
    if len(extra_paths) != len(args.gguf) + sum(1 for c in args.tokenizer_config
                                                  if json.loads(c.read_text()).get("chat_template")):
        sys.exit("a --gguf or --tokenizer-config template was not extracted")
    if len(paths) < 50:
        sys.exit(f"only {len(paths)} templates in {args.templates}; scripts/setup.sh extracts llama.cpp's")
    names = {p.name for p in paths}
    missing = [n for n in REQUIRED + list(UNSUPPORTED) if n not in names]
    if missing:
        sys.exit(f"templates missing from {args.templates}: {missing}")

    failures = []
    matched = 0
    for path in paths + extra_paths:
        template = path.read_text()
        cases = list(CASES.values())
        expected = [oracle(template, case) for case in cases]
        got = ours(args.bin, path, cases)
        problems = []
        for name, want, have in zip(CASES, expected, got):
            if "text" in want:
                if have.get("text") != want["text"]:
                    if "text" in have:
                        at = first_difference(want["text"], have["text"])
                        problems.append(f"{name}: differs at byte {at}: transformers {want['text'][at:at + 60]!r}, "
                                        f"ours {have['text'][at:at + 60]!r}")
                    else:
                        problems.append(f"{name}: ours failed: {have.get('error')}")
            elif "error" not in have:
                problems.append(f"{name}: transformers failed ({want['error']}), ours rendered")
        if path.name in UNSUPPORTED:
            if not problems:
                failures.append(f"{path.name}: listed as unsupported but now matches; take it off the list")
            continue
        if problems:
            failures.append(f"{path.name}:\n    " + "\n    ".join(problems))
        else:
            matched += 1
            if args.verbose:
                print(f"ok {path.name}")

    print(f"{matched} of {len(paths) + len(extra_paths)} templates byte-equal to transformers on {len(CASES)} conversations "
          f"({len(UNSUPPORTED)} listed as unsupported)")
    if failures:
        print("FAILED:\n" + "\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
