// The Jinja engine's semantics where chat templates depend on them, each
// expectation what jinja2 3.1 (as transformers configures it: trim_blocks,
// lstrip_blocks, loop controls, ImmutableSandboxedEnvironment) prints for the
// same template; and its bounds on templates that would not end. Real
// templates are compared with transformers itself in chat_template_oracle.py.

#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "core/tokenizer/jinja/template.h"

namespace pagedllm::jinja {
namespace {

std::string render(const std::string& source, const std::string& variables = "{}", RenderLimits limits = {}) {
  return Template(source).render(Value::from_json(nlohmann::ordered_json::parse(variables)), limits);
}

std::string error_of(const std::string& source, const std::string& variables = "{}", RenderLimits limits = {}) {
  try {
    (void)render(source, variables, limits);
  } catch (const TemplateError& error) {
    return error.what();
  }
  return "(rendered)";
}

TEST_CASE("jinja: whitespace control as transformers sets it (trim_blocks, lstrip_blocks)", "[jinja]") {
  CHECK(render("{% if true %}\nA\n{% endif %}\nB") == "A\nB");
  CHECK(render("  {% if true %}A{% endif %}") == "A");
  CHECK(render("x  {% if true %}A{% endif %}") == "x  A");
  CHECK(render("a\n  {%- if true -%}\n  b  \n{%- endif %}") == "ab");
  CHECK(render("{{ 'a' }}\n{{ 'b' }}") == "a\nb");
  CHECK(render("a {#- c -#} b") == "ab");
  CHECK(render("{%+ if true %}x{% endif %}") == "x");
  CHECK(render("  {%+ if true %}x{% endif %}") == "  x");
  CHECK(render("{% if true +%}\nx{% endif %}") == "\nx");
  CHECK(render("line\n") == "line");  // keep_trailing_newline=False
  CHECK(render("a\r\nb") == "a\nb");
}

TEST_CASE("jinja: values print as Python prints them", "[jinja]") {
  CHECK(render("{{ 1 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}") == "0.5 2.0 3 -4 2 1024");
  CHECK(render("{{ [1, 'a', none, true, 1.5] }}") == "[1, 'a', None, True, 1.5]");
  CHECK(render("{{ {'k': \"it's\"} }}") == "{'k': \"it's\"}");
  CHECK(render("{{ ('a',) }} {{ none }} {{ undefined_name }}|") == "('a',) None |");
  CHECK(render("{{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 100.0 }}") == "1e+20 0.30000000000000004 1e-05 100.0");
  CHECK(render("{{ true == 1 }} {{ 1 == 1.0 }} {{ 'a' ~ 1 ~ none }}") == "True True a1None");
  CHECK(render("{{ 'héllo'|length }} {{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ [1,2,3,4][1:-1] }}") == "5 é olléh [2, 3]");
}

TEST_CASE("jinja: loops, scopes and namespaces", "[jinja]") {
  CHECK(render("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
               R"({"xs": ["a", "b", "c"]})") == "1a,2b,3c");
  CHECK(render("{% set n = 0 %}{% for x in [1, 2] %}{% set n = n + x %}{% endfor %}{{ n }}") == "0");
  CHECK(render("{% set ns = namespace(n=0) %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}") == "3");
  CHECK(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}") == "2242");
  CHECK(render("{% for x in [] %}{{ x }}{% else %}none{% endfor %}") == "none");
  CHECK(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}") == "a=1;b=2;");
  CHECK(render("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 3 %}{% break %}{% endif %}"
               "{{ x }}{% endfor %}") == "013");
  CHECK(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} "
               "{{ greet('Bo', punct='?') }}") == "Hi Ann! Hi Bo?");
  CHECK(render("{% set x %}in {{ 'block' }}{% endset %}[{{ x }}]") == "[in block]");
  CHECK(render("{% filter upper %}shout{% endfilter %}") == "SHOUT");
}

