"""octet's chat templates against jinja2 (ctest ChatTemplatesMatchJinja2).

    jinja2_oracle.py --render build/bin/jinja_render --data DIR --work DIR

Builds the environment transformers' apply_chat_template renders in
(transformers/utils/chat_template_utils.py, _compile_jinja_template,
written out here so that transformers need not be installed):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
the AssistantTracker ({% generation %}) and loopcontrols extensions, the
globals raise_exception and strftime_now, and tojson as json.dumps with
ensure_ascii=False. Then, for every template DIR/*.jinja, every
conversation of DIR/conversations.json meant for it, and
add_generation_prompt false and true, renders with jinja2 and with
jinja_render on the same files: the outputs must be equal byte for byte,
and where jinja2 raises jinja_render must fail (and the other way round).
Every DIR/unsupported/*.jinja must be refused, the error naming what its
first line's {# refuse: TEXT #} says. Prints one summary line and each
mismatch with a diff; exits 1 on any mismatch.
"""

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(jinja2.ext.Extension):
    # transformers' extension: {% generation %} renders its body (and
    # records where, for assistant masks, which rendering does not need).
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [],
                               body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_jinja2(env, source, context):
    try:
        return env.from_string(source).render(**context), None
    except Exception as e:  # what apply_chat_template would raise
        return None, f"{type(e).__name__}: {e}"


def render_octet(binary, template_path, context_path):
    p = subprocess.run([binary, template_path, context_path],
                       capture_output=True, timeout=60)
    if p.returncode != 0:
        return None, p.stderr.decode("utf-8", "replace").strip()
    return p.stdout.decode("utf-8"), None


def diff(expected, got):
    return "".join(difflib.unified_diff(
        expected.splitlines(True), got.splitlines(True), "jinja2", "octet"))


def check_case(args, env, name, path, conv, agp, tokens):
    # transformers passes tools and documents always (None when not given).
    context = {"messages": conv["messages"], "tools": conv.get("tools"),
               "documents": None, "add_generation_prompt": agp, **tokens}
    context_path = os.path.join(args.work, "context.json")
    with open(context_path, "w", encoding="utf-8") as f:
        json.dump(context, f, ensure_ascii=False)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    want, want_err = render_jinja2(env, source, context)
    got, got_err = render_octet(args.render, path, context_path)
    label = f"{name} / {conv['name']} / add_generation_prompt={agp}"
    if want_err is not None and got_err is not None:
        return None
    if want_err is not None:
        return f"{label}: jinja2 raised ({want_err}) but octet rendered:\n{got}"
    if got_err is not None:
        return f"{label}: octet failed ({got_err}) but jinja2 rendered:\n{want}"
    if want != got:
        return f"{label}: outputs differ\n{diff(want, got)}"
    return None


def check_refusals(args, directory):
    failures = []
    count = 0
    context_path = os.path.join(args.work, "empty.json")
    with open(context_path, "w") as f:
        json.dump({"messages": []}, f)
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        with open(path, encoding="utf-8") as f:
            m = re.match(r"\{# refuse: (.*?) #\}", f.readline())
        if not m:
            failures.append(f"{name}: no '{{# refuse: TEXT #}}' first line")
            continue
        count += 1
        got, err = render_octet(args.render, path, context_path)
        if err is None:
            failures.append(f"unsupported/{name}: octet rendered it:\n{got}")
        elif m.group(1) not in err:
            failures.append(f"unsupported/{name}: the error does not name "
                            f"{m.group(1)!r}: {err}")
    return count, failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--render", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    with open(os.path.join(args.data, "conversations.json"), encoding="utf-8") as f:
        spec = json.load(f)
    env = environment()
    failures, cases = [], 0
    for name, tokens in spec["templates"].items():
        path = os.path.join(args.data, name + ".jinja")
        for conv in spec["conversations"]:
            if "only" in conv and name not in conv["only"]:
                continue
            for agp in (False, True):
                cases += 1
                failure = check_case(args, env, name, path, conv, agp, tokens)
                if failure:
                    failures.append(failure)
    refusals, refusal_failures = check_refusals(
        args, os.path.join(args.data, "unsupported"))
    failures += refusal_failures
    for failure in failures:
        print(failure)
    state = "all equal" if not failures else f"{len(failures)} mismatches"
    print(f"jinja2_oracle: {cases} render cases and {refusals} refusals "
          f"against jinja2 {jinja2.__version__}: {state}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
