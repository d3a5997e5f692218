// jinja::Template in-process: whitespace control, scoping, loop variables,
// Python's printing and arithmetic, the refusals (each naming its
// construct), the limits, and raise_exception. The byte-for-byte comparison
// with jinja2 on real chat templates is ChatTemplatesMatchJinja2
// (jinja2_oracle.py); these pin the rules that comparison relies on.
#include "jinja/template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace octet::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string Render(const std::string& source,
                   const Json& context = Json::object()) {
  auto t = Template::Parse(source);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  auto out = t->Render(context);
  if (!out.ok()) return "RENDER ERROR: " + std::string(out.status().message());
  return *out;
}

std::string ParseError(const std::string& source) {
  auto t = Template::Parse(source);
  return t.ok() ? "parsed" : std::string(t.status().message());
}

TEST(JinjaWhitespace, TrimBlocksDropsTheNewlineAfterABlockTag) {
  EXPECT_EQ(Render("{% if true %}\nyes\n{% endif %}\nend"), "yes\nend");
}

TEST(JinjaWhitespace, LstripBlocksDropsIndentBeforeABlockTag) {
  EXPECT_EQ(Render("a\n    {% if true %}\n    b\n    {% endif %}\nc"),
            "a\n    b\nc");
  // Not before {{ }}, and not with {%+.
  EXPECT_EQ(Render("a\n  {{ 'x' }}"), "a\n  x");
  EXPECT_EQ(Render("a\n  {%+ if true %}x{% endif %}"), "a\n  x");
}

TEST(JinjaWhitespace, MinusStripsAllWhitespaceOnItsSide) {
  EXPECT_EQ(Render("a  \n\n  {{- 'b' -}}  \n\n  c"), "abc");
  EXPECT_EQ(Render("a \n {%- if true -%} \n b {%- endif %}"), "ab");
  EXPECT_EQ(Render("a {#- comment -#} b"), "ab");
}

TEST(JinjaWhitespace, OneTrailingNewlineIsDroppedAndNewlinesAreNormalized) {
  EXPECT_EQ(Render("x\n"), "x");
  EXPECT_EQ(Render("x\n\n"), "x\n");
  EXPECT_EQ(Render("a\r\nb\rc"), "a\nb\nc");
}

TEST(JinjaWhitespace, RawBlocksAreLiteral) {
  EXPECT_EQ(Render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
}

TEST(JinjaScoping, SetInsideAForBodyDoesNotLeakOrCarryOver) {
  EXPECT_EQ(
      Render(
          "{% set x = 5 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{{ x }}"
          "{% endfor %}{{ x }}"),
      "[5]1[5]25");
  EXPECT_EQ(
      Render("{% for i in [1] %}{% set y = 1 %}{% endfor %}{{ y is defined }}"),
      "False");
}

TEST(JinjaScoping, IfBodiesShareTheirScopeAndNamespacesCarryState) {
  EXPECT_EQ(Render("{% if true %}{% set x = 1 %}{% endif %}{{ x }}"), "1");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for i in range(4) %}"
                   "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
}

TEST(JinjaLoops, LoopVariables) {
  EXPECT_EQ(
      Render(
          "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ "
          "loop.revindex }}"
          "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
          "{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}"),
      "1032TrueFalse3b;2121FalseFalse3ac;3210FalseTrue3b;");
}

TEST(JinjaLoops, FilterElseBreakContinueAndUnpacking) {
  EXPECT_EQ(
      Render("{% for x in range(10) if x is odd %}{% if x > 6 %}{% break %}{% "
             "endif %}"
             "{% if x == 3 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
      "15");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}",
                   Json{{"d", Json{{"b", 1}, {"a", 2}}}}),
            "b=1,a=2,");
}

TEST(JinjaValues, PrintLikePython) {
  EXPECT_EQ(Render("{{ none }} {{ true }} {{ 1.0 }} {{ 1e-5 }} {{ 1e16 }} {{ "
                   "0.1 + 0.2 }}"),
            "None True 1.0 1e-05 1e+16 0.30000000000000004");
  EXPECT_EQ(Render("{{ [1, 'a', none, {'k': \"it's\"}] }} {{ (1,) }}"),
            "[1, 'a', None, {'k': \"it's\"}] (1,)");
  EXPECT_EQ(Render("{{ missing }}|{{ missing is defined }}"), "|False");
}

TEST(JinjaValues, PythonArithmetic) {
  EXPECT_EQ(Render("{{ 7 // -2 }} {{ -7 % 3 }} {{ 3 / 2 }} {{ 4 / 2 }} {{ 2 ** "
                   "10 }} {{ 'ab' * 2 }}"
                   " {{ true + 1 }} {{ 1 == 1.0 }} {{ 'a' ~ 1 }}"),
            "-4 2 1.5 2.0 1024 abab 2 True a1");
  EXPECT_EQ(
      Render("{{ 'b' in 'abc' }} {{ 1 in [1, 2] }} {{ 'k' not in {'k': 1} }}"),
      "True True False");
}

