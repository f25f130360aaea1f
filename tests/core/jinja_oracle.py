#!/usr/bin/env python3
"""The Jinja engine against jinja2 on small templates, where Python's types show.

Each template renders twice: through transformers' render_jinja_template (jinja2's
ImmutableSandboxedEnvironment as apply_chat_template configures it, with its tojson)
and through `pagedllm-tokenize --render-template`. The texts must be byte-equal; where
jinja2 raises, ours must fail too. The cases are the semantics real chat templates
lean on beyond strings: dict keys that are numbers, None, booleans or tuples (Python's
1 == 1.0 == True as one key, dictsort, items(), tojson's key conversion and sort_keys),
unhashable keys, and jinja2's Markup (what |safe and |escape return: Markup + str
escapes the str, its methods return Markup, ~ and the join/replace filters do not).

Usage: jinja_oracle.py --bin pagedllm-tokenize
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

from transformers.utils.chat_template_utils import render_jinja_template

VARIABLES = {"xs": [[1, "a"], [2, "b"]], "text": "<b>&'\"</b>", "d": {"k": "v"}}

TEMPLATES = [
    # Dict keys that are not strings.
    "{% set d = {1: 'a', 2.5: 'b', none: 'c', true: 'd', (1, 2): 'e'} %}"
    "{{ d }}|{{ d[1] }}|{{ d[1.0] }}|{{ d[true] }}|{{ d[(1, 2)] }}|{{ d[none] }}",
    "{% set d = {1: 'a', '1': 'b'} %}{{ d|tojson }}|{{ d.items()|list }}|{{ d|length }}|{{ d['1'] }}",
    "{{ {1: 'a', true: 'b'} }}|{{ {1: 2} == {1.0: 2} }}|{{ {(1, 'a'): 2} }}",
    "{% for k, v in {3: 'c', 1: 'a', 2: 'b'}|dictsort %}{{ k }}{{ v }},{% endfor %}",
    "{% for k, v in {3: 'c', 1: 'a', 2: 'b'}|dictsort(by='value', reverse=true) %}{{ k }}{{ v }},{% endfor %}",
    "{% for k, v in {'b': 1, 'A': 2, 'a': 3}|dictsort(true) %}{{ k }}{{ v }},{% endfor %}",
    "{{ {'b': 1}|dictsort(by='nope') }}",
    "{% for k, v in {10: 'x', 2: 'y'}.items() %}{{ k * 2 }}={{ v }};{% endfor %}",
    "{% for k in {2: 'a', 1: 'b'} %}{{ k + 1 }}{% endfor %}|{{ {2: 'a'}.keys()|list }}|{{ {2: 'a'}|items|list }}",
    "{{ 1 in {1: 'a'} }} {{ '1' in {1: 'a'} }} {{ 1.0 in {1: 'a'} }} {{ none in {none: 1} }}",
    "{{ {1: 'a'}.get(1) }} {{ {1: 'a'}.get(2, 'z') }} {{ {1: 'a'}.get('1') }}",
    "{{ {3: 'c', 1: 'a', true: 'x', 2.5: 'f', none: 0, false: 1}|tojson }}",
    "{{ {3: 'c', 1: 'a', 2.5: 'f'}|tojson(sort_keys=true) }}|{{ {1: 'a'}|tojson(indent=2) }}",
    "{{ {3: 'c', 'a': 1}|tojson(sort_keys=true) }}",
    "{{ {(1, 2): 'c'}|tojson }}",
    "{{ {[1]: 'c'} }}",
    "{{ {{'a': 1}: 'c'} }}",
    "{{ [1] in {1: 'a'} }}",
    "{{ {1: 'a'}.get([1]) }}",
    "{{ {1: 'a'}[[1]] }}|{{ {1: 'a'}[2] is defined }}",
    "{{ xs|map(attribute='0')|list }}|{{ xs|map(attribute='1')|join(',') }}",
    # The template of ByteDance-Seed-OSS, reduced: budgets keyed by integers.
    "{%- set budget = {0: 0, 512: 128, 1024: 256, 16384: 1024} -%}{%- set ns = namespace(interval=none) -%}"
    "{%- for k, v in budget|dictsort -%}{%- if ns.interval is none and 700 <= k -%}{%- set ns.interval = v -%}"
    "{%- endif -%}{%- endfor -%}{{ ns.interval }} {{ budget[16384] }}",
    # Identity: two equal dicts are not the same object.
    "{% set a = {'k': 1} %}{% set b = {'k': 1} %}{{ a is sameas a }} {{ a is sameas b }} {{ [1] is sameas [1] }}",
    # Markup.
    "{{ 'x'|safe + '<y>' }}|{{ '<y>' + 'x'|safe }}|{{ ('<a>'|safe) + ('<b>'|safe) }}|{{ '<a>'|e + '<' }}",
    "{{ ('<a>'|safe) ~ '<' }}|{{ ('a'|safe) * 2 + '<' }}|{{ 'a'|safe is escaped }}|{{ 'a' is escaped }}",
    "{{ ['a'|safe] }}|{{ ('<'|safe)|string + '<' }}|{{ ('a'|safe)|tojson }}|{{ 5|safe + '<' }}|{{ none|safe }}",
    "{{ ('<x>'|safe).upper() + '<' }}|{{ ('a,b'|safe).split(',') }}|{{ ('{}'|safe).format('<') }}",
    "{{ (','|safe).join(['<', 1]) }}|{{ ('a'|safe).replace('a', '<') }}|{{ ('a'|safe).startswith('a') }}",
    "{{ (' <x> '|safe)|trim + '&' }}|{{ ('<x>'|safe)|upper + '&' }}|{{ ('ab'|safe)[0] + '&' }}",
    "{{ ('ab'|safe)[::-1] + '&' }}|{{ ('<'|safe)|forceescape }}|{{ '<'|e|e }}|{{ text|e }}",
    "{{ ('a'|safe)|replace('a', 'b') + '<' }}|{{ ['<'|safe, '<']|join + '<' }}|{{ ('a'|safe)|title + '<' }}",
    "{{ {'a'|safe: 1}['a'] }}|{{ {'a': 1}['a'|safe] }}|{{ ('a'|safe) in {'a': 1} }}|{{ {'a'|safe: 1} }}",
    "{{ ('a'|safe) == 'a' }}|{{ d['k'|safe] }}|{{ 'k'|safe in d }}",
    # The template of functionary-medium-v3.1, reduced.
    "{{ \"Use the function '\"|safe + d.k + \"' to '\"|safe + text + \"'\\n\"|safe + d|tojson() }}",
]


def oracle(template):
    try:
        conversation = [[{"role": "user", "content": "x"}]]
        return {"text": render_jinja_template(conversation, chat_template=template, **VARIABLES)[0][0]}
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}


def ours(binary, template, directory):
    path = pathlib.Path(directory) / "template.jinja"
    path.write_text(template)
    variables = {"messages": [{"role": "user", "content": "x"}], "tools": None, "documents": None,
                 "add_generation_prompt": False, **VARIABLES}
    result = subprocess.run([binary, "--render-template", str(path)], input=json.dumps(variables) + "\n",
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:  # a template that does not parse
        return {"error": result.stderr.strip()}
    return json.loads(result.stdout.splitlines()[0])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    args = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory(prefix="jinja_oracle_") as directory:
        for template in TEMPLATES:
            want = oracle(template)
            have = ours(args.bin, template, directory)
            if "text" in want and have.get("text") != want["text"]:
                failures.append(f"{template!r}\n    jinja2: {want['text']!r}\n    ours:   {have}")
            elif "error" in want and "error" not in have:
                failures.append(f"{template!r}\n    jinja2 raised {want['error']}\n    ours rendered {have['text']!r}")
    print(f"{len(TEMPLATES) - len(failures)} of {len(TEMPLATES)} templates as jinja2 renders them")
    if failures:
        print("FAILED:\n" + "\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
