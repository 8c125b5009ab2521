// The Jinja engine on its own: constructs with written expectations (the chat_templates test
// compares the same and more against @huggingface/jinja itself), error paths, and the limits that
// keep hostile templates from exhausting time, memory or the stack.
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/text/jinja/js_string.h"
#include "scheduler/text/jinja/template.h"
#include "tests/support/status_assertions.h"

namespace pagoda::scheduler::text::jinja {
namespace {

using Json = nlohmann::ordered_json;
const auto kNow = std::chrono::system_clock::time_point(std::chrono::seconds(1722001500));

absl::StatusOr<std::string> Render(const std::string& source, const Json& context = Json::object(),
                                   const RenderLimits& limits = RenderLimits{}) {
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(context, limits, kNow);
}

std::string Ok(const std::string& source, const Json& context = Json::object()) {
  absl::StatusOr<std::string> out = Render(source, context);
  EXPECT_OK(out) << source;
  return out.ok() ? *out : "<error>";
}

std::string Error(const std::string& source, const Json& context = Json::object(),
                  const RenderLimits& limits = RenderLimits{}) {
  absl::StatusOr<std::string> out = Render(source, context, limits);
  EXPECT_FALSE(out.ok()) << source << " rendered " << (out.ok() ? *out : "");
  if (out.ok()) return "";
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << source;
  return std::string(out.status().message());
}

TEST(JinjaTemplate, PrintsValuesAsTheReference) {
  EXPECT_EQ(Ok("{{ 1 }} {{ 1.0 }} {{ 2.5 }} {{ 10 / 4 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"),
            "1 1.0 2.5 2.5 3 -1 1024");
  EXPECT_EQ(Ok("{{ 10 ** 21 }} {{ 1 / 3 }} {{ 0.1 + 0.2 }} {{ 1 / 0 }}"),
            "1e+21 0.3333333333333333 0.30000000000000004 Infinity");
  EXPECT_EQ(Ok("[{{ true }}][{{ none }}][{{ nothing }}][{{ [1, 'a', none] }}][{{ {'k': 1.0} }}]"),
            "[true][][][[1, \"a\", null]][{\"k\": 1}]");
  EXPECT_EQ(Ok("{{ 1 ~ 'a' ~ 1.0 ~ [1, 2] }} {{ 'x' + 1 }}"), "1a11,2 x1");
}

TEST(JinjaTemplate, ControlFlow) {
  EXPECT_EQ(Ok("{% if x > 1 %}big{% elif x == 1 %}one{% else %}small{% endif %}", {{"x", 1}}),
            "one");
  EXPECT_EQ(Ok("{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
               "{{ loop.length }}{{ loop.revindex }};{% endfor %}",
               {{"l", {"a", "b"}}}),
            "10truefalse22;21falsetrue21;");
  EXPECT_EQ(Ok("{% for x in l if x != 2 %}{{ x }}{% else %}none{% endfor %}", {{"l", {1, 2, 3}}}),
            "13");
  EXPECT_EQ(Ok("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Ok("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", {{"d", {{"a", 1}}}}),
            "a=1,");
  EXPECT_EQ(Ok("{% for x in range(9) %}{% if x == 1 %}{% continue %}{% endif %}"
               "{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "02");
  EXPECT_EQ(Ok("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
               "{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(Ok("{% set x %}in {{ 1 }}{% endset %}[{{ x }}]"), "[in 1]");
  EXPECT_EQ(Ok("{% macro m(a, b='d') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}"),
            "1d12");
  EXPECT_EQ(Ok("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}x{% endcall %}"), "<x>");
  EXPECT_EQ(Ok("{% filter upper %}ab{% endfilter %}"), "AB");
}

TEST(JinjaTemplate, WhitespaceControl) {
  EXPECT_EQ(Ok("a  {%- if true -%}  b  {%- endif %}\nc"), "abc");
  EXPECT_EQ(Ok("a {{- ' x ' -}} b"), "a x b");
  EXPECT_EQ(Ok("x\n  {% if true %}\n  y\n  {% endif %}\nz\n"), "x\n  y\nz");  // lstrip/trim
  EXPECT_EQ(Ok("a {#- note -#} b{# c #}"), "ab");
}

TEST(JinjaTemplate, MembersSlicesAndStrings) {
  Json ctx = {{"l", {1, 2, 3, 4}}, {"s", "añ🙂"}, {"d", {{"a", {{"b", 5}}}}}};
  EXPECT_EQ(Ok("{{ l[-1] }} {{ l[1:3] }} {{ l[::-1] }} {{ l[::2] }} {{ l[9] }}", ctx),
            "4 [2, 3] [4, 3, 2, 1] [1, 3] ");
  EXPECT_EQ(Ok("{{ s|length }} {{ s[::-1] }} {{ d.a.b }} {{ d['a']['b'] }} {{ d.x.y }}", ctx),
            "4 🙂ña 5 5 ");  // lengths count UTF-16 units, as JavaScript
  EXPECT_EQ(Ok("{{ '  Hi there  '.strip().upper() }} {{ 'a-b'.split('-') }} {{ 'abc'.replace('b',"
               " 'x') }} {{ 'ab'.startswith('a') }} {{ 'hello world'|title }}"),
            "HI THERE [\"a\", \"b\"] axc true Hello World");
}

TEST(JinjaTemplate, FiltersAndTests) {
  Json ctx = {{"m", {{{"role", "user"}, {"content", "a"}}, {{"role", "bot"}, {"content", "b"}}}}};
  EXPECT_EQ(Ok("{{ m|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}"
               "|{{ m|rejectattr('role', 'equalto', 'user')|list|length }}|{{ m|first|tojson }}",
               ctx),
            "a|1|{\"role\": \"user\", \"content\": \"a\"}");
  EXPECT_EQ(Ok("{{ {'a': [1, {}]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1,\n    {}\n  ]\n}");
  EXPECT_EQ(
      Ok("{{ x|default('d') }} {{ ''|default('e', true) }} {{ ' 4'|int + 1 }} {{ [2, 1]|sort }}"),
      "d e 5 [1, 2]");
  EXPECT_EQ(Ok("{{ x is defined }} {{ 1 is number }} {{ 'a' is string }} {{ m is iterable }} "
               "{{ m[0] is mapping }} {{ none is none }} {{ 3 is odd }}",
               ctx),
            "false true true true true true true");
  EXPECT_EQ(Ok("{{ 'a' in 'cat' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }}"),
            "true false true");
}

TEST(JinjaTemplate, GlobalsAndClock) {
  EXPECT_EQ(Ok("{{ strftime_now('%d %b %Y %H:%M') }}"), "26 Jul 2024 13:45");
  EXPECT_EQ(Ok("{{ range(3) }} {{ range(5, 0, -2) }}"), "[0, 1, 2] [5, 3, 1]");
  EXPECT_EQ(Ok("{{ True }} {{ False }} {{ None is none }}"), "true false true");
}

TEST(JinjaTemplate, ErrorsCarryTheTemplatesMessage) {
  EXPECT_EQ(Error("{{ raise_exception('Roles must alternate!') }}"), "Roles must alternate!");
  EXPECT_EQ(Error("{% if true %}{{ raise_exception('n=' ~ 3) }}{% endif %}"), "n=3");
  EXPECT_EQ(Error("{{ x + 1 }}"), "Cannot perform operation + on undefined values");
  EXPECT_EQ(Error("{{ x|length }}"), "Cannot apply filter \"length\" to type: UndefinedValue");
  EXPECT_EQ(Error("{{ nope() }}"),
            "Cannot call something that is not a function: got UndefinedValue");
  EXPECT_EQ(Error("{% for x in 3 %}{% endfor %}"),
            "Expected iterable or object type in for loop: got IntegerValue");
}

TEST(JinjaTemplate, SyntaxErrorsAreInvalidArgument) {
  for (const char* source : {"{% if x %}unterminated", "{{ 1 + }}", "{% frobnicate %}",
                             "{{ 'open string }}", "{# open comment", "{{ a.}}", "{% for %}",
                             "{% endif %}", "{{ (1, 2 }}", "{% macro m(a=1, b) %}{% endmacro %}"}) {
    absl::StatusOr<Template> t = Template::Parse(source);
    ASSERT_FALSE(t.ok()) << source;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("syntax error"), std::string::npos) << t.status();
  }
}

TEST(JinjaTemplate, LimitsStopHostileTemplates) {
  RenderLimits small;
  small.max_output_bytes = 1000;
  small.max_steps = 100'000;
  small.max_range = 1000;
  small.max_call_depth = 20;
  // Output and string growth.
  EXPECT_NE(Error("{% for i in range(999) %}xxxxxxxxxx{% endfor %}", Json::object(), small)
                .find("1000 bytes"),
            std::string::npos);
  EXPECT_NE(Error("{% set s = 'ab' %}{% for i in range(40) %}{% set s = s + s %}{% endfor %}",
                  Json::object(), small)
                .find("bytes"),
            std::string::npos);
  // Work: nested loops, and arrays doubling.
  EXPECT_NE(Error("{% for a in range(999) %}{% for b in range(999) %}{% endfor %}{% endfor %}",
                  Json::object(), small)
                .find("work limit"),
            std::string::npos);
  EXPECT_NE(Error("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + "
                  "ns.l %}{% endfor %}",
                  Json::object(), small)
                .find("work limit"),
            std::string::npos);
  EXPECT_NE(Error("{{ range(1000000000) }}", Json::object(), small).find("range()"),
            std::string::npos);
  // Recursion: a macro calling itself, and a namespace holding itself.
  EXPECT_NE(Error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", Json::object(), small)
                .find("deeper"),
            std::string::npos);
  EXPECT_NE(Error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}").find("nesting"),
            std::string::npos);
  // Values nested without end, and a small shared tree printed as a huge text.
  EXPECT_NE(Error("{% set ns = namespace(a=[]) %}{% for i in range(5000) %}{% set ns.a = [ns.a] %}"
                  "{% endfor %}")
                .find("nested deeper"),
            std::string::npos);
  EXPECT_NE(Error("{% set ns = namespace(a=['xxxxxxxx']) %}{% for i in range(40) %}"
                  "{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a|tojson }}",
                  Json::object(), small)
                .find("bytes"),
            std::string::npos);
  // Deep nesting in the source is refused at parse time (never a stack overflow).
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  absl::StatusOr<Template> t = Template::Parse(deep);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nesting"), std::string::npos) << t.status();
  std::string nested_ifs;
  for (int i = 0; i < 1000; ++i) nested_ifs += "{% if true %}";
  EXPECT_FALSE(Template::Parse(nested_ifs).ok());
  // Oversized sources.
  EXPECT_FALSE(Template::Parse(std::string(kMaxTemplateBytes + 1, 'x')).ok());
}

TEST(JinjaTemplate, HugeStringsCostTheirLength) {
  Json ctx = {{"s", std::string(1 << 20, 'a')}, {"n", std::string(5000, 'a') + "b"}};
  EXPECT_EQ(Ok("{{ n in s }} {{ s.split(n)|length }} {{ s.replace(n, 'x')|length }}", ctx),
            "false 1 1048576");
  EXPECT_NE(Error("{% for i in range(100000) %}{{ s[i] }}{% endfor %}", ctx).find("work limit"),
            std::string::npos);
  EXPECT_NE(Error("{% set t = s|replace('a', '\\n') %}{{ t|indent(1000, true, true) }}", ctx)
                .find("bytes"),
            std::string::npos);
}

TEST(JinjaTemplate, FindLinearAgreesWithFind) {
  std::string hay;
  for (int i = 0; i < 4000; ++i) hay += "abcab"[i * 7 % 5];
  for (size_t len : {1u, 5u, 33u, 40u, 100u}) {
    for (size_t at : {0u, 17u, 1000u, 3900u}) {
      std::string needle = hay.substr(at, len);
      for (size_t from : {0u, 5u, 2000u}) {
        EXPECT_EQ(FindLinear(hay, needle, from), hay.find(needle, from)) << len << " " << at;
      }
    }
  }
  EXPECT_EQ(FindLinear(hay, std::string(40, 'z')), std::string::npos);
}

TEST(JinjaTemplate, JsonInputKeepsJavaScriptOrder) {
  Json d = Json::parse(R"({"b": 1, "10": 2, "a": 3, "2": 4})");
  EXPECT_EQ(Ok("{{ d|tojson }} {{ v }}", {{"d", d}, {"v", 2.0}}),
            "{\"2\": 4, \"10\": 2, \"b\": 1, \"a\": 3} 2");
}

std::string Python(const std::string& source, const Json& context = Json::object()) {
  absl::StatusOr<Template> t = Template::Parse(source);
  EXPECT_OK(t) << source;
  if (!t.ok()) return "<error>";
  absl::StatusOr<std::string> out = t->Render(context, RenderLimits{}, kNow, Dialect::kPython);
  return out.ok() ? *out : "error: " + std::string(out.status().message());
}

// The Python dialect where it differs from the reference (chat_templates_jinja2 compares the same
// and more against Python's Jinja2 itself).
TEST(JinjaTemplate, PythonDialectRendersAsJinja2) {
  EXPECT_EQ(Python("{{ none }} {{ true }} {{ [1.0, 'it\\'s', {'k': none}] }} {{ 'a' ~ none }}"),
            "None True [1.0, \"it's\", {'k': None}] aNone");
  EXPECT_EQ(Python("{{ x }} {{ x | tojson }} {{ d | tojson }} {{ 0.00001 }} {{ -7 % 3 }}",
                   Json::parse(R"({"x": 1.0, "d": {"b": 1, "2": 2}})")),
            "1.0 1.0 {\"b\": 1, \"2\": 2} 1e-05 2");
  EXPECT_EQ(Python("{{ 'a' + 1 }}"), "error: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(Python("{{ 1 / 0 }}"), "error: division by zero");
  EXPECT_EQ(Python("{% for c in 'h\xC3\xA9' %}[{{ c }}]{% endfor %}"), "[h][\xC3\xA9]");
  EXPECT_EQ(Python("[{{ '\n\n a \n'.lstrip('\n') }}][{{ 'xyax'.strip('xy') }}][{{ [1] | trim }}]"),
            "[ a \n][a][[1]]");
  EXPECT_EQ(Python("{{ [1, 2, 3] | reject('in', [2]) | list }} {{ [0, 1] | select | list }}"),
            "[1, 3] [1]");
  EXPECT_EQ(Python("{{ m | selectattr('tool_calls', 'undefined') | list | length }}",
                   Json::parse(R"({"m": [{"role": "user"}, {"tool_calls": []}]})")),
            "1");
  // The same constructs in the JavaScript dialect keep the reference's behaviour.
  EXPECT_EQ(Ok("{{ none }}{{ true }} {{ 'a' + 1 }} {{ -7 % 3 }}"), "true a1 -1");
  EXPECT_EQ(Error("{{ [1] | reject('in', [1]) }}"), "Unknown ArrayValue filter: reject");
}

}  // namespace
}  // namespace pagoda::scheduler::text::jinja
