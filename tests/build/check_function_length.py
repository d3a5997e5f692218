#!/usr/bin/env python3
"""Keeps functions short enough to hold in one's head (ctest FunctionsFitInAHead).

    check_function_length.py REPO_ROOT [--limit N] [--all]

Reads every .h, .cuh, .cc and .cu file of the repository's source floors (not
tests/, not build folders) and finds each function body: a brace block that
follows a parameter list at namespace or class level. A body longer than
--limit lines (80), counted from its opening brace to its closing one, is
printed with its file, line and name, and the script exits 1. CUDA kernels
(__global__) are exempt: a kernel is one unit of device work and reads best
whole. Lambdas count toward the function they are in. --all prints every
function's length, longest first.

The parse is lexical (comments, strings and preprocessor lines removed,
braces classified by the text before them), which is enough for this
repository's style; it is not a C++ parser.
"""

import os
import re
import sys

FLOORS = ("base", "jinja", "kernels", "parallel", "rpc", "model", "worker",
          "coordinator", "tools", "proto")
SUFFIXES = (".h", ".cuh", ".cc", ".cu")


def strip(text):
    """Comments, string/char literals and preprocessor lines as spaces,
    newlines kept so that line numbers hold."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)  # the literal, emptied
            i = j + 1
        elif c == "#" and (i == 0 or text[i - 1] == "\n"):
            j = i
            while True:  # continued lines
                k = text.find("\n", j)
                if k < 0:
                    j = n
                    break
                if text[k - 1] != "\\":
                    j = k
                    break
                j = k + 1
                out.append("\n")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, body lines, is_kernel) of each function body."""
    s = strip(text)
    found = []
    last = 0  # where the text before the next brace starts
    line = 1
    opened = []  # open braces: (kind, line, name, kernel); kinds: "ns",
    # "class", "fn", "other"
    for i, c in enumerate(s):
        if c == "\n":
            line += 1
        elif c in ";":
            last = i + 1
        elif c == "{":
            head = " ".join(s[last:i].split())
            enclosing = opened[-1][0] if opened else "ns"
            kind = "other"
            name = ""
            if enclosing in ("ns", "class"):
                if re.match(r"^(inline )?namespace\b|^extern \"", head):
                    kind = "ns"
                elif re.search(r"\b(class|struct|union|enum)\b[^()]*$", head):
                    kind = "class"
                elif "(" in head and not head.endswith("="):
                    kind = "fn"
                    head = re.sub(r"__launch_bounds__\([^)]*\)", "", head)
                    m = re.search(r"([~\w:<>]+)\s*\(", head)
                    name = m.group(1) if m else head[:40]
            opened.append((kind, line, name, "__global__" in head))
            last = i + 1
        elif c == "}":
            if opened:
                kind, start, name, kernel = opened.pop()
                if kind == "fn":
                    found.append((name, start, line - start + 1, kernel))
            last = i + 1
    return found


def main(argv):
    root = argv[1]
    limit = 80
    if "--limit" in argv:
        limit = int(argv[argv.index("--limit") + 1])
    show_all = "--all" in argv
    rows = []
    for floor in FLOORS:
        for dirpath, _, files in os.walk(os.path.join(root, floor)):
            for f in sorted(files):
                if not f.endswith(SUFFIXES) or f.endswith(".pb.h"):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                rel = os.path.relpath(path, root)
                for name, start, length, kernel in functions(text):
                    rows.append((length, rel, start, name, kernel))
    rows.sort(reverse=True)
    long = [r for r in rows if r[0] > limit and not r[4]]
    for length, rel, start, name, kernel in (rows if show_all else long):
        tag = " (kernel, exempt)" if kernel else ""
        print(f"{rel}:{start}: {name}: {length} lines{tag}")
    if long:
        print(f"{len(long)} function(s) over {limit} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
