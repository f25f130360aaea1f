"""A chat template of the operator's own (model.chat_template / --chat-template FILE), run by the
Jinja engine, through the official openai client: the prompt the server builds has the ids of
transformers' rendering of the same template (jinja2) encoded by HF tokenizers, and a template
that refuses a conversation or fails is a 400 naming why, after which the server serves on."""

import json

import openai
import pytest
from tokenizers import Tokenizer
from transformers.utils.chat_template_utils import render_jinja_template

TEMPLATE = """{%- if messages[0].role == 'system' -%}
  {{- raise_exception('This model takes no system message.') -}}
{%- endif -%}
{{- bos_token -}}
{%- for message in messages %}
  {%- if message.content is string %}{% set text = message.content %}
  {%- else %}{% set text = message.content | map(attribute='text') | join(' ') %}{% endif %}
<|start_header_id|>{{ message.role | upper }}<|end_header_id|>{{ text | trim }}{{ message.nope.nope if text == 'fail' }}<|eot_id|>
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>ASSISTANT<|end_header_id|>{% endif %}"""


@pytest.fixture(scope="module")
def templated(start_server, tmp_path_factory):
    path = tmp_path_factory.mktemp("chat_template") / "custom.jinja"
    path.write_text(TEMPLATE)
    host = start_server([f"model.chat_template='{path}'"])
    with host.client() as c:
        yield c, c.models.list().data[0].id, host
    assert host.stop() == 0, host.log()


def expected_prompt_tokens(serve_config, messages):
    tiny = serve_config.parent / "tiny"
    special = json.loads((tiny / "tokenizer_config.json").read_text())
    text = render_jinja_template([messages], chat_template=TEMPLATE, add_generation_prompt=True,
                                 bos_token=special["bos_token"], eos_token=special["eos_token"])[0][0]
    return len(Tokenizer.from_file(str(tiny / "tokenizer.json")).encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "  Hello there  "}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
     {"role": "user", "content": [{"type": "text", "text": "Two"}, {"type": "text", "text": "parts"}]}],
], ids=["one turn", "turns and content parts"])
def test_the_prompt_is_transformers_rendering(templated, serve_config, messages):
    client, model, _ = templated
    usage = client.chat.completions.create(model=model, messages=messages, max_tokens=1).usage
    # The server joins the texts of content parts with newlines (as vLLM does) before the template runs.
    joined = [{**m, "content": m["content"] if isinstance(m["content"], str)
               else "\n".join(p["text"] for p in m["content"])} for m in messages]
    assert usage.prompt_tokens == expected_prompt_tokens(serve_config, joined)


def test_a_refusal_or_failure_of_the_template_is_a_400_and_the_server_serves_on(templated):
    client, model, _ = templated
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=model, max_tokens=1, messages=[
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert "This model takes no system message." in refused.value.message

    with pytest.raises(openai.BadRequestError) as failed:
        client.chat.completions.create(model=model, max_tokens=1, messages=[{"role": "user", "content": "fail"}])
    assert "custom.jinja" in failed.value.message and "line 8" in failed.value.message
    assert "'dict object' has no attribute 'nope'" in failed.value.message

    ok = client.chat.completions.create(model=model, max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
    assert ok.choices[0].finish_reason == "length"
