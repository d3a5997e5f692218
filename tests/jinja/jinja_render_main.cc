// jinja_render TEMPLATE_FILE CONTEXT_JSON_FILE: renders the chat template
// with the context's variables and writes the result to stdout exactly (no
// newline added); on an error, writes it to stderr and exits 1. The
// jinja2 oracle (jinja2_oracle.py) compares its output with jinja2's. The
// context is read in document order (ordered_json), as Python's json does.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "jinja/template.h"
#include "nlohmann/json.hpp"

namespace {

bool ReadFile(const char* path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

int Fail(const std::string& message) {
  std::cerr << "jinja_render: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3)
    return Fail("usage: jinja_render TEMPLATE_FILE CONTEXT_JSON_FILE");
  std::string source, context_text;
  if (!ReadFile(argv[1], source))
    return Fail(std::string("cannot read ") + argv[1]);
  if (!ReadFile(argv[2], context_text))
    return Fail(std::string("cannot read ") + argv[2]);
  auto context = nlohmann::ordered_json::parse(context_text, nullptr, false);
  if (context.is_discarded())
    return Fail(std::string(argv[2]) + " is not JSON");
  auto tmpl = octet::jinja::Template::Parse(source);
  if (!tmpl.ok()) return Fail(std::string(tmpl.status().message()));
  auto out = tmpl->Render(context);
  if (!out.ok()) return Fail(std::string(out.status().message()));
  std::fwrite(out->data(), 1, out->size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}