TEST_CASE("jinja: the filters, tests and methods chat templates call", "[jinja]") {
  CHECK(render(R"({{ {"b": [1, 2.5], "a": "é\n"}|tojson }})") == R"({"b": [1, 2.5], "a": "é\n"})");
  CHECK(render(R"({{ {"b": 1, "a": [1, 2]}|tojson(indent=2, sort_keys=true) }})") ==
        "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": 1\n}");
  CHECK(render(R"({{ "é<"|tojson(ensure_ascii=true) }} {{ "<b>"|tojson }})") == R"("\u00e9<" "<b>")");
  CHECK(render("{{ '  a b  '|trim }}|{{ 'x,y,,z'.split(',') }}|{{ ' a  b '.split() }}|{{ 'abc'.upper() }}") ==
        "a b|['x', 'y', '', 'z']|['a', 'b']|ABC");
  CHECK(render("{{ 'xxhixx'.strip('x') }} {{ 'hello'.startswith(('he', 'x')) }} {{ 'a-b'.replace('-', '+') }}") ==
        "hi True a+b");
  CHECK(render("{{ 'hello world'|title }} {{ 'hELLO'|capitalize }} {{ '{} and {name}'.format(1, name='x') }}") ==
        "Hello World Hello 1 and x");
  CHECK(render("{{ xs|map(attribute='n')|join(',') }} {{ xs|selectattr('n', 'gt', 1)|list|length }}",
               R"({"xs": [{"n": 1}, {"n": 2}, {"n": 3}]})") == "1,2,3 2");
  CHECK(render("{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'a']|unique|list }} {{ [1, 2]|first }}{{ [1, 2]|last }}") ==
        "[1, 2, 3] ['b', 'A'] 12");
  CHECK(render("{{ undefined_name|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }}") == "d None d");
  CHECK(render("{{ 'a\nb'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}") == "a\n  b|  a\n  b");
  CHECK(render("{{ x is defined }} {{ y is none }} {{ x is mapping }} {{ 'a' is string }} {{ 1 is number }}"
               " {{ true is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ x is iterable }} {{ 3 is odd }}",
               R"({"x": {}, "y": null})") == "True True True True True True True True True True");
  CHECK(render("{{ x.get('a') }} {{ x.get('z', 0) }} {{ x['a'] }} {{ x.a }} {{ x.z is defined }}",
               R"({"x": {"a": 5}})") == "5 0 5 5 False");
  // map/select return generators in jinja2: always true, no length, empty once iterated.
  CHECK(render("{% if [1]|select('gt', 5) %}yes{% endif %}") == "yes");
  CHECK(render("{% set g = [1, 2]|map('string') %}{{ g|join }}{{ g|join }}") == "12");
  CHECK_THAT(error_of("{{ [1]|select('odd')|length }}"), Catch::Contains("has no len()"));
}

TEST_CASE("jinja: dict keys are any hashable value matched as Python matches them", "[jinja]") {
  CHECK(render("{% set d = {1: 'a', 2.5: 'b', none: 'c', true: 'd', (1, 2): 'e'} %}"
               "{{ d }}|{{ d[1] }}|{{ d[1.0] }}|{{ d[(1, 2)] }}|{{ d[none] }}") ==
        "{1: 'd', 2.5: 'b', None: 'c', (1, 2): 'e'}|d|d|e|c");
  CHECK(render("{% for k, v in {3: 'c', 1: 'a', 2: 'b'}|dictsort %}{{ k }}{{ v }},{% endfor %}") == "1a,2b,3c,");
  CHECK(render("{% for k, v in {10: 'x', 2: 'y'}.items() %}{{ k * 2 }}={{ v }};{% endfor %}") == "20=x;4=y;");
  CHECK(render("{{ 1 in {1: 'a'} }} {{ '1' in {1: 'a'} }} {{ {1: 'a'}.get(1) }}") == "True False a");
  CHECK(render("{{ {3: 'c', 1: 'a', true: 'x', 2.5: 'f', none: 0}|tojson }}") ==
        R"({"3": "c", "1": "x", "2.5": "f", "null": 0})");
  CHECK(render("{{ {3: 'c', 1: 'a', 2.5: 'f'}|tojson(sort_keys=true) }}") == R"({"1": "a", "2.5": "f", "3": "c"})");
  CHECK_THAT(error_of("{{ {[1]: 'c'} }}"), Catch::Contains("unhashable type: 'list'"));
  CHECK_THAT(error_of("{{ {(1, 2): 'c'}|tojson }}"), Catch::Contains("keys must be str, int, float, bool or None"));
  CHECK_THAT(error_of("{{ {3: 'c', 'a': 1}|tojson(sort_keys=true) }}"), Catch::Contains("'<' not supported"));
}

