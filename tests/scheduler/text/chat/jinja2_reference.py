#!/usr/bin/env python3
"""Renders the tool-calling chat templates with Python's Jinja2, set up as Hugging Face
transformers' apply_chat_template sets it up, for every conversation of corpus.json with
add_generation_prompt true and false. The second reference of scripts/check-chat-templates-jinja2.sh
(the first, @huggingface/jinja, is reference.js): Jinja2 is what model authors test templates with.

The environment (transformers' chat_template_utils.py, _compile_jinja_template, and
apply_chat_template): an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks on,
keep_trailing_newline and autoescape off (Jinja2's defaults), the loopcontrols extension
(break, continue) and transformers' {% generation %} tag (which renders its body); the filter
tojson replaced by json.dumps(x, ensure_ascii=False, indent=, separators=, sort_keys=); the
globals raise_exception (raises TemplateError(message)) and strftime_now (datetime.now()
.strftime). The template source is used as is. render() receives messages, tools (None when the
conversation has none), documents (None), add_generation_prompt, the tokenizer's special tokens
(bos_token, eos_token) and the conversation's extra variables (e.g. enable_thinking).

A template is tool-calling when its source mentions `tools` or `tool_calls`.

Input: the {"templates": ...} object reference.js prints with --templates-only, corpus.json, and
optionally snippet files (jinja2_snippets.json: small templates, one Python construct each, with
their own variables), rendered in the same environment.
Output (JSON, the shape reference.js prints):
  {"templates": {family: {"source", "bos_token", "eos_token", "package"[, "parse_error"]}},
   "cases": [{"family", "conversation", "add_generation_prompt",
              "output" | "error" and "raised" (true: the template's raise_exception)}],
   "snippets": [{"name", "output" | "error", "raised" and "phase": "parse"|"render"}]}
strftime_now reads a fixed clock, 2024-07-26 13:45 (what the C++ side passes as
ChatRenderOptions::now, in UTC).
Usage: python3 jinja2_reference.py templates.json corpus.json [snippets.json...] > jinja2.json
"""

import datetime
import json
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2024, 7, 26, 13, 45, 0)


class TemplateRaised(jinja2.exceptions.TemplateError):
    """What raise_exception raises: transformers raises TemplateError(message); the subclass
    only lets this script tell the template's own errors from Jinja2's."""


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}: outside assistant-mask tracking it
    renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def raise_exception(message):
    raise TemplateRaised(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    return NOW.strftime(format)


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def is_tool_calling(source):
    return "tools" in source or "tool_calls" in source


def messages_of(conversation):
    """The messages as Pagoda's ChatTemplate::Context builds them, in the same key order."""
    out = []
    for m in conversation["messages"]:
        message = {"role": m["role"], "content": m["content"]}
        for key in ("name", "tool_calls", "tool_call_id"):
            if key in m:
                message[key] = m[key]
        message.update(m.get("extra", {}))
        out.append(message)
    return out


def render_all(templates, corpus):
    env = make_environment()
    chosen = {f: t for f, t in templates.items() if is_tool_calling(t["source"])}
    cases = []
    for family, info in chosen.items():
        try:
            template = env.from_string(info["source"])
        except Exception as e:  # TemplateSyntaxError, or Python's own for generated code
            info["parse_error"] = f"{type(e).__name__}: {e}"
            continue
        for conversation in corpus["conversations"]:
            for add_generation_prompt in (True, False):
                case = {"family": family, "conversation": conversation["name"],
                        "add_generation_prompt": add_generation_prompt}
                variables = {"bos_token": info["bos_token"], "eos_token": info["eos_token"]}
                variables.update(conversation.get("extra", {}))
                try:
                    case["output"] = template.render(
                        messages=messages_of(conversation), tools=conversation.get("tools"),
                        documents=None, add_generation_prompt=add_generation_prompt, **variables)
                except TemplateRaised as e:
                    case.update(error=str(e), raised=True)
                except Exception as e:  # Jinja2's own errors: only the failure is compared
                    case.update(error=f"{type(e).__name__}: {e}", raised=False)
                cases.append(case)
    return {"templates": chosen, "cases": cases}


def render_snippets(snippet_files):
    env = make_environment()
    results = []
    for snippet_set in snippet_files:
        for snippet in snippet_set["snippets"]:
            result = {"name": snippet["name"]}
            try:
                template = env.from_string(snippet["template"])
            except Exception as e:  # TemplateSyntaxError, or Python's own for generated code
                result.update(error=f"{type(e).__name__}: {e}", raised=False, phase="parse")
                results.append(result)
                continue
            try:
                result["output"] = template.render(**snippet.get("context", {}))
            except TemplateRaised as e:
                result.update(error=str(e), raised=True, phase="render")
            except Exception as e:  # Jinja2's own errors: only the failure is compared
                result.update(error=f"{type(e).__name__}: {e}", raised=False, phase="render")
            results.append(result)
    return results


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: jinja2_reference.py templates.json corpus.json [snippets.json...]")
    with open(sys.argv[1], encoding="utf-8") as f:
        templates = json.load(f)["templates"]
    with open(sys.argv[2], encoding="utf-8") as f:
        corpus = json.load(f)
    snippet_files = []
    for path in sys.argv[3:]:
        with open(path, encoding="utf-8") as f:
            snippet_files.append(json.load(f))
    out = render_all(templates, corpus)
    out["snippets"] = render_snippets(snippet_files)
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
