#!/usr/bin/env python3
"""Keeps the documentation pointing at what exists (ctest DocsNameWhatExists).

    check_docs.py REPO_ROOT

Reads every Markdown file of the repository (README.md, docs/**/*.md, and
any other *.md such as model/README.md), leaving out build folders (build/,
build-*/), hidden folders (.git, .venvs, ...) and third-party folders
(THIRD_PARTY), and checks every text in backticks in them:
- a repository path (its first part a top-level folder of the repository,
  e.g. `kernels/cuda/gemm.h`, `tests/build/`, `kernels/cpu/*_scalar.cc`)
  must name a file or folder that exists (a glob must match one);
- a C++ name (`LlamaModel`, `Backend::ScaleRows`, `kMaxTreeSumParts`,
  `GemmE4m3BlockSums`: CamelCase, a kConstant, or a qualified name) must
  appear as a word in the sources, every part of a qualified one.
Words of other tools (CUDA's, cuBLASLt's, NCCL's, PyTorch's) are left alone
when they are upper case or start with their library's prefix; so are
plain capitalized or lowerCamel words (prose, YAML fields) and two-letter
math (`qA`). Prints each name that points nowhere with its file and line; exits 1
when there is one, 0 otherwise.
"""

import glob
import os
import re
import sys

# Where C++ names are looked for.
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".proto", ".py", ".sh", ".cmake",
                   "CMakeLists.txt", "Makefile", ".yaml", ".yml")
# Prefixes of other libraries' names that the docs may cite.
FOREIGN = ("cublas", "CUBLAS", "cuda", "CUDA", "nccl", "NCCL", "torch",
           "absl", "grpc", "gloo", "pcre2", "PCRE2", "utf8proc", "__nv",
           "SIG")
# Folders whose Markdown is someone else's (and fuzz corpora's).
THIRD_PARTY = ("third_party", "third-party", "external", "vendor",
               "node_modules", "site-packages", "corpus")
CPP_NAME = re.compile(r"^~?[A-Za-z_][A-Za-z0-9_]*(::~?[A-Za-z_][A-Za-z0-9_]*)*"
                      r"(\(\))?$")


def top_folders(root):
    return {e for e in os.listdir(root)
            if os.path.isdir(os.path.join(root, e)) and not e.startswith(".")
            and e not in ("build",) and not e.startswith("build-")} | {".ci"}


def skipped_folder(name):
    """Build output, hidden and third-party folders: neither docs nor sources."""
    return (name.startswith(".") or name == "build" or name.startswith("build-")
            or name in THIRD_PARTY)


def markdown_files(root):
    """README.md first, then every other *.md outside skipped folders."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not skipped_folder(d))
        found += [os.path.join(folder, f) for f in files if f.endswith(".md")]
    readme = os.path.join(root, "README.md")
    return [readme] + sorted(f for f in found
                             if os.path.normpath(f) != os.path.normpath(readme))


def source_words(root):
    words = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not skipped_folder(d)]
        for f in files:
            if not f.endswith(SOURCE_SUFFIXES):
                continue
            try:
                with open(os.path.join(folder, f), encoding="utf-8",
                          errors="replace") as h:
                    words.update(re.findall(r"[A-Za-z_~][A-Za-z0-9_]*",
                                            h.read()))
            except OSError:
                pass
    return words


def is_cpp_name(text):
    if not CPP_NAME.match(text) or text.startswith(FOREIGN):
        return False
    name = text[:-2] if text.endswith("()") else text
    if "::" in name:
        return True
    if len(name) <= 2 or name.upper() == name:
        return False  # math (qA), or a constant of some other library
    # octet's own shapes: CamelCase types and functions (an upper-case
    # letter after the first), kConstants. A plain capitalized word, or a
    # lowerCamel one (a YAML field), is prose or some other tool's.
    if name[0].isupper():
        return any(c.isupper() for c in name[1:])
    return name[0] == "k" and name[1].isupper()


def check_path(root, text, folders):
    path = text.rstrip("/")
    first = path.split("/")[0]
    if "/" not in path or first not in folders:
        return True  # not a repository path
    if any(c in path for c in "*?["):
        return bool(glob.glob(os.path.join(root, path)))
    return os.path.exists(os.path.join(root, path))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    folders = top_folders(root)
    words = source_words(root)
    docs = markdown_files(root)
    bad = []
    for doc in docs:
        with open(doc, encoding="utf-8") as h:
            lines = h.read().split("\n")
        fenced = False
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced:
                continue
            for text in re.findall(r"`([^`\n]+)`", line):
                text = text.strip()
                where = f"{os.path.relpath(doc, root)}:{number}"
                if re.match(r"^[\w.*?\[\]-]+(/[\w.*?\[\]-]*)+$", text):
                    if not check_path(root, text, folders):
                        bad.append(f"{where}: `{text}` names no file")
                elif is_cpp_name(text):
                    name = text[:-2] if text.endswith("()") else text
                    missing = [p for p in name.split("::")
                               if p.lstrip("~") not in words]
                    if missing:
                        bad.append(f"{where}: `{text}` is in no source "
                                   f"({', '.join(missing)})")
    for b in bad:
        print(b)
    print(f"check_docs: {len(docs)} documents, "
          f"{'every name points at something' if not bad else f'{len(bad)} names point nowhere'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