TEST_CASE("jinja: Markup as jinja2 has it: |safe + text escapes the text", "[jinja]") {
  CHECK(render("{{ 'x'|safe + '<y>' }}|{{ '<y>' + 'x'|safe }}|{{ ('<a>'|safe) + ('<b>'|safe) }}|{{ '<a>'|e + '<' }}") ==
        "x&lt;y&gt;|&lt;y&gt;x|<a><b>|&lt;a&gt;&lt;");
  CHECK(render("{{ ('<a>'|safe) ~ '<' }}|{{ ('a'|safe) * 2 + '<' }}|{{ 'a'|safe is escaped }}|{{ ['a'|safe] }}") ==
        "<a><|aa&lt;|True|[Markup('a')]");
  CHECK(render("{{ ('<x>'|safe).upper() + '<' }}|{{ ('{}'|safe).format('<') }}|{{ ('a'|safe)|replace('a', 'b') + '<' }}") ==
        "<X>&lt;|&lt;|b<");
  CHECK(render("{{ {'a'|safe: 1}['a'] }}|{{ ('a'|safe)|tojson }}") == "1|\"a\"");
}

TEST_CASE("jinja: errors say what and where, as jinja2 words them", "[jinja]") {
  CHECK_THAT(error_of("a\n{{ raise_exception('no system role') }}"), Catch::Equals("line 2: no system role"));
  CHECK_THAT(error_of("{{ x.y }}"), Catch::Contains("'x' is undefined"));
  CHECK_THAT(error_of("{{ 1 + 'a' }}"), Catch::Contains("unsupported operand type(s) for +: 'int' and 'str'"));
  CHECK_THAT(error_of("{{ x|nosuchfilter }}"), Catch::Contains("No filter named 'nosuchfilter'"));
  CHECK_THAT(error_of("{% if x %}"), Catch::Contains("expected 'endif'"));
  CHECK_THAT(error_of("{% blah %}"), Catch::Contains("unknown tag 'blah'"));
  CHECK_THAT(error_of("{{ 'a' }"), Catch::Contains("line 1"));
  // The ImmutableSandboxedEnvironment refuses to change lists and dicts.
  CHECK_THAT(error_of("{{ xs.append(1) }}", R"({"xs": []})"),
             Catch::Contains("access to attribute 'append' of 'list' object is unsafe"));
}

TEST_CASE("jinja: a template that would not end fails within its bounds", "[jinja]") {
  RenderLimits limits;
  limits.max_steps = 100'000;
  CHECK_THAT(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", limits),
             Catch::Contains("ran past 100000 steps"));
  CHECK_THAT(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), Catch::Contains("macro calls nested deeper"));
  limits = {};
  limits.max_output_bytes = 1000;
  CHECK_THAT(error_of("{% for i in range(2000) %}x{% endfor %}", "{}", limits), Catch::Contains("output passed 1000 bytes"));
  CHECK_THAT(error_of("{{ 'x' * 100000000000 }}"), Catch::Contains("output limit"));
  CHECK_THAT(error_of("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}"), Catch::Contains("nested too deeply"));
  CHECK_THAT(error_of(std::string(300, '-') + "{{ " + std::string(300, '-') + "1 }}"), Catch::Contains("nested too deeply"));
  CHECK_THAT(error_of("{{ range(1000000)|length }}"), Catch::Contains("Range too big"));
}

}  // namespace
}  // namespace pagedllm::jinja