TEST(JinjaValues, TojsonIsJsonDumpsWithoutAsciiEscapes) {
  Json ctx = {
      {"x", Json{{"b", "é\n"}, {"a", Json::array({1, 2.5, nullptr, true})}}}};
  EXPECT_EQ(Render("{{ x | tojson }}", ctx),
            "{\"b\": \"é\\n\", \"a\": [1, 2.5, null, true]}");
  EXPECT_EQ(Render("{{ x | tojson(indent=2, sort_keys=true) }}", ctx),
            "{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  "
            "\"b\": \"é\\n\"\n}");
}

TEST(JinjaRefusals, EachNamesTheConstructAndLine) {
  EXPECT_EQ(ParseError("a\nb\n{% macro m() %}{% endmacro %}"),
            "chat template line 3: '{% macro %}' is not supported");
  for (const char* tag : {"include", "import", "extends", "block", "call",
                          "filter", "with", "from", "autoescape", "do"}) {
    std::string source = std::string("{% ") + tag + " x %}";
    EXPECT_NE(ParseError(source).find(std::string("'{% ") + tag +
                                      " %}' is not supported"),
              std::string::npos)
        << tag;
  }
  EXPECT_NE(ParseError("{{ x | wordwrap }}").find("filter 'wordwrap'"),
            std::string::npos);
  EXPECT_NE(ParseError("{{ x is escaped }}").find("test 'escaped'"),
            std::string::npos);
  EXPECT_NE(ParseError("{{ x.format(1) }}").find("method '.format()'"),
            std::string::npos);
  EXPECT_NE(ParseError("{{ lipsum() }}").find("function 'lipsum()'"),
            std::string::npos);
  EXPECT_NE(ParseError("{% for x in y %}").find("line 1"), std::string::npos);
}

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(Render("\n{{ x.y }}"),
            "RENDER ERROR: chat template line 2: 'x' is undefined (reading "
            "'.y' of it)");
  EXPECT_NE(Render("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(
      Render("{{ [1].strip() }}").find("'list' object has no method 'strip'"),
      std::string::npos);
}

TEST(JinjaErrors, RaiseExceptionSurfacesItsMessage) {
  auto t = Template::Parse("ok{{ raise_exception('Roles must alternate') }}");
  ASSERT_TRUE(t.ok());
  auto out = t->Render(nlohmann::json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("Roles must alternate"),
            std::string::npos);
}

// Each bound ends a render with an error naming it. Small limits keep the
// work, and so the test's time, small on any machine and sanitizer; the
// defaults (16 MiB, 10 million iterations, 1 GiB) are the same code.
std::string RenderWithin(const std::string& source, Limits limits) {
  Options options;
  options.limits = limits;
  auto t = Template::Parse(source, options);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  auto out = t->Render(Json::object());
  if (!out.ok()) return "RENDER ERROR: " + std::string(out.status().message());
  return *out;
}

TEST(JinjaLimits, EachBoundEndsTheRenderNamingIt) {
  const Limits small = {
      .max_output = 1 << 16, .max_iterations = 10'000, .max_work = 1 << 20};
  EXPECT_NE(
      Render("{% for i in range(1000000000) %}x{% endfor %}").find("range()"),
      std::string::npos);
  EXPECT_NE(
      RenderWithin(
          "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}"
          "{% endfor %}",
          small)
          .find("loop iterations"),
      std::string::npos);
  EXPECT_NE(RenderWithin("{% for i in range(1000) %}{{ 'x' * 1000 }}"
                         "{% endfor %}",
                         small)
                .find("output is over"),
            std::string::npos);
  EXPECT_NE(RenderWithin("{{ 'x' * 100000000 }}", small).find("bytes"),
            std::string::npos);
  // Within the bounds, the same kind of template renders.
  EXPECT_EQ(RenderWithin("{% for i in range(3) %}{{ i }}{% endfor %}", small),
            "012");
}

TEST(JinjaLimits, DeepNestingIsAnErrorNotACrash) {
  EXPECT_NE(ParseError("{{ " + std::string(100000, '(') + "1" +
                       std::string(100000, ')') + " }}")
                .find("nesting"),
            std::string::npos);
  std::string ifs;
  for (int i = 0; i < 200; ++i) ifs += "{% if true %}";
  EXPECT_NE(ParseError(ifs).find("nesting"), std::string::npos);
  EXPECT_NE(Render("{% set ns = namespace() %}{% set ns.me = [ns] %}")
                .find("a namespace cannot hold a namespace"),
            std::string::npos);
}

TEST(JinjaRealTemplates, SmolLM2AddsItsDefaultSystemPrompt) {
  std::ifstream in(std::string(OCTET_CHAT_TEMPLATES_DIR) +
                   "/SmolLM2-135M-Instruct.jinja");
  std::stringstream source;
  source << in.rdbuf();
  Json ctx = {
      {"messages", Json::array({Json{{"role", "user"}, {"content", "Hi"}}})},
      {"add_generation_prompt", true}};
  EXPECT_EQ(Render(source.str(), ctx),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
            "trained by "
            "Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>"
            "assistant\n");
}

}  // namespace
}  // namespace octet::jinja
