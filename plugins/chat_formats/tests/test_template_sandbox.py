"""A chat template comes from a GGUF file: one that loops, recurses or repeats without end is refused with a
TemplateError instead of hanging the process or filling its memory (Jinja's sandbox bounds none of it); it
may change the lists and dicts it makes, never the values it is given."""

from __future__ import annotations

import time

import pytest

from llama_cpp_chat_formats import template_sandbox
from llama_cpp_chat_formats.jinja import Jinja2ChatFormatter, TemplateError

MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


def render(template: str, **variables: object) -> str:
    return Jinja2ChatFormatter(template, eos_token="</s>", bos_token="<s>").render(MESSAGES, **variables)


@pytest.mark.parametrize(("template", "reason"), [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "loop steps and calls"),
    ("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
     "loop steps and calls"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nests macro calls or blocks too deeply"),
    ("{{ 'x' * 10 ** 10 }}", "repeats 1 items 10000000000 times"),
    ("{{ 10 ** 10 * ['x', 'y'] }}", "repeats 2 items 10000000000 times"),
    ("{{ 2 ** 100000000 }}", "raises 2 to the power 100000000"),
    ("{{ 10.0 ** 100000 }}", "OverflowError"),
], ids=["nested loops", "macro fan-out", "endless recursion", "string repetition", "list repetition",
        "integer power", "float power"])
def test_a_template_without_bounds_is_refused(template: str, reason: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_sandbox, "MAX_STEPS", 200_000)  # the same rule, reached sooner
    started = time.perf_counter()
    with pytest.raises(TemplateError, match=reason):
        render(template)
    assert time.perf_counter() - started < 10


def test_the_budget_is_per_rendering_and_counts_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_sandbox, "MAX_STEPS", 1000)
    within = "{% for i in range(998) %}{% endfor %}done"  # 998 steps, and calling range and the loop: 1000
    assert render(within) == "done"
    assert render(within) == "done"  # a fresh budget each time
    with pytest.raises(TemplateError, match="more than 1000 loop steps"):
        render("{% for i in range(999) %}{% endfor %}done")
    with pytest.raises(TemplateError, match="more than 1000 loop steps"):  # calls count too
        render("{% macro f() %}{% endmacro %}{% for i in range(600) %}{{ f() }}{% endfor %}")


def test_what_real_templates_do_is_unchanged() -> None:
    template = ("{% for m in messages if m.role == 'user' recursive %}{{ loop.index }}/{{ loop.length }}"
                "{% endfor %}|{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}"
                "{% for x in [] %}{% else %}empty{% endfor %}|{{ '  ' * 2 }}{{ [0] * 2 }}{{ 2 ** 10 }}"
                "{{ 2 ** -1 }}{{ 'ab' * -1 }}")
    assert render(template) == "1/1|a=1empty|    [0, 0]10240.5"


def test_a_template_changes_its_own_lists_and_dicts_but_not_the_callers() -> None:
    own = ("{% set queue = namespace(ids=[]) %}{% set _ = queue.ids.append('a') %}{% set _ = queue.ids.append('b') %}"
           "{{ queue.ids.pop(0) }}{{ queue.ids }}{% set d = {} %}{% set _ = d.update({'k': 1}) %}{{ d }}"
           "{% set copy = messages + [] %}{% set _ = copy.append(1) %}{{ copy | length }}")
    assert render(own) == "a['b']{'k': 1}3"
    tools = [{"type": "function", "function": {"name": "f"}}]
    for template in ("{% set _ = messages.append(1) %}", "{% set _ = messages[0].update({'role': 'x'}) %}",
                     "{% set copy = messages + [] %}{% set _ = copy[0].pop('role') %}",
                     "{% set _ = tools[0]['function'].clear() %}"):
        with pytest.raises(TemplateError, match="change the values it was given"):
            render(template, tools=tools)
    assert MESSAGES == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert tools == [{"type": "function", "function": {"name": "f"}}]


def test_safe_is_plain_text_so_nothing_added_to_it_is_escaped() -> None:
    # functionary v3.1's "Use the function '"|safe + name + ... + tool | tojson: Jinja's Markup escaped the rest
    assert render("""{{ "Use '"|safe + name + "'\\n"|safe + {"a": name} | tojson }}""", name='x"y') == \
        'Use \'x"y\'\n{"a": "x\\"y"}'
